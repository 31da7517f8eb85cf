#include "dataplane/nccl/testing/stream_capture.h"

#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/internal/cuda_call.h"
#include "dataplane/nccl/internal/native_abi.h"

namespace rankd::dataplane::nccl::testing {

StreamCapture::StreamCapture(const CudaStream& stream) : stream_(stream) {
  DeviceGuard guard(stream.device());
  began_ = guard.status();
  if (!began_.ok()) return;
  began_ = internal::Check(
      internal::Cuda().StreamBeginCapture(
          stream.get(), internal::kCudaStreamCaptureModeRelaxed),
      "cudaStreamBeginCapture");
}

StreamCapture::~StreamCapture() {
  if (began_.ok() && !ended_) (void)End();
}

absl::Status StreamCapture::End() {
  if (!began_.ok() || ended_) {
    return absl::FailedPreconditionError("no capture under way");
  }
  ended_ = true;
  DeviceGuard guard(stream_.device());
  if (!guard.status().ok()) return guard.status();
  internal::CudaGraph graph = nullptr;
  absl::Status ended =
      internal::Check(internal::Cuda().StreamEndCapture(stream_.get(), &graph),
                      "cudaStreamEndCapture");
  if (graph != nullptr) (void)internal::Cuda().GraphDestroy(graph);
  return ended;
}

}  // namespace rankd::dataplane::nccl::testing
