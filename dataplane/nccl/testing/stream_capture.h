// A CUDA graph capture on a stream, for tests: what torch.cuda.graph or
// torch.compile(mode="reduce-overhead") does to the stream a rankd
// operation is submitted on. Works on a GPU and on the CPU stand-in alike.
// Test-only. Depends on cuda_stream.h.
#ifndef RANKD_DATAPLANE_NCCL_TESTING_STREAM_CAPTURE_H_
#define RANKD_DATAPLANE_NCCL_TESTING_STREAM_CAPTURE_H_

#include "absl/status/status.h"
#include "dataplane/nccl/cuda_stream.h"

struct CUgraph_st;

namespace rankd::dataplane::nccl::testing {

// Begins a capture on `stream` (cudaStreamBeginCapture, relaxed mode, so
// that only the stream's own work is in question, not what other threads
// may call meanwhile); End() ends it and destroys the graph it recorded,
// and so does the destructor when End() was not called. `stream` must
// outlive it.
class StreamCapture {
 public:
  explicit StreamCapture(const CudaStream& stream);
  ~StreamCapture();
  StreamCapture(const StreamCapture&) = delete;
  StreamCapture& operator=(const StreamCapture&) = delete;

  // Whether the capture began.
  const absl::Status& status() const { return began_; }
  // cudaStreamEndCapture's result (an error when something invalidated the
  // capture, e.g. a synchronization of the capturing stream), then
  // cudaGraphDestroy. FailedPrecondition when it did not begin or already
  // ended.
  absl::Status End();

 private:
  const CudaStream& stream_;
  absl::Status began_;
  bool ended_ = false;
};

}  // namespace rankd::dataplane::nccl::testing

#endif  // RANKD_DATAPLANE_NCCL_TESTING_STREAM_CAPTURE_H_
