// Stream-ordered copies and fills of device memory: how rankd moves bytes
// between caller buffers, its own DeviceBuffers (device_buffer.h) and the
// host, ordered with the NCCL work on the same CudaStream.
//
// Host memory is pageable, so the host <-> device copies that return with
// the data in place synchronize their stream; the exception is page-locked
// memory from AllocatePinnedHost, which rankd keeps for the process's life
// (cudaFreeHost synchronizes the device) and copies to and from without
// waiting (the agreement records, internal/operation_agreement.h).
//
// Depends on cuda_stream.h; cuda_copy.cc uses cuda_device.h. Every
// function may be called from any thread; pointers stay the caller's, who
// keeps them valid until the copy ran. Zero bytes is a no-op that makes no
// CUDA call and returns OK. On error each returns the CudaStatus of the
// CUDA call, naming it (e.g. "cudaMemcpyAsync(device to host)").
#ifndef RANKD_DATAPLANE_NCCL_CUDA_COPY_H_
#define RANKD_DATAPLANE_NCCL_CUDA_COPY_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/nccl/cuda_stream.h"

namespace rankd::dataplane::nccl {

// Queues a copy of `bytes` from `src` to `dst` (device memory) on `stream`
// without blocking the host.
absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes,
                                const CudaStream& stream);
// Queues a copy of `height` rows of `width` bytes, rows `src_pitch` /
// `dst_pitch` apart, without blocking the host. Pitches above the device's
// limit (rows of more than 2 GiB) are copied row by row.
absl::Status Copy2DDeviceToDevice(void* dst, size_t dst_pitch, const void* src,
                                  size_t src_pitch, size_t width, size_t height,
                                  const CudaStream& stream);
// Queues setting `bytes` bytes at `dst` to `value` (its low byte), without
// blocking the host.
absl::Status FillBytes(void* dst, int value, size_t bytes,
                       const CudaStream& stream);
// Copies host `src` to device `dst` and returns once `src` may be reused
// (it synchronizes `stream`, so a failure of earlier work on it is
// reported here).
absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream);
// Queues a host-to-device copy without waiting; `src` must stay valid and
// unchanged until the stream reached it.
absl::Status CopyHostToDeviceAsync(void* dst, const void* src, size_t bytes,
                                   const CudaStream& stream);
// Copies device `src` to host `dst` and returns once `dst` holds the data
// (it synchronizes `stream`, so a failure of earlier work on it is
// reported here).
absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream);

// Page-locked host memory of `bytes` bytes (cudaMallocHost) on `device`'s
// context. Never freed: cudaFreeHost synchronizes the device, which would
// wait behind a stuck NCCL kernel, so callers pool it for the process's
// life. The error names the call.
absl::StatusOr<void*> AllocatePinnedHost(size_t bytes, int device);
// Queues a device-to-host copy into page-locked `dst` (AllocatePinnedHost)
// without waiting: `dst` holds the data once the stream ran past it (an
// event recorded after it completed). Pageable `dst` would make CUDA
// synchronize.
absl::Status CopyDeviceToPinnedHostAsync(void* dst, const void* src,
                                         size_t bytes,
                                         const CudaStream& stream);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_CUDA_COPY_H_
