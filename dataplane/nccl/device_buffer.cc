#include "dataplane/nccl/device_buffer.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/internal/cuda_call.h"
#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/internal/native_library.h"

namespace rankd::dataplane::nccl {
namespace {

using internal::Check;
using internal::Cuda;
using internal::CudaError;
using internal::CudaRuntimeApi;

// Makes `device`'s default memory pool fit for NCCL: every peer device that
// can map it gets read-write access, since NCCL's same-process P2P transport
// reads peers' buffers directly and pool memory, unlike cudaMalloc memory,
// is mapped only on its own device until cudaMemPoolSetAccess; and freed
// memory stays in the pool (release threshold: no limit), so a steady loop
// does not return memory to the driver and fetch it back every step (the
// default threshold of 0 releases at every synchronization).
void PreparePool(int device) {
  const CudaRuntimeApi& cuda = Cuda();
  internal::CudaMemPool pool = nullptr;
  if (cuda.DeviceGetDefaultMemPool(&pool, device) != internal::kCudaSuccess) {
    (void)cuda.GetLastError();
    return;
  }
  int count = 0;
  if (cuda.GetDeviceCount(&count) != internal::kCudaSuccess) count = 0;
  // One peer at a time, so that a peer that cannot map it does not keep the
  // others from getting access.
  for (int peer = 0; peer < count; ++peer) {
    int can = 0;
    if (peer == device ||
        cuda.DeviceCanAccessPeer(&can, peer, device) !=
            internal::kCudaSuccess ||
        can == 0) {
      (void)cuda.GetLastError();
      continue;
    }
    internal::CudaMemAccessDesc d{};
    d.location.type = internal::kCudaMemLocationTypeDevice;
    d.location.id = peer;
    d.flags = internal::kCudaMemAccessFlagsProtReadWrite;
    if (cuda.MemPoolSetAccess(pool, &d, 1) != internal::kCudaSuccess) {
      (void)cuda.GetLastError();
    }
  }
  uint64_t keep_everything = UINT64_MAX;
  if (cuda.MemPoolSetAttribute(pool, internal::kCudaMemPoolAttrReleaseThreshold,
                               &keep_everything) != internal::kCudaSuccess) {
    (void)cuda.GetLastError();
  }
  (void)cuda.GetLastError();
}

// Whether `device` supports cudaMallocAsync, cached per device; the first
// time it does, its pool is prepared (PreparePool).
bool MemoryPoolsSupported(int device) {
  static std::mutex mu;
  static std::vector<int>* cache = new std::vector<int>();
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0) return false;
  if (static_cast<size_t>(device) >= cache->size()) {
    cache->resize(device + 1, -1);
  }
  int& known = (*cache)[device];
  if (known < 0) {
    int value = 0;
    CudaError e = Cuda().DeviceGetAttribute(
        &value, internal::kCudaDevAttrMemoryPoolsSupported, device);
    if (e != internal::kCudaSuccess) {
      (void)Cuda().GetLastError();
      value = 0;
    }
    known = value != 0 ? 1 : 0;
    if (known == 1) PreparePool(device);
  }
  return known == 1;
}

// cudaPointerGetAttributes, resolved from the CUDA runtime rankd loaded;
// null where that library does not export it (the CPU stand-in). Not in
// CudaRuntimeApi, which requires every entry it lists.
using PointerAttributesFn = int (*)(void* attributes, const void* pointer);
PointerAttributesFn PointerAttributesFunction() {
  static const PointerAttributesFn fn = []() -> PointerAttributesFn {
    auto runtime = internal::LoadCudaRuntime();
    if (!runtime.ok()) return nullptr;
    void* handle =
        dlopen((*runtime)->path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (handle == nullptr) return nullptr;
    return reinterpret_cast<PointerAttributesFn>(
        dlsym(handle, "cudaPointerGetAttributes"));
  }();
  return fn;
}

}  // namespace

absl::StatusOr<std::shared_ptr<DeviceBuffer>> DeviceBuffer::Allocate(
    size_t bytes, std::shared_ptr<CudaStream> stream) {
  if (stream == nullptr) {
    return absl::InvalidArgumentError("DeviceBuffer::Allocate needs a stream");
  }
  const int device = stream->device();
  if (bytes == 0) {
    return std::shared_ptr<DeviceBuffer>(
        new DeviceBuffer(nullptr, 0, device, false, std::move(stream)));
  }
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  void* data = nullptr;
  const bool async = MemoryPoolsSupported(device);
  absl::Status s =
      async ? Check(Cuda().MallocAsync(&data, bytes, stream->get()),
                    absl::StrCat("cudaMallocAsync(", bytes, " bytes)"))
            : Check(Cuda().Malloc(&data, bytes),
                    absl::StrCat("cudaMalloc(", bytes, " bytes)"));
  if (!s.ok()) return s;
  return std::shared_ptr<DeviceBuffer>(
      new DeviceBuffer(data, bytes, device, async, std::move(stream)));
}

std::shared_ptr<DeviceBuffer> DeviceBuffer::External(
    void* data, size_t bytes, int device,
    std::shared_ptr<const void> keep_alive) {
  std::shared_ptr<DeviceBuffer> buffer(
      new DeviceBuffer(data, bytes, device, false, nullptr));
  buffer->owned_ = false;
  buffer->keep_alive_ = std::move(keep_alive);
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr || !owned_) return;
  DeviceGuard guard(device_);
  if (async_) {
    (void)Cuda().FreeAsync(data_, stream_->get());
  } else {
    (void)Cuda().Free(data_);
  }
  (void)Cuda().GetLastError();
}

absl::StatusOr<PointerAttributes> GetPointerAttributes(const void* pointer,
                                                       int device) {
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) return runtime.status();
  PointerAttributesFn attributes = PointerAttributesFunction();
  if (attributes == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda: ", (*runtime)->path, " has no cudaPointerGetAttributes"));
  }
  // struct cudaPointerAttributes starts {enum cudaMemoryType type; int
  // device; ...}; room to spare for the rest in any CUDA version.
  struct {
    int type;
    int device;
    char rest[248];
  } a;
  std::memset(&a, 0, sizeof(a));
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  absl::Status s = Check(attributes(&a, pointer), "cudaPointerGetAttributes");
  if (!s.ok()) return absl::InvalidArgumentError(s.message());
  PointerAttributes result;
  result.memory = static_cast<PointerAttributes::Memory>(a.type);
  result.device = a.device;
  return result;
}

}  // namespace rankd::dataplane::nccl
