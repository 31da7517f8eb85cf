// Calling the loaded CUDA runtime from the CUDA handle sources
// (cuda_device.cc, cuda_stream.cc, cuda_event.cc, device_buffer.cc,
// cuda_copy.cc): the runtime table and how a CUDA error becomes an
// absl::Status. Shared so that every handle reports errors in the one
// shape CudaStatus() (cuda_device.h) documents.
//
// Private to dataplane/nccl. Depends on internal/native_library.h only, so
// that the public handle headers stay free of the CUDA ABI.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_CUDA_CALL_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_CUDA_CALL_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/internal/native_library.h"

namespace rankd::dataplane::nccl::internal {

// The loaded runtime. Call it only where a CUDA object already exists or
// after LoadCudaRuntime() succeeded (a DeviceGuard whose status() is OK
// counts): there it is never null. Elsewhere it crashes.
const CudaRuntimeApi& Cuda();

// "cuda: <what>: cudaErrorX (text)" ("error <n>" when the runtime is not
// loaded) with the code that fits `error`: ResourceExhausted for
// out-of-memory, Unavailable for missing devices or drivers, Internal
// otherwise. What the public CudaStatus() returns.
absl::Status CudaErrorStatus(int error, absl::string_view what);

// OK for kCudaSuccess; otherwise CudaErrorStatus(error, what), after
// clearing the runtime's last error, so that a non-sticky error is not
// reported again by a later, unrelated cudaGetLastError (NCCL checks it
// after its own launches). Needs the runtime loaded (see Cuda()).
absl::Status Check(CudaError error, absl::string_view what);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_CUDA_CALL_H_
