#include "dataplane/nccl/cuda_copy.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/internal/cuda_call.h"
#include "dataplane/nccl/internal/native_abi.h"

namespace rankd::dataplane::nccl {
namespace {

using internal::Check;
using internal::Cuda;

// cudaDevAttrMaxPitch of `device`, cached per device; 2^31 - 1 (what
// current GPUs report) when it cannot be read.
size_t MaxPitch(int device) {
  static std::mutex mu;
  static auto* cache = new std::map<int, size_t>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(device);
  if (it != cache->end()) return it->second;
  int value = 0;
  if (Cuda().DeviceGetAttribute(&value, internal::kCudaDevAttrMaxPitch,
                                device) != internal::kCudaSuccess ||
      value <= 0) {
    (void)Cuda().GetLastError();
    value = 2147483647;
  }
  return (*cache)[device] = static_cast<size_t>(value);
}

}  // namespace

absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes,
                                const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  return Check(
      Cuda().MemcpyAsync(dst, src, bytes, internal::kCudaMemcpyDeviceToDevice,
                         stream.get()),
      "cudaMemcpyAsync(device to device)");
}

absl::Status Copy2DDeviceToDevice(void* dst, size_t dst_pitch, const void* src,
                                  size_t src_pitch, size_t width, size_t height,
                                  const CudaStream& stream) {
  if (width == 0 || height == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  if (std::max(dst_pitch, src_pitch) > MaxPitch(stream.device())) {
    // cudaMemcpy2DAsync refuses pitches above the device's limit (rows of
    // more than 2 GiB on current GPUs): such rows are copied one by one.
    for (size_t row = 0; row < height; ++row) {
      absl::Status s = CopyDeviceToDevice(
          static_cast<char*>(dst) + row * dst_pitch,
          static_cast<const char*>(src) + row * src_pitch, width, stream);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return Check(
      Cuda().Memcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                           internal::kCudaMemcpyDeviceToDevice, stream.get()),
      "cudaMemcpy2DAsync(device to device)");
}

absl::Status FillBytes(void* dst, int value, size_t bytes,
                       const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  return Check(Cuda().MemsetAsync(dst, value, bytes, stream.get()),
               "cudaMemsetAsync");
}

absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  absl::Status s =
      Check(Cuda().MemcpyAsync(dst, src, bytes,
                               internal::kCudaMemcpyHostToDevice, stream.get()),
            "cudaMemcpyAsync(host to device)");
  if (!s.ok()) return s;
  return stream.Synchronize();
}

absl::Status CopyHostToDeviceAsync(void* dst, const void* src, size_t bytes,
                                   const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  return Check(
      Cuda().MemcpyAsync(dst, src, bytes, internal::kCudaMemcpyHostToDevice,
                         stream.get()),
      "cudaMemcpyAsync(host to device)");
}

absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  absl::Status s =
      Check(Cuda().MemcpyAsync(dst, src, bytes,
                               internal::kCudaMemcpyDeviceToHost, stream.get()),
            "cudaMemcpyAsync(device to host)");
  if (!s.ok()) return s;
  return stream.Synchronize();
}

absl::StatusOr<void*> AllocatePinnedHost(size_t bytes, int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  void* p = nullptr;
  absl::Status s = Check(Cuda().MallocHost(&p, bytes), "cudaMallocHost");
  if (!s.ok()) return s;
  return p;
}

absl::Status CopyDeviceToPinnedHostAsync(void* dst, const void* src,
                                         size_t bytes,
                                         const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  return Check(
      Cuda().MemcpyAsync(dst, src, bytes, internal::kCudaMemcpyDeviceToHost,
                         stream.get()),
      "cudaMemcpyAsync(device to pinned host)");
}

}  // namespace rankd::dataplane::nccl
