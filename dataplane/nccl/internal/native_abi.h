// The part of the CUDA runtime, CUDA driver and NCCL binary interfaces that
// the NCCL backend uses, declared here because rankd is built without the
// CUDA Toolkit or NCCL headers: the libraries are opened at run time
// (internal/native_library.h), on the machine that has them.
//
// Every value and layout below is the one of the public C interface
// (cuda_runtime_api.h, driver_types.h, cuda.h, nccl.h), which NVIDIA keeps
// stable across releases: CUDA runtime 12 and 13, NCCL 2.14 and later.
// Only what rankd calls is declared. Private to dataplane/nccl.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_ABI_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_ABI_H_

#include <climits>
#include <cstddef>

// Opaque handle types, spelled as the CUDA and NCCL headers spell them so
// that the public headers of dataplane/nccl can forward-declare them.
struct CUstream_st;
struct CUevent_st;
struct CUmemPoolHandle_st;
struct CUgraph_st;
struct ncclComm;

namespace rankd::dataplane::nccl::internal {

// --- CUDA runtime (libcudart.so.13 / .12) ---------------------------------
using CudaError = int;  // cudaError_t
inline constexpr CudaError kCudaSuccess = 0;
inline constexpr CudaError kCudaErrorInvalidValue = 1;
inline constexpr CudaError kCudaErrorMemoryAllocation = 2;
inline constexpr CudaError kCudaErrorInvalidPitchValue = 12;
inline constexpr CudaError kCudaErrorInsufficientDriver = 35;
inline constexpr CudaError kCudaErrorDevicesUnavailable = 46;
inline constexpr CudaError kCudaErrorNoDevice = 100;
inline constexpr CudaError kCudaErrorInvalidDevice = 101;
inline constexpr CudaError kCudaErrorInvalidResourceHandle = 400;
inline constexpr CudaError kCudaErrorIllegalState = 401;
inline constexpr CudaError kCudaErrorNotReady = 600;
inline constexpr CudaError kCudaErrorIllegalAddress = 700;
inline constexpr CudaError kCudaErrorStreamCaptureUnsupported = 900;
inline constexpr CudaError kCudaErrorStreamCaptureInvalidated = 901;
inline constexpr CudaError kCudaErrorStreamCaptureUnmatched = 903;
inline constexpr CudaError kCudaErrorStreamCaptureImplicit = 906;
inline constexpr CudaError kCudaErrorCapturedEvent = 907;

using CudaStream = CUstream_st*;               // cudaStream_t
using CudaEvent = CUevent_st*;                 // cudaEvent_t
using CudaHostFn = void (*)(void* user_data);  // cudaHostFn_t
using CudaMemPool = CUmemPoolHandle_st*;       // cudaMemPool_t
using CudaGraph = CUgraph_st*;                 // cudaGraph_t

// cudaMemcpyKind
inline constexpr int kCudaMemcpyHostToDevice = 1;
inline constexpr int kCudaMemcpyDeviceToHost = 2;
inline constexpr int kCudaMemcpyDeviceToDevice = 3;
// cudaStreamNonBlocking, cudaEventDisableTiming
inline constexpr unsigned kCudaStreamNonBlocking = 0x01;
inline constexpr unsigned kCudaEventDisableTiming = 0x02;
// cudaDeviceAttr
inline constexpr int kCudaDevAttrComputeCapabilityMajor = 75;
inline constexpr int kCudaDevAttrComputeCapabilityMinor = 76;
inline constexpr int kCudaDevAttrMaxPitch = 11;
inline constexpr int kCudaDevAttrMemoryPoolsSupported = 115;
// cudaStreamCaptureStatus, cudaStreamCaptureMode
inline constexpr int kCudaStreamCaptureStatusNone = 0;
inline constexpr int kCudaStreamCaptureStatusActive = 1;
inline constexpr int kCudaStreamCaptureStatusInvalidated = 2;
inline constexpr int kCudaStreamCaptureModeGlobal = 0;
inline constexpr int kCudaStreamCaptureModeThreadLocal = 1;
inline constexpr int kCudaStreamCaptureModeRelaxed = 2;
// cudaMemPoolAttr, cudaMemLocationType, cudaMemAccessFlags,
// cudaMemAllocationType, cudaMemAllocationHandleType
inline constexpr int kCudaMemPoolAttrReleaseThreshold = 4;
inline constexpr int kCudaMemLocationTypeDevice = 1;
inline constexpr int kCudaMemAccessFlagsProtNone = 0;
inline constexpr int kCudaMemAccessFlagsProtReadWrite = 3;
inline constexpr int kCudaMemAllocationTypePinned = 1;
inline constexpr int kCudaMemHandleTypeNone = 0;
struct CudaMemLocation {  // cudaMemLocation
  int type;
  int id;
};
struct CudaMemAccessDesc {  // cudaMemAccessDesc
  CudaMemLocation location;
  int flags;
};
// cudaMemPoolProps as CUDA 12.2+ lays it out; earlier releases have
// reserved bytes (which must be zero) where maxSize and usage are, and the
// same size, so a zeroed value with these fields set reads the same.
struct CudaMemPoolProps {
  int alloc_type = kCudaMemAllocationTypePinned;  // allocType
  int handle_types = kCudaMemHandleTypeNone;      // handleTypes
  CudaMemLocation location = {kCudaMemLocationTypeDevice, 0};
  void* win32_security_attributes = nullptr;
  size_t max_size = 0;  // 0: the system's default
  unsigned short usage = 0;
  unsigned char reserved[54] = {};
};
static_assert(sizeof(CudaMemPoolProps) == 88, "cudaMemPoolProps layout");

// --- CUDA driver (libcuda.so.1, loaded by the runtime) --------------------
using CuResult = int;  // CUresult; 0 is CUDA_SUCCESS
using CuDevice = int;  // CUdevice

// --- NCCL (libnccl.so.2) ---------------------------------------------------
using NcclResult = int;  // ncclResult_t
inline constexpr NcclResult kNcclSuccess = 0;
inline constexpr NcclResult kNcclUnhandledCudaError = 1;
inline constexpr NcclResult kNcclSystemError = 2;
inline constexpr NcclResult kNcclInternalError = 3;
inline constexpr NcclResult kNcclInvalidArgument = 4;
inline constexpr NcclResult kNcclInvalidUsage = 5;
inline constexpr NcclResult kNcclRemoteError = 6;
inline constexpr NcclResult kNcclInProgress = 7;

using NcclComm = ncclComm*;  // ncclComm_t

inline constexpr size_t kNcclUniqueIdSize = 128;  // NCCL_UNIQUE_ID_BYTES
struct NcclUniqueId {                             // ncclUniqueId
  char internal[kNcclUniqueIdSize];
};

// ncclConfig_t as NCCL 2.14 laid it out (size, magic, version, blocking).
// NCCL copies a config by its `size` field and gives every field that a
// release after `version` added its default, so this shorter layout is
// read correctly by every NCCL from 2.14 on; rankd only sets `blocking`.
inline constexpr unsigned kNcclConfigMagic = 0xcafebeef;  // NCCL_API_MAGIC
inline constexpr unsigned kNcclConfigVersion = 21400;  // NCCL_VERSION(2,14,0)
inline constexpr int kNcclConfigUndefInt = INT_MIN;    // NCCL_CONFIG_UNDEF_INT
struct NcclConfig {
  size_t size = sizeof(NcclConfig);
  unsigned int magic = kNcclConfigMagic;
  unsigned int version = kNcclConfigVersion;
  int blocking = kNcclConfigUndefInt;
};
static_assert(sizeof(NcclConfig) == 24, "ncclConfig_t v2.14 layout");

// ncclConfig_t as NCCL 2.17 laid it out: the 2.14 fields, the CTA and
// network settings (left undefined: NCCL's defaults) and splitShare. A
// communicator's splitShare decides whether the communicators
// ncclCommSplit (NCCL 2.18) makes from it share its resources (init.cc:
// the parent's config is read, not the child's). Its first fields are
// NcclConfig's, so it is passed as one (AsConfig).
inline constexpr unsigned kNcclConfigVersionSplitShare = 21700;
struct NcclConfigWithSplitShare {
  size_t size = sizeof(NcclConfigWithSplitShare);
  unsigned int magic = kNcclConfigMagic;
  unsigned int version = kNcclConfigVersionSplitShare;
  int blocking = kNcclConfigUndefInt;
  int cga_cluster_size = kNcclConfigUndefInt;
  int min_ctas = kNcclConfigUndefInt;
  int max_ctas = kNcclConfigUndefInt;
  const char* net_name = nullptr;  // NCCL_CONFIG_UNDEF_PTR
  int split_share = kNcclConfigUndefInt;
};
static_assert(sizeof(NcclConfigWithSplitShare) == 48,
              "ncclConfig_t v2.17 layout");
static_assert(offsetof(NcclConfigWithSplitShare, split_share) == 40,
              "ncclConfig_t v2.17 splitShare");
static_assert(offsetof(NcclConfigWithSplitShare, blocking) ==
              offsetof(NcclConfig, blocking));
inline NcclConfig* AsConfig(NcclConfigWithSplitShare* config) {
  return reinterpret_cast<NcclConfig*>(config);
}
// NCCL_SPLIT_NOCOLOR: a rank of the parent that joins no new communicator.
inline constexpr int kNcclSplitNoColor = -1;
// The first NCCL with ncclCommSplit.
inline constexpr int kNcclSplitVersion = 21800;

// ncclRedOp_t
inline constexpr int kNcclSum = 0;
inline constexpr int kNcclMin = 3;
// ncclDataType_t values are NcclDataType (nccl_data_type.h).

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_ABI_H_
