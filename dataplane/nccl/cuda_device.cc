#include "dataplane/nccl/cuda_device.h"

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/internal/cuda_call.h"
#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/internal/native_library.h"

namespace rankd::dataplane::nccl {

using internal::Check;
using internal::Cuda;
using internal::CudaError;
using internal::CudaRuntimeApi;

absl::Status CudaStatus(int cuda_error, absl::string_view what) {
  return internal::CudaErrorStatus(cuda_error, what);
}

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) {
    probe.reason = absl::StrCat("no GPU usable: ", runtime.status().message());
    return probe;
  }
  int count = 0;
  CudaError e = (*runtime)->GetDeviceCount(&count);
  if (e != internal::kCudaSuccess) {
    (void)(*runtime)->GetLastError();
    probe.reason = absl::StrCat(
        "no GPU usable: cudaGetDeviceCount: ", (*runtime)->GetErrorName(e),
        " (", (*runtime)->GetErrorString(e), ")");
    return probe;
  }
  if (count <= 0) {
    probe.reason = "no GPU: cudaGetDeviceCount returned 0";
    return probe;
  }
  probe.device_count = count;
  return probe;
}

DeviceGuard::DeviceGuard(int device) {
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) {
    status_ = absl::UnavailableError(absl::StrCat(
        "cuda: cudaSetDevice(", device, "): ", runtime.status().message()));
    return;
  }
  int current = -1;
  CudaError e = (*runtime)->GetDevice(&current);
  if (e != internal::kCudaSuccess) {
    status_ = Check(e, "cudaGetDevice");
    return;
  }
  if (current != device) {
    status_ = Check((*runtime)->SetDevice(device),
                    absl::StrCat("cudaSetDevice(", device, ")"));
    if (status_.ok()) previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0) return;
  absl::StatusOr<bool> active = PrimaryContextActive(previous_);
  if (active.ok() && !*active) return;  // restoring would create it
  if (Cuda().SetDevice(previous_) != internal::kCudaSuccess) {
    (void)Cuda().GetLastError();
  }
}

absl::StatusOr<int> CurrentDevice() {
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) return runtime.status();
  int device = -1;
  absl::Status s = Check((*runtime)->GetDevice(&device), "cudaGetDevice");
  if (!s.ok()) return s;
  return device;
}

absl::StatusOr<bool> PrimaryContextActive(int device) {
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) return runtime.status();
  const CudaRuntimeApi& cuda = **runtime;
  if (cuda.CuDevicePrimaryCtxGetState == nullptr) {
    return absl::UnimplementedError(
        "cuda: the driver's cuDevicePrimaryCtxGetState is not available");
  }
  internal::CuDevice handle = device;
  if (cuda.CuDeviceGet != nullptr && cuda.CuDeviceGet(&handle, device) != 0) {
    return absl::InternalError(absl::StrCat("cuda: cuDeviceGet(", device, ")"));
  }
  unsigned flags = 0;
  int active = 0;
  if (cuda.CuDevicePrimaryCtxGetState(handle, &flags, &active) != 0) {
    return absl::InternalError(
        absl::StrCat("cuda: cuDevicePrimaryCtxGetState(", device, ")"));
  }
  return active != 0;
}

}  // namespace rankd::dataplane::nccl
