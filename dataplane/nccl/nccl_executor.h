// NcclExecutor: the NCCL backend's Executor (the "stream" of the
// CommunicationBackend contract, as gloo_executor.h is Gloo's): a CUDA
// stream on an executor lane. Copies share the stream. Operations pair by
// lane, as Gloo's executors do: an operation a member submits on lane e
// pairs with the others' on lane e, and each lane is its own ordering
// domain (docs/contract.md, "Ordering"; lane 0 is the session's own).
// Streams of one lane share its order: NCCL runs their work in submission
// order. Lanes below NcclSessionOptions::executors (nccl_options.h).
// Depends on dataplane/nccl/cuda_stream.h and absl.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_EXECUTOR_H_
#define RANKD_DATAPLANE_NCCL_NCCL_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "dataplane/nccl/cuda_stream.h"

namespace rankd::dataplane::nccl {

class NcclExecutor {
 public:
  // Runs on `stream` (shared, kept alive by the executor) on lane `lane`.
  explicit NcclExecutor(std::shared_ptr<CudaStream> stream, uint32_t lane = 0)
      : stream_(std::move(stream)), lane_(lane) {}
  // A new non-blocking stream on `device`, on executor lane `lane`; the
  // stream's creation error (CudaStream::Create) otherwise.
  static absl::StatusOr<NcclExecutor> Create(int device, uint32_t lane = 0);
  const std::shared_ptr<CudaStream>& stream() const { return stream_; }
  // The stream's device; -1 without a stream.
  int device() const { return stream_ == nullptr ? -1 : stream_->device(); }
  uint32_t lane() const { return lane_; }

 private:
  std::shared_ptr<CudaStream> stream_;
  uint32_t lane_ = 0;
};

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_EXECUTOR_H_
