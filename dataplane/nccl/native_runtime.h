// What the NCCL backend found on this machine at run time: which CUDA
// runtime and NCCL it loaded (files and versions), the driver's CUDA
// version, and the visible GPUs. Logs print it so that a run shows what
// actually ran; tests/gpu/run.sh prints it before the GPU tests.
//
// Loading the libraries is the only side effect (they are loaded once per
// process anyway); no CUDA context is created for devices beyond what
// naming them through the driver needs.
#ifndef RANKD_DATAPLANE_NCCL_NATIVE_RUNTIME_H_
#define RANKD_DATAPLANE_NCCL_NATIVE_RUNTIME_H_

#include <string>
#include <vector>

namespace rankd::dataplane::nccl {

struct GpuInfo {
  int index = 0;
  std::string name;        // "NVIDIA H200"; empty when the driver API is absent
  std::string pci_bus_id;  // "0000:19:00.0"
  int compute_major = 0;
  int compute_minor = 0;
};

struct NativeRuntimeReport {
  // CUDA runtime: the file opened and cudaRuntimeGetVersion (13000 is
  // 13.0); `cuda_error` says why it is not loaded (empty when it is).
  std::string cudart_path;
  int cudart_version = 0;
  // The CUDA version the driver supports (cudaDriverGetVersion); 0 when
  // there is no driver.
  int driver_version = 0;
  std::string cuda_error;
  // NCCL: the file opened and ncclGetVersion (22803 is 2.28.3).
  std::string nccl_path;
  int nccl_version = 0;
  std::string nccl_error;
  // Visible GPUs; `device_reason` says why there are none.
  std::vector<GpuInfo> gpus;
  std::string device_reason;

  bool cuda_loaded() const { return cuda_error.empty(); }
  bool nccl_loaded() const { return nccl_error.empty(); }
  // One line, e.g. "CUDA runtime 13.0 (/.../libcudart.so.13), driver CUDA
  // 13.0, NCCL 2.28.3 (/.../libnccl.so.2), 1 GPU: 0 NVIDIA H200 (sm_90,
  // 0000:19:00.0)"; each missing part says why.
  std::string Summary() const;
};

// Loads (once) and describes. Never fails: what is missing is in the
// report.
NativeRuntimeReport DescribeNativeRuntime();

// "13.0" for 13000; "2.28.3" for 22803.
std::string CudaVersionString(int version);
std::string NcclVersionString(int version);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NATIVE_RUNTIME_H_
