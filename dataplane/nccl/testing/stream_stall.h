// Holding a CUDA stream, for tests: work queued behind StallStream() cannot
// start until the stall is released (or 30 s passed), so a test can make
// an operation's work wait, on a GPU or on the CPU stand-in alike.
// Test-only. Depends on cuda_stream.h.
#ifndef RANKD_DATAPLANE_NCCL_TESTING_STREAM_STALL_H_
#define RANKD_DATAPLANE_NCCL_TESTING_STREAM_STALL_H_

#include <atomic>

#include "dataplane/nccl/cuda_stream.h"

namespace rankd::dataplane::nccl::testing {

struct Stall {
  std::atomic<bool> released{false};
};

// Queues a host function on `stream` that blocks until `released` is set
// or 30 s passed. The Stall is leaked on purpose (the host function may
// outlive a failed test); null when the host function could not be queued.
Stall* StallStream(const CudaStream& stream);

}  // namespace rankd::dataplane::nccl::testing

#endif  // RANKD_DATAPLANE_NCCL_TESTING_STREAM_STALL_H_
