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

// rankd's own memory pool on one device (cudaMemPoolCreate), from which
// every DeviceBuffer is allocated. rankd never changes the device's
// default pool: torch, CuPy and anything else in the process allocate from
// it (cudaMallocAsync), and its access grants and release threshold are
// theirs. Ours is fit for NCCL: every peer device that can map it gets
// read-write access, since NCCL's same-process P2P transport reads peers'
// buffers directly and pool memory, unlike cudaMalloc memory, is mapped
// only on its own device until cudaMemPoolSetAccess; and freed memory
// stays in the pool (release threshold: no limit), so a steady loop does
// not return memory to the driver and fetch it back every step.
//
// Created on first use and never destroyed (buffers may be freed during
// static teardown); null where the device has no memory pools or creating
// one failed (then buffers use cudaMalloc).
internal::CudaMemPool CreatePool(int device) {
  const CudaRuntimeApi& cuda = Cuda();
  int supported = 0;
  if (cuda.DeviceGetAttribute(&supported,
                              internal::kCudaDevAttrMemoryPoolsSupported,
                              device) != internal::kCudaSuccess ||
      supported == 0) {
    (void)cuda.GetLastError();
    return nullptr;
  }
  internal::CudaMemPoolProps props;
  props.location.id = device;
  internal::CudaMemPool pool = nullptr;
  if (cuda.MemPoolCreate(&pool, &props) != internal::kCudaSuccess) {
    (void)cuda.GetLastError();
    return nullptr;
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
  return pool;
}

// rankd's pool on `device` (CreatePool on first use, with `device`
// current), or null (no pools there: cudaMalloc). Without `create`, only
// the pool an earlier call made.
internal::CudaMemPool RankdPool(int device, bool create = true) {
  static std::mutex mu;
  // By device: -1 unknown yet, else whether a pool exists.
  static auto* known = new std::vector<int>();
  static auto* pools = new std::vector<internal::CudaMemPool>();
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0) return nullptr;
  if (static_cast<size_t>(device) >= known->size()) {
    known->resize(device + 1, -1);
    pools->resize(device + 1, nullptr);
  }
  if ((*known)[device] < 0 && create) {
    (*pools)[device] = CreatePool(device);
    (*known)[device] = (*pools)[device] != nullptr ? 1 : 0;
  }
  return (*pools)[device];
}

// What `pool` grants, asked with `device` current.
absl::StatusOr<MemoryPoolState> PoolState(internal::CudaMemPool pool) {
  const CudaRuntimeApi& cuda = Cuda();
  MemoryPoolState state;
  absl::Status s = Check(
      cuda.MemPoolGetAttribute(pool, internal::kCudaMemPoolAttrReleaseThreshold,
                               &state.release_threshold),
      "cudaMemPoolGetAttribute(release threshold)");
  if (!s.ok()) return s;
  int count = 0;
  s = Check(cuda.GetDeviceCount(&count), "cudaGetDeviceCount");
  if (!s.ok()) return s;
  for (int peer = 0; peer < count; ++peer) {
    internal::CudaMemLocation where{internal::kCudaMemLocationTypeDevice, peer};
    int flags = internal::kCudaMemAccessFlagsProtNone;
    s = Check(cuda.MemPoolGetAccess(&flags, pool, &where),
              absl::StrCat("cudaMemPoolGetAccess(device ", peer, ")"));
    if (!s.ok()) return s;
    if (flags == internal::kCudaMemAccessFlagsProtReadWrite) {
      state.accessible_from.push_back(peer);
    }
  }
  return state;
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
  internal::CudaMemPool pool = RankdPool(device);
  const bool async = pool != nullptr;
  absl::Status s =
      async
          ? Check(Cuda().MallocFromPoolAsync(&data, bytes, pool, stream->get()),
                  absl::StrCat("cudaMallocFromPoolAsync(", bytes, " bytes)"))
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

absl::StatusOr<MemoryPoolState> DefaultMemoryPoolState(int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  internal::CudaMemPool pool = nullptr;
  absl::Status s = Check(Cuda().DeviceGetDefaultMemPool(&pool, device),
                         "cudaDeviceGetDefaultMemPool");
  if (!s.ok()) return s;
  return PoolState(pool);
}

absl::StatusOr<MemoryPoolState> RankdMemoryPoolState(int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  internal::CudaMemPool pool = RankdPool(device, /*create=*/false);
  if (pool == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda: rankd has no memory pool on device ", device,
        " (nothing allocated there yet, or the device has no memory pools)"));
  }
  return PoolState(pool);
}

}  // namespace rankd::dataplane::nccl
