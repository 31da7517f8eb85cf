#include "dataplane/nccl/cuda_stream.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/internal/cuda_call.h"
#include "dataplane/nccl/internal/native_abi.h"

namespace rankd::dataplane::nccl {

using internal::Check;
using internal::Cuda;

absl::StatusOr<std::shared_ptr<CudaStream>> CudaStream::Create(int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  internal::CudaStream stream = nullptr;
  absl::Status s = Check(
      Cuda().StreamCreateWithFlags(&stream, internal::kCudaStreamNonBlocking),
      "cudaStreamCreateWithFlags");
  if (!s.ok()) return s;
  return std::shared_ptr<CudaStream>(new CudaStream(stream, device));
}

absl::StatusOr<std::shared_ptr<CudaStream>> CudaStream::ForTransfers(
    int device) {
  static absl::Mutex mu;
  // Never destroyed: CUDA may already be torn down at static destruction.
  static auto* streams = new std::map<int, std::shared_ptr<CudaStream>>();
  absl::MutexLock lock(&mu);
  auto it = streams->find(device);
  if (it != streams->end()) return it->second;
  auto stream = Create(device);
  if (!stream.ok()) return stream.status();
  (*streams)[device] = *stream;
  return *stream;
}

CudaStream::~CudaStream() {
  if (stream_ == nullptr) return;
  DeviceGuard guard(device_);
  (void)Cuda().StreamDestroy(stream_);
}

absl::Status CudaStream::Synchronize() const {
  DeviceGuard guard(device_);
  return Check(Cuda().StreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::Status LaunchHostFunction(const CudaStream& stream, void (*fn)(void*),
                                void* arg) {
  DeviceGuard guard(stream.device());
  if (!guard.status().ok()) return guard.status();
  return Check(Cuda().LaunchHostFunc(stream.get(), fn, arg),
               "cudaLaunchHostFunc");
}

absl::StatusOr<bool> IsCapturing(CudaStreamHandle stream, int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  int status = internal::kCudaStreamCaptureStatusNone;
  const internal::CudaError e = Cuda().StreamIsCapturing(stream, &status);
  if (e == internal::kCudaErrorStreamCaptureImplicit) {
    (void)Cuda().GetLastError();
    return true;
  }
  absl::Status s = Check(e, "cudaStreamIsCapturing");
  if (!s.ok()) return s;
  return status != internal::kCudaStreamCaptureStatusNone;
}

absl::Status CheckNotCapturing(CudaStreamHandle stream, int device,
                               absl::string_view what) {
  absl::StatusOr<bool> capturing = IsCapturing(stream, device);
  if (!capturing.ok()) return capturing.status();
  if (!*capturing) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what,
      " is capturing a CUDA graph (cudaStreamIsCapturing); rankd's "
      "operations cannot be captured (each one finishes on the host: "
      "completion events, agreement records, aborts): submit it outside "
      "the capture (torch.cuda.graph, torch.compile "
      "mode=\"reduce-overhead\"). Nothing was queued"));
}

}  // namespace rankd::dataplane::nccl
