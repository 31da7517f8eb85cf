#include "dataplane/nccl/internal/cuda_call.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rankd::dataplane::nccl::internal {

const CudaRuntimeApi& Cuda() { return **LoadCudaRuntime(); }

absl::Status CudaErrorStatus(int error, absl::string_view what) {
  auto runtime = LoadCudaRuntime();
  std::string message =
      runtime.ok()
          ? absl::StrCat("cuda: ", what, ": ", (*runtime)->GetErrorName(error),
                         " (", (*runtime)->GetErrorString(error), ")")
          : absl::StrCat("cuda: ", what, ": error ", error);
  switch (error) {
    case kCudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case kCudaErrorNoDevice:
    case kCudaErrorInsufficientDriver:
    case kCudaErrorInvalidDevice:
    case kCudaErrorDevicesUnavailable:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status Check(CudaError error, absl::string_view what) {
  if (error == kCudaSuccess) return absl::OkStatus();
  (void)Cuda().GetLastError();
  return CudaErrorStatus(error, what);
}

}  // namespace rankd::dataplane::nccl::internal
