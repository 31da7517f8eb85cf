#include "dataplane/nccl/native_runtime.h"

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/internal/native_library.h"

namespace rankd::dataplane::nccl {

std::string CudaVersionString(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

std::string NcclVersionString(int version) {
  // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  if (version < 20900) {
    return absl::StrCat(version / 1000, ".", (version % 1000) / 100, ".",
                        version % 100);
  }
  return absl::StrCat(version / 10000, ".", (version % 10000) / 100, ".",
                      version % 100);
}

NativeRuntimeReport DescribeNativeRuntime() {
  NativeRuntimeReport report;
  auto cuda = internal::LoadCudaRuntime();
  if (cuda.ok()) {
    const internal::CudaRuntimeApi& api = **cuda;
    report.cudart_path = api.path;
    report.cudart_version = api.runtime_version;
    int driver = 0;
    if (api.DriverGetVersion(&driver) == internal::kCudaSuccess) {
      report.driver_version = driver;
    }
    (void)api.GetLastError();
  } else {
    report.cuda_error = std::string(cuda.status().message());
  }
  auto nccl = internal::LoadNccl();
  if (nccl.ok()) {
    report.nccl_path = (*nccl)->path;
    report.nccl_version = (*nccl)->version;
  } else {
    report.nccl_error = std::string(nccl.status().message());
  }
  DeviceProbe probe = ProbeDevices();
  report.device_reason = probe.reason;
  if (!cuda.ok()) return report;
  const internal::CudaRuntimeApi& api = **cuda;
  const bool driver_names =
      api.CuInit != nullptr && api.CuDeviceGet != nullptr &&
      api.CuDeviceGetName != nullptr && api.CuInit(0) == 0;
  for (int i = 0; i < probe.device_count; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    char buffer[256] = {};
    if (api.DeviceGetPCIBusId(buffer, sizeof(buffer), i) ==
        internal::kCudaSuccess) {
      gpu.pci_bus_id = buffer;
    }
    (void)api.DeviceGetAttribute(
        &gpu.compute_major, internal::kCudaDevAttrComputeCapabilityMajor, i);
    (void)api.DeviceGetAttribute(
        &gpu.compute_minor, internal::kCudaDevAttrComputeCapabilityMinor, i);
    internal::CuDevice device = 0;
    if (driver_names && api.CuDeviceGet(&device, i) == 0) {
      char name[256] = {};
      if (api.CuDeviceGetName(name, sizeof(name), device) == 0) {
        gpu.name = name;
      }
    }
    (void)api.GetLastError();
    report.gpus.push_back(std::move(gpu));
  }
  return report;
}

std::string NativeRuntimeReport::Summary() const {
  std::string out;
  if (cuda_loaded()) {
    absl::StrAppend(
        &out, "CUDA runtime ", CudaVersionString(cudart_version), " (",
        cudart_path, "), driver ",
        driver_version > 0
            ? absl::StrCat("CUDA ", CudaVersionString(driver_version))
            : std::string("absent"));
  } else {
    absl::StrAppend(&out, "CUDA runtime not loaded (", cuda_error, ")");
  }
  if (nccl_loaded()) {
    absl::StrAppend(&out, ", NCCL ", NcclVersionString(nccl_version), " (",
                    nccl_path, ")");
  } else {
    absl::StrAppend(&out, ", NCCL not loaded (", nccl_error, ")");
  }
  if (gpus.empty()) {
    // Without the runtime the reason is the load error, said above.
    absl::StrAppend(
        &out, ", no GPU",
        cuda_loaded() ? absl::StrCat(" (", device_reason, ")") : std::string());
    return out;
  }
  absl::StrAppend(&out, ", ", gpus.size(),
                  gpus.size() == 1 ? " GPU:" : " GPUs:");
  for (const GpuInfo& gpu : gpus) {
    absl::StrAppend(&out, " ", gpu.index, " ",
                    gpu.name.empty() ? std::string("(unnamed)") : gpu.name,
                    " (sm_", gpu.compute_major, gpu.compute_minor, ", ",
                    gpu.pci_bus_id, ")", &gpu == &gpus.back() ? "" : ";");
  }
  return out;
}

}  // namespace rankd::dataplane::nccl
