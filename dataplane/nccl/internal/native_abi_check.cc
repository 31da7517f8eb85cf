// Compiled only by native_abi_conformance_test.sh, against the real CUDA
// and NCCL headers where a machine has them: every value, layout and
// function signature native_abi.h and native_library.h declare must match
// cuda_runtime_api.h, cuda.h and nccl.h. Not part of the Bazel build (rankd
// builds without those headers).
//
// With RANKD_ABI_CHECK_NCCL_ONLY defined, only the NCCL side is compared:
// nccl_header_abi_check.sh builds it so against nccl.h made from a NCCL
// checkout's nccl.h.in, with a stand-in for the few CUDA types nccl.h names.
#ifndef RANKD_ABI_CHECK_NCCL_ONLY
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif
#include <nccl.h>

#include <cstddef>
#include <cstdio>
#include <type_traits>

#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/internal/native_library.h"
#include "dataplane/nccl/internal/nccl_version.h"
#include "dataplane/nccl/nccl_data_type.h"
#include "dataplane/nccl/nccl_unique_id.h"

namespace native = rankd::dataplane::nccl::internal;
namespace nccl = rankd::dataplane::nccl;

// Two parameter (or result) types are passed the same way when they are
// the same, or an enum and an int of its size, or two object pointers.
template <typename A, typename B>
constexpr bool PassedAlike() {
  if constexpr (std::is_same_v<A, B>) {
    return true;
  } else if constexpr (std::is_enum_v<A> && std::is_integral_v<B>) {
    return sizeof(A) == sizeof(B);
  } else if constexpr (std::is_pointer_v<A> && std::is_pointer_v<B>) {
    return true;
  } else if constexpr (std::is_class_v<A> && std::is_class_v<B>) {
    // By-value structs (ncclUniqueId): same size and alignment.
    return sizeof(A) == sizeof(B) && alignof(A) == alignof(B) &&
           std::is_trivially_copyable_v<A> && std::is_trivially_copyable_v<B>;
  } else {
    return false;
  }
}

template <typename Real, typename Mine>
struct SameAbi : std::false_type {};
template <typename R1, typename... A1, typename R2, typename... A2>
struct SameAbi<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool value = sizeof...(A1) == sizeof...(A2) &&
                                PassedAlike<R1, R2>() &&
                                (PassedAlike<A1, A2>() && ...);
};
#define CHECK_FN(real, member, api) \
  static_assert(                    \
      SameAbi<decltype(&real), decltype(native::api::member)>::value, #real)
// For functions cuda_runtime_api.h also overloads for C++ callers: the C
// entry point, by its signature.
#define CHECK_C_FN(real, signature, member, api)                 \
  static_assert(SameAbi<decltype(static_cast<signature>(&real)), \
                        decltype(native::api::member)>::value,   \
                #real)

#ifndef RANKD_ABI_CHECK_NCCL_ONLY
CHECK_FN(cudaGetDeviceCount, GetDeviceCount, CudaRuntimeApi);
CHECK_FN(cudaGetDevice, GetDevice, CudaRuntimeApi);
CHECK_FN(cudaSetDevice, SetDevice, CudaRuntimeApi);
CHECK_FN(cudaDeviceGetAttribute, DeviceGetAttribute, CudaRuntimeApi);
CHECK_FN(cudaDeviceGetPCIBusId, DeviceGetPCIBusId, CudaRuntimeApi);
CHECK_FN(cudaDriverGetVersion, DriverGetVersion, CudaRuntimeApi);
CHECK_FN(cudaRuntimeGetVersion, RuntimeGetVersion, CudaRuntimeApi);
CHECK_FN(cudaGetLastError, GetLastError, CudaRuntimeApi);
CHECK_FN(cudaGetErrorName, GetErrorName, CudaRuntimeApi);
CHECK_FN(cudaGetErrorString, GetErrorString, CudaRuntimeApi);
CHECK_FN(cudaStreamCreateWithFlags, StreamCreateWithFlags, CudaRuntimeApi);
CHECK_FN(cudaStreamDestroy, StreamDestroy, CudaRuntimeApi);
CHECK_FN(cudaStreamSynchronize, StreamSynchronize, CudaRuntimeApi);
CHECK_FN(cudaStreamWaitEvent, StreamWaitEvent, CudaRuntimeApi);
CHECK_FN(cudaLaunchHostFunc, LaunchHostFunc, CudaRuntimeApi);
CHECK_FN(cudaEventCreateWithFlags, EventCreateWithFlags, CudaRuntimeApi);
CHECK_FN(cudaEventDestroy, EventDestroy, CudaRuntimeApi);
CHECK_FN(cudaEventRecord, EventRecord, CudaRuntimeApi);
CHECK_FN(cudaEventQuery, EventQuery, CudaRuntimeApi);
CHECK_FN(cudaEventSynchronize, EventSynchronize, CudaRuntimeApi);
CHECK_C_FN(cudaMalloc, cudaError_t (*)(void**, size_t), Malloc, CudaRuntimeApi);
CHECK_FN(cudaFree, Free, CudaRuntimeApi);
CHECK_C_FN(cudaMallocAsync, cudaError_t (*)(void**, size_t, cudaStream_t),
           MallocAsync, CudaRuntimeApi);
CHECK_FN(cudaFreeAsync, FreeAsync, CudaRuntimeApi);
CHECK_C_FN(cudaMallocHost, cudaError_t (*)(void**, size_t), MallocHost,
           CudaRuntimeApi);
CHECK_FN(cudaMemcpyAsync, MemcpyAsync, CudaRuntimeApi);
CHECK_FN(cudaMemcpy2DAsync, Memcpy2DAsync, CudaRuntimeApi);
CHECK_FN(cudaMemsetAsync, MemsetAsync, CudaRuntimeApi);
CHECK_FN(cudaDeviceCanAccessPeer, DeviceCanAccessPeer, CudaRuntimeApi);
CHECK_FN(cudaDeviceGetDefaultMemPool, DeviceGetDefaultMemPool, CudaRuntimeApi);
CHECK_FN(cudaMemPoolSetAccess, MemPoolSetAccess, CudaRuntimeApi);
CHECK_FN(cudaMemPoolSetAttribute, MemPoolSetAttribute, CudaRuntimeApi);
CHECK_FN(cudaMemPoolGetAttribute, MemPoolGetAttribute, CudaRuntimeApi);
CHECK_FN(cudaMemPoolGetAccess, MemPoolGetAccess, CudaRuntimeApi);
CHECK_FN(cudaMemPoolCreate, MemPoolCreate, CudaRuntimeApi);
CHECK_FN(cudaMemPoolDestroy, MemPoolDestroy, CudaRuntimeApi);
CHECK_C_FN(cudaMallocFromPoolAsync,
           cudaError_t (*)(void**, size_t, cudaMemPool_t, cudaStream_t),
           MallocFromPoolAsync, CudaRuntimeApi);
CHECK_FN(cudaStreamIsCapturing, StreamIsCapturing, CudaRuntimeApi);
CHECK_FN(cudaStreamBeginCapture, StreamBeginCapture, CudaRuntimeApi);
CHECK_FN(cudaStreamEndCapture, StreamEndCapture, CudaRuntimeApi);
CHECK_FN(cudaGraphDestroy, GraphDestroy, CudaRuntimeApi);
CHECK_FN(cuInit, CuInit, CudaRuntimeApi);
CHECK_FN(cuDeviceGet, CuDeviceGet, CudaRuntimeApi);
CHECK_FN(cuDeviceGetName, CuDeviceGetName, CudaRuntimeApi);
CHECK_FN(cuDevicePrimaryCtxGetState, CuDevicePrimaryCtxGetState,
         CudaRuntimeApi);
#endif  // RANKD_ABI_CHECK_NCCL_ONLY

CHECK_FN(ncclGetVersion, GetVersion, NcclApi);
CHECK_FN(ncclGetUniqueId, GetUniqueId, NcclApi);
CHECK_FN(ncclCommInitRankConfig, CommInitRankConfig, NcclApi);
// Loaded only from the version that has it (kNcclScalableInitVersion).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 4)
CHECK_FN(ncclCommInitRankScalable, CommInitRankScalable, NcclApi);
#endif
// Loaded only from the version that has it (kNcclSplitVersion).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
CHECK_FN(ncclCommSplit, CommSplit, NcclApi);
#endif
CHECK_FN(ncclCommGetAsyncError, CommGetAsyncError, NcclApi);
CHECK_FN(ncclCommFinalize, CommFinalize, NcclApi);
CHECK_FN(ncclCommDestroy, CommDestroy, NcclApi);
CHECK_FN(ncclCommAbort, CommAbort, NcclApi);
CHECK_FN(ncclGetErrorString, GetErrorString, NcclApi);
CHECK_FN(ncclGetLastError, GetLastError, NcclApi);
CHECK_FN(ncclAllReduce, AllReduce, NcclApi);
CHECK_FN(ncclAllGather, AllGather, NcclApi);
CHECK_FN(ncclBroadcast, Broadcast, NcclApi);
CHECK_FN(ncclSend, Send, NcclApi);
CHECK_FN(ncclRecv, Recv, NcclApi);
CHECK_FN(ncclGroupStart, GroupStart, NcclApi);
CHECK_FN(ncclGroupEnd, GroupEnd, NcclApi);

// Handles and the by-value unique id.
#ifndef RANKD_ABI_CHECK_NCCL_ONLY
static_assert(std::is_same_v<cudaStream_t, native::CudaStream>);
static_assert(std::is_same_v<cudaEvent_t, native::CudaEvent>);
static_assert(std::is_same_v<cudaGraph_t, native::CudaGraph>);
#endif
static_assert(std::is_same_v<ncclComm_t, native::NcclComm>);
static_assert(sizeof(ncclUniqueId) == sizeof(native::NcclUniqueId));
static_assert(NCCL_UNIQUE_ID_BYTES == native::kNcclUniqueIdSize);
static_assert(NCCL_UNIQUE_ID_BYTES == nccl::kNcclUniqueIdBytes);

// Values.
#ifndef RANKD_ABI_CHECK_NCCL_ONLY
static_assert(cudaSuccess == native::kCudaSuccess);
static_assert(cudaErrorMemoryAllocation == native::kCudaErrorMemoryAllocation);
static_assert(cudaErrorInsufficientDriver ==
              native::kCudaErrorInsufficientDriver);
static_assert(cudaErrorDevicesUnavailable ==
              native::kCudaErrorDevicesUnavailable);
static_assert(cudaErrorNoDevice == native::kCudaErrorNoDevice);
static_assert(cudaErrorInvalidDevice == native::kCudaErrorInvalidDevice);
static_assert(cudaErrorNotReady == native::kCudaErrorNotReady);
static_assert(cudaMemcpyHostToDevice == native::kCudaMemcpyHostToDevice);
static_assert(cudaMemcpyDeviceToHost == native::kCudaMemcpyDeviceToHost);
static_assert(cudaMemcpyDeviceToDevice == native::kCudaMemcpyDeviceToDevice);
static_assert(cudaStreamNonBlocking == native::kCudaStreamNonBlocking);
static_assert(cudaEventDisableTiming == native::kCudaEventDisableTiming);
static_assert(cudaDevAttrComputeCapabilityMajor ==
              native::kCudaDevAttrComputeCapabilityMajor);
static_assert(cudaDevAttrComputeCapabilityMinor ==
              native::kCudaDevAttrComputeCapabilityMinor);
static_assert(cudaDevAttrMemoryPoolsSupported ==
              native::kCudaDevAttrMemoryPoolsSupported);
static_assert(cudaErrorInvalidValue == native::kCudaErrorInvalidValue);
static_assert(cudaErrorInvalidPitchValue ==
              native::kCudaErrorInvalidPitchValue);
static_assert(cudaErrorInvalidResourceHandle ==
              native::kCudaErrorInvalidResourceHandle);
static_assert(cudaErrorIllegalAddress == native::kCudaErrorIllegalAddress);
static_assert(cudaErrorIllegalState == native::kCudaErrorIllegalState);
static_assert(cudaErrorStreamCaptureUnsupported ==
              native::kCudaErrorStreamCaptureUnsupported);
static_assert(cudaErrorStreamCaptureInvalidated ==
              native::kCudaErrorStreamCaptureInvalidated);
static_assert(cudaErrorStreamCaptureUnmatched ==
              native::kCudaErrorStreamCaptureUnmatched);
static_assert(cudaErrorStreamCaptureImplicit ==
              native::kCudaErrorStreamCaptureImplicit);
static_assert(cudaErrorCapturedEvent == native::kCudaErrorCapturedEvent);
static_assert(cudaStreamCaptureStatusNone ==
              native::kCudaStreamCaptureStatusNone);
static_assert(cudaStreamCaptureStatusActive ==
              native::kCudaStreamCaptureStatusActive);
static_assert(cudaStreamCaptureStatusInvalidated ==
              native::kCudaStreamCaptureStatusInvalidated);
static_assert(cudaStreamCaptureModeGlobal ==
              native::kCudaStreamCaptureModeGlobal);
static_assert(cudaStreamCaptureModeThreadLocal ==
              native::kCudaStreamCaptureModeThreadLocal);
static_assert(cudaStreamCaptureModeRelaxed ==
              native::kCudaStreamCaptureModeRelaxed);
static_assert(cudaDevAttrMaxPitch == native::kCudaDevAttrMaxPitch);
static_assert(cudaMemPoolAttrReleaseThreshold ==
              native::kCudaMemPoolAttrReleaseThreshold);
static_assert(cudaMemLocationTypeDevice == native::kCudaMemLocationTypeDevice);
static_assert(cudaMemAccessFlagsProtReadWrite ==
              native::kCudaMemAccessFlagsProtReadWrite);
static_assert(cudaMemAccessFlagsProtNone ==
              native::kCudaMemAccessFlagsProtNone);
static_assert(cudaMemAllocationTypePinned ==
              native::kCudaMemAllocationTypePinned);
static_assert(cudaMemHandleTypeNone == native::kCudaMemHandleTypeNone);
static_assert(sizeof(cudaMemPoolProps) == sizeof(native::CudaMemPoolProps));
static_assert(offsetof(cudaMemPoolProps, allocType) ==
              offsetof(native::CudaMemPoolProps, alloc_type));
static_assert(offsetof(cudaMemPoolProps, handleTypes) ==
              offsetof(native::CudaMemPoolProps, handle_types));
static_assert(offsetof(cudaMemPoolProps, location) ==
              offsetof(native::CudaMemPoolProps, location));
static_assert(offsetof(cudaMemPoolProps, win32SecurityAttributes) ==
              offsetof(native::CudaMemPoolProps, win32_security_attributes));
static_assert(offsetof(cudaMemPoolProps, maxSize) ==
              offsetof(native::CudaMemPoolProps, max_size));
static_assert(offsetof(cudaMemPoolProps, usage) ==
              offsetof(native::CudaMemPoolProps, usage));
static_assert(offsetof(cudaMemPoolProps, reserved) ==
              offsetof(native::CudaMemPoolProps, reserved));
static_assert(std::is_same_v<cudaMemPool_t, native::CudaMemPool>);
static_assert(sizeof(cudaMemAccessDesc) == sizeof(native::CudaMemAccessDesc));
static_assert(offsetof(cudaMemAccessDesc, location) ==
              offsetof(native::CudaMemAccessDesc, location));
static_assert(offsetof(cudaMemAccessDesc, flags) ==
              offsetof(native::CudaMemAccessDesc, flags));
static_assert(offsetof(cudaMemLocation, id) ==
              offsetof(native::CudaMemLocation, id));
static_assert(sizeof(cudaMemLocation) == sizeof(native::CudaMemLocation));
#endif  // RANKD_ABI_CHECK_NCCL_ONLY
static_assert(ncclSuccess == native::kNcclSuccess);
static_assert(ncclUnhandledCudaError == native::kNcclUnhandledCudaError);
static_assert(ncclSystemError == native::kNcclSystemError);
static_assert(ncclInternalError == native::kNcclInternalError);
static_assert(ncclInvalidArgument == native::kNcclInvalidArgument);
static_assert(ncclInvalidUsage == native::kNcclInvalidUsage);
static_assert(ncclRemoteError == native::kNcclRemoteError);
static_assert(ncclInProgress == native::kNcclInProgress);
static_assert(ncclSum == native::kNcclSum);
static_assert(ncclMin == native::kNcclMin);
static_assert(ncclInt8 == static_cast<int>(nccl::NcclDataType::kInt8));
static_assert(ncclUint8 == static_cast<int>(nccl::NcclDataType::kUint8));
static_assert(ncclInt32 == static_cast<int>(nccl::NcclDataType::kInt32));
static_assert(ncclUint32 == static_cast<int>(nccl::NcclDataType::kUint32));
static_assert(ncclInt64 == static_cast<int>(nccl::NcclDataType::kInt64));
static_assert(ncclUint64 == static_cast<int>(nccl::NcclDataType::kUint64));
static_assert(ncclFloat16 == static_cast<int>(nccl::NcclDataType::kFloat16));
static_assert(ncclFloat32 == static_cast<int>(nccl::NcclDataType::kFloat32));
static_assert(ncclFloat64 == static_cast<int>(nccl::NcclDataType::kFloat64));
static_assert(ncclBfloat16 == static_cast<int>(nccl::NcclDataType::kBfloat16));
static_assert(NCCL_VERSION_CODE ==
              native::NcclVersionCode(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));

// ncclConfig_t: rankd's 2.14 prefix has the header's offsets, and the
// constants the initializer uses.
static_assert(offsetof(ncclConfig_t, size) ==
              offsetof(native::NcclConfig, size));
static_assert(offsetof(ncclConfig_t, magic) ==
              offsetof(native::NcclConfig, magic));
static_assert(offsetof(ncclConfig_t, version) ==
              offsetof(native::NcclConfig, version));
static_assert(offsetof(ncclConfig_t, blocking) ==
              offsetof(native::NcclConfig, blocking));
static_assert(sizeof(ncclConfig_t) >= sizeof(native::NcclConfig));
constexpr ncclConfig_t kInitializer = NCCL_CONFIG_INITIALIZER;
static_assert(kInitializer.magic == native::kNcclConfigMagic);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 17, 0)
// The undefined value (2.14's initializer set blocking to 1; rankd always
// sets blocking itself).
static_assert(kInitializer.blocking == native::kNcclConfigUndefInt);
static_assert(NCCL_CONFIG_UNDEF_INT == native::kNcclConfigUndefInt);
#endif
// The prefix with splitShare, for ncclCommSplit: NCCL 2.18's layout
// (whose struct NCCL still tags ncclConfig_v21700: the version rankd
// sets, under which no later NCCL resets splitShare to its default).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
static_assert(offsetof(ncclConfig_t, splitShare) ==
              offsetof(native::NcclConfigWithSplitShare, split_share));
static_assert(offsetof(ncclConfig_t, netName) ==
              offsetof(native::NcclConfigWithSplitShare, net_name));
static_assert(sizeof(ncclConfig_t) >= sizeof(native::NcclConfigWithSplitShare));
static_assert(NCCL_SPLIT_NOCOLOR == native::kNcclSplitNoColor);
#endif

int main() {
#ifdef RANKD_ABI_CHECK_NCCL_ONLY
  std::printf("native ABI matches NCCL %d.%d.%d's nccl.h\n", NCCL_MAJOR,
              NCCL_MINOR, NCCL_PATCH);
#else
  std::printf("native ABI matches CUDA runtime %d and NCCL %d.%d.%d headers\n",
              CUDART_VERSION, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#endif
  return 0;
}
