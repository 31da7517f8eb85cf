// Device memory: DeviceBuffer, what rankd allocates for NCCL's inputs and
// outputs (or wraps, for memory a framework owns), and what CUDA says about
// a pointer a C ABI caller hands in (GetPointerAttributes).
//
// So that a hung NCCL kernel never blocks the host in a destructor,
// DeviceBuffer uses the stream-ordered allocator (cudaMallocFromPoolAsync /
// cudaFreeAsync) when the device supports memory pools: cudaFree
// synchronizes the whole device, cudaFreeAsync does not. A buffer keeps its
// allocation stream alive and frees on it. For the same reason rankd uses
// no pinned host memory (cudaFreeHost synchronizes the device too).
//
// The memory comes from a pool of rankd's own per device (cudaMemPoolCreate,
// made on first use, kept for the process's life) that peers may access
// and that keeps freed memory; rankd never changes the device's default
// pool, which torch and CuPy in the same process allocate from.
//
// Depends on cuda_stream.h; device_buffer.cc uses cuda_device.h.
// Thread-safety: a DeviceBuffer is immutable after creation and may be
// shared between threads (through std::shared_ptr); ordering the work that
// reads and writes its memory is the caller's.
#ifndef RANKD_DATAPLANE_NCCL_DEVICE_BUFFER_H_
#define RANKD_DATAPLANE_NCCL_DEVICE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/nccl/cuda_stream.h"

namespace rankd::dataplane::nccl {

// Device memory. A zero-byte buffer is valid and holds no memory (data()
// is nullptr); allocating one makes no CUDA call.
class DeviceBuffer {
 public:
  // Allocates `bytes` on stream->device(), ordered on `stream`: the memory
  // may be used by work queued on `stream` from now on (other streams must
  // wait for it). The buffer owns the memory and shares `stream`.
  // InvalidArgument for a null stream; DeviceGuard's status when the
  // device cannot be made current; otherwise the CudaStatus of
  // cudaMallocAsync / cudaMalloc (ResourceExhausted when out of memory).
  static absl::StatusOr<std::shared_ptr<DeviceBuffer>> Allocate(
      size_t bytes, std::shared_ptr<CudaStream> stream);
  // Device memory owned elsewhere (e.g. a framework tensor): never freed
  // by rankd; `keep_alive` (may be null) is held as long as the buffer.
  // Makes no CUDA call and cannot fail; stream() is null.
  static std::shared_ptr<DeviceBuffer> External(
      void* data, size_t bytes, int device,
      std::shared_ptr<const void> keep_alive = nullptr);
  // Frees stream-ordered on the allocation stream (no device sync); an
  // external buffer only drops its keep-alive.
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  int device() const { return device_; }
  // The allocation stream; null for an External buffer.
  const std::shared_ptr<CudaStream>& stream() const { return stream_; }

 private:
  DeviceBuffer(void* data, size_t bytes, int device, bool async,
               std::shared_ptr<CudaStream> stream)
      : data_(data),
        bytes_(bytes),
        device_(device),
        async_(async),
        stream_(std::move(stream)) {}
  void* data_;
  size_t bytes_;
  int device_;
  bool async_;
  bool owned_ = true;
  std::shared_ptr<CudaStream> stream_;
  std::shared_ptr<const void> keep_alive_;
};

// What a device memory pool grants (for diagnostics and tests).
struct MemoryPoolState {
  // cudaMemPoolAttrReleaseThreshold: memory the pool keeps at a
  // synchronization (0, CUDA's default: none; UINT64_MAX: all).
  uint64_t release_threshold = 0;
  // The devices with read-write access (cudaMemPoolGetAccess), the pool's
  // own included.
  std::vector<int> accessible_from;
};
// `device`'s default pool (cudaDeviceGetDefaultMemPool), which rankd never
// changes. DeviceGuard's status or the CudaStatus of a call on error.
absl::StatusOr<MemoryPoolState> DefaultMemoryPoolState(int device);
// rankd's own pool on `device`: every peer that can map it has access and
// its release threshold is UINT64_MAX. FailedPrecondition before rankd
// allocated memory on `device` (or where it has no memory pools); errors
// otherwise as DefaultMemoryPoolState.
absl::StatusOr<MemoryPoolState> RankdMemoryPoolState(int device);

// What cudaPointerGetAttributes says about a pointer.
struct PointerAttributes {
  // cudaMemoryType's values.
  enum class Memory { kUnregistered = 0, kHost = 1, kDevice = 2, kManaged = 3 };
  Memory memory = Memory::kUnregistered;
  int device = -1;  // for kDevice and kManaged
};

// The attributes of `pointer` (which stays the caller's), asked with
// `device` current. Unimplemented when the loaded CUDA runtime does not
// export cudaPointerGetAttributes (the CPU stand-in); InvalidArgument
// naming the CUDA error when the call fails (the pointer is nothing CUDA
// can describe); a failure to load the runtime or select `device` as
// DeviceGuard reports it.
absl::StatusOr<PointerAttributes> GetPointerAttributes(const void* pointer,
                                                       int device);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_DEVICE_BUFFER_H_
