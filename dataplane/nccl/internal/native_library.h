// Opens the CUDA runtime and NCCL at run time and resolves the functions
// the NCCL backend calls. rankd is built without CUDA headers or libraries,
// so one build (and one container image) runs on CPU machines, where these
// loads fail with the places that were searched, and on GPU machines, where
// they pick up the host's libcudart.so.13 and libnccl.so.2 (for example the
// ones PyTorch's CUDA 13 wheels install).
//
// Where each library is looked for, in order (the first that opens wins):
//   1. the file named by $RANKD_CUDART_LIBRARY / $RANKD_NCCL_LIBRARY (when
//      set, that file or nothing: a file that does not load is the error);
//   2. the soname through the dynamic loader (LD_LIBRARY_PATH, the
//      loader's cache, the system folders): libcudart.so.13 then
//      libcudart.so.12; libnccl.so.2;
//   3. for NCCL $NCCL_HOME/{lib,lib64}; then lib64, lib and
//      targets/x86_64-linux/lib of $CUDA_HOME and of /usr/local/cuda;
//      for NCCL also /usr/lib/x86_64-linux-gnu;
//   4. the NVIDIA wheel folders of Python installs:
//      {/usr/local/lib,/usr/lib,$VIRTUAL_ENV/lib,$HOME/.local/lib}/python3*/
//      {site,dist}-packages/nvidia/{cu13,cu12,cuda_runtime,nccl}/lib.
// A library that opens but lacks a required function counts as not found
// (the message names the function).
//
// Each library is loaded once per process, on first use, and never
// unloaded. Thread-safe. Private to dataplane/nccl.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_LIBRARY_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_LIBRARY_H_

#include <string>

#include "absl/status/statusor.h"
#include "dataplane/nccl/internal/native_abi.h"

namespace rankd::dataplane::nccl::internal {

// The CUDA runtime functions rankd calls, resolved from one libcudart, plus
// three driver functions (from libcuda.so.1) used only to name devices;
// those may be null. When libcudart.so.13 loads but the driver only
// supports CUDA 12, libcudart.so.12 is taken instead where there is one
// (not when $RANKD_CUDART_LIBRARY names a file). Value-initialize these
// tables ({}), so that absent optional members are null.
struct CudaRuntimeApi {
  std::string path;     // the file that was opened
  int runtime_version;  // cudaRuntimeGetVersion, e.g. 13000

  CudaError (*GetDeviceCount)(int*);
  CudaError (*GetDevice)(int*);
  CudaError (*SetDevice)(int);
  CudaError (*DeviceGetAttribute)(int*, int attr, int device);
  CudaError (*DeviceGetPCIBusId)(char*, int len, int device);
  CudaError (*DriverGetVersion)(int*);
  CudaError (*RuntimeGetVersion)(int*);
  CudaError (*GetLastError)();
  const char* (*GetErrorName)(CudaError);
  const char* (*GetErrorString)(CudaError);
  CudaError (*StreamCreateWithFlags)(CudaStream*, unsigned flags);
  CudaError (*StreamDestroy)(CudaStream);
  CudaError (*StreamSynchronize)(CudaStream);
  CudaError (*StreamWaitEvent)(CudaStream, CudaEvent, unsigned flags);
  CudaError (*LaunchHostFunc)(CudaStream, CudaHostFn, void*);
  CudaError (*EventCreateWithFlags)(CudaEvent*, unsigned flags);
  CudaError (*EventDestroy)(CudaEvent);
  CudaError (*EventRecord)(CudaEvent, CudaStream);
  CudaError (*EventQuery)(CudaEvent);
  CudaError (*EventSynchronize)(CudaEvent);
  CudaError (*Malloc)(void**, size_t);
  CudaError (*Free)(void*);
  CudaError (*MallocAsync)(void**, size_t, CudaStream);
  CudaError (*FreeAsync)(void*, CudaStream);
  // Page-locked host memory for agreement records (never freed: cudaFreeHost
  // synchronizes the device).
  CudaError (*MallocHost)(void**, size_t);
  CudaError (*MemcpyAsync)(void*, const void*, size_t, int kind, CudaStream);
  CudaError (*Memcpy2DAsync)(void*, size_t dpitch, const void*, size_t spitch,
                             size_t width, size_t height, int kind, CudaStream);
  CudaError (*MemsetAsync)(void*, int, size_t, CudaStream);
  CudaError (*DeviceCanAccessPeer)(int*, int device, int peer_device);
  CudaError (*DeviceGetDefaultMemPool)(CudaMemPool*, int device);
  CudaError (*MemPoolSetAccess)(CudaMemPool, const CudaMemAccessDesc*,
                                size_t count);
  CudaError (*MemPoolSetAttribute)(CudaMemPool, int attr, void* value);
  CudaError (*MemPoolGetAttribute)(CudaMemPool, int attr, void* value);
  CudaError (*MemPoolGetAccess)(int* flags, CudaMemPool, CudaMemLocation*);
  CudaError (*MemPoolCreate)(CudaMemPool*, const CudaMemPoolProps*);
  CudaError (*MemPoolDestroy)(CudaMemPool);
  CudaError (*MallocFromPoolAsync)(void**, size_t, CudaMemPool, CudaStream);
  // Graph capture: rankd only asks (cudaStreamIsCapturing); tests begin
  // and end captures.
  CudaError (*StreamIsCapturing)(CudaStream, int* status);
  CudaError (*StreamBeginCapture)(CudaStream, int mode);
  CudaError (*StreamEndCapture)(CudaStream, CudaGraph*);
  CudaError (*GraphDestroy)(CudaGraph);

  // Driver API (optional): cuInit, cuDeviceGet, cuDeviceGetName,
  // cuDevicePrimaryCtxGetState; from the runtime's own file when it exports
  // them (the test stand-in does), else from libcuda.so.1.
  CuResult (*CuInit)(unsigned flags);
  CuResult (*CuDeviceGet)(CuDevice*, int ordinal);
  CuResult (*CuDeviceGetName)(char*, int len, CuDevice);
  CuResult (*CuDevicePrimaryCtxGetState)(CuDevice, unsigned* flags,
                                         int* active);
};

// The NCCL functions rankd calls, resolved from one libnccl.
struct NcclApi {
  std::string path;  // the file that was opened
  int version;       // ncclGetVersion, e.g. 22803

  NcclResult (*GetVersion)(int*);
  NcclResult (*GetUniqueId)(NcclUniqueId*);
  NcclResult (*CommInitRankConfig)(NcclComm*, int nranks, NcclUniqueId,
                                   int rank, NcclConfig*);
  // Null before NCCL 2.23.4.
  NcclResult (*CommInitRankScalable)(NcclComm*, int nranks, int rank, int nids,
                                     NcclUniqueId*, NcclConfig*);
  // Null before NCCL 2.18.
  NcclResult (*CommSplit)(NcclComm, int color, int key, NcclComm* newcomm,
                          NcclConfig*);
  NcclResult (*CommGetAsyncError)(NcclComm, NcclResult*);
  NcclResult (*CommFinalize)(NcclComm);
  NcclResult (*CommDestroy)(NcclComm);
  NcclResult (*CommAbort)(NcclComm);
  const char* (*GetErrorString)(NcclResult);
  const char* (*GetLastError)(NcclComm);
  NcclResult (*AllReduce)(const void*, void*, size_t, int type, int op,
                          NcclComm, CudaStream);
  NcclResult (*AllGather)(const void*, void*, size_t, int type, NcclComm,
                          CudaStream);
  NcclResult (*Broadcast)(const void*, void*, size_t, int type, int root,
                          NcclComm, CudaStream);
  NcclResult (*Send)(const void*, size_t, int type, int peer, NcclComm,
                     CudaStream);
  NcclResult (*Recv)(void*, size_t, int type, int peer, NcclComm, CudaStream);
  NcclResult (*GroupStart)();
  NcclResult (*GroupEnd)();
};

// The loaded CUDA runtime, or Unavailable saying what was looked for where
// (the same answer on every call).
absl::StatusOr<const CudaRuntimeApi*> LoadCudaRuntime();

// The loaded NCCL, or Unavailable saying what was looked for where.
absl::StatusOr<const NcclApi*> LoadNccl();

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_LIBRARY_H_
