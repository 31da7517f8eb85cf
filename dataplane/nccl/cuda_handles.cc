#include "dataplane/nccl/cuda_handles.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/internal/native_abi.h"
#include "dataplane/nccl/internal/native_library.h"

namespace rankd::dataplane::nccl {

std::shared_ptr<DeviceBuffer> DeviceBuffer::External(
    void* data, size_t bytes, int device,
    std::shared_ptr<const void> keep_alive) {
  std::shared_ptr<DeviceBuffer> buffer(
      new DeviceBuffer(data, bytes, device, false, nullptr));
  buffer->owned_ = false;
  buffer->keep_alive_ = std::move(keep_alive);
  return buffer;
}

namespace {

using internal::CudaError;
using internal::CudaRuntimeApi;

// The loaded runtime. Only called where a CUDA object already exists or
// after LoadCudaRuntime() succeeded, so it is never null there.
const CudaRuntimeApi& Cuda() { return **internal::LoadCudaRuntime(); }

// Clears a non-sticky error so that it is not reported again by a later,
// unrelated cudaGetLastError (NCCL checks it after its own launches).
absl::Status Check(CudaError error, absl::string_view what) {
  if (error == internal::kCudaSuccess) return absl::OkStatus();
  (void)Cuda().GetLastError();
  return CudaStatus(error, what);
}

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

absl::StatusOr<std::shared_ptr<CudaStream>> CudaStream::ForTransfers(
    int device) {
  static absl::Mutex mu;
  // Never destroyed: CUDA may already be torn down at static destruction.
  static auto* streams = new std::map<int, std::shared_ptr<CudaStream>>();
  absl::MutexLock lock(&mu);
  auto it = streams->find(device);
  if (it != streams->end()) return it->second;
  auto stream = Create(device);
  if (!stream.ok()) return stream.status();
  (*streams)[device] = *stream;
  return *stream;
}

absl::Status CudaStatus(int cuda_error, absl::string_view what) {
  auto runtime = internal::LoadCudaRuntime();
  std::string message =
      runtime.ok() ? absl::StrCat("cuda: ", what, ": ",
                                  (*runtime)->GetErrorName(cuda_error), " (",
                                  (*runtime)->GetErrorString(cuda_error), ")")
                   : absl::StrCat("cuda: ", what, ": error ", cuda_error);
  switch (cuda_error) {
    case internal::kCudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case internal::kCudaErrorNoDevice:
    case internal::kCudaErrorInsufficientDriver:
    case internal::kCudaErrorInvalidDevice:
    case internal::kCudaErrorDevicesUnavailable:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) {
    probe.reason = absl::StrCat("no GPU usable: ", runtime.status().message());
    return probe;
  }
  int count = 0;
  CudaError e = (*runtime)->GetDeviceCount(&count);
  if (e != internal::kCudaSuccess) {
    (void)(*runtime)->GetLastError();
    probe.reason = absl::StrCat(
        "no GPU usable: cudaGetDeviceCount: ", (*runtime)->GetErrorName(e),
        " (", (*runtime)->GetErrorString(e), ")");
    return probe;
  }
  if (count <= 0) {
    probe.reason = "no GPU: cudaGetDeviceCount returned 0";
    return probe;
  }
  probe.device_count = count;
  return probe;
}

DeviceGuard::DeviceGuard(int device) {
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) {
    status_ = absl::UnavailableError(absl::StrCat(
        "cuda: cudaSetDevice(", device, "): ", runtime.status().message()));
    return;
  }
  int current = -1;
  CudaError e = (*runtime)->GetDevice(&current);
  if (e != internal::kCudaSuccess) {
    status_ = Check(e, "cudaGetDevice");
    return;
  }
  if (current != device) {
    status_ = Check((*runtime)->SetDevice(device),
                    absl::StrCat("cudaSetDevice(", device, ")"));
    if (status_.ok()) previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0) return;
  absl::StatusOr<bool> active = PrimaryContextActive(previous_);
  if (active.ok() && !*active) return;  // restoring would create it
  if (Cuda().SetDevice(previous_) != internal::kCudaSuccess) {
    (void)Cuda().GetLastError();
  }
}

absl::StatusOr<int> CurrentDevice() {
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) return runtime.status();
  int device = -1;
  absl::Status s = Check((*runtime)->GetDevice(&device), "cudaGetDevice");
  if (!s.ok()) return s;
  return device;
}

absl::StatusOr<bool> PrimaryContextActive(int device) {
  auto runtime = internal::LoadCudaRuntime();
  if (!runtime.ok()) return runtime.status();
  const CudaRuntimeApi& cuda = **runtime;
  if (cuda.CuDevicePrimaryCtxGetState == nullptr) {
    return absl::UnimplementedError(
        "cuda: the driver's cuDevicePrimaryCtxGetState is not available");
  }
  internal::CuDevice handle = device;
  if (cuda.CuDeviceGet != nullptr && cuda.CuDeviceGet(&handle, device) != 0) {
    return absl::InternalError(absl::StrCat("cuda: cuDeviceGet(", device, ")"));
  }
  unsigned flags = 0;
  int active = 0;
  if (cuda.CuDevicePrimaryCtxGetState(handle, &flags, &active) != 0) {
    return absl::InternalError(
        absl::StrCat("cuda: cuDevicePrimaryCtxGetState(", device, ")"));
  }
  return active != 0;
}

absl::StatusOr<std::shared_ptr<CudaStream>> CudaStream::Create(int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  internal::CudaStream stream = nullptr;
  absl::Status s = Check(
      Cuda().StreamCreateWithFlags(&stream, internal::kCudaStreamNonBlocking),
      "cudaStreamCreateWithFlags");
  if (!s.ok()) return s;
  return std::shared_ptr<CudaStream>(new CudaStream(stream, device));
}

CudaStream::~CudaStream() {
  if (stream_ == nullptr) return;
  DeviceGuard guard(device_);
  (void)Cuda().StreamDestroy(stream_);
}

absl::Status CudaStream::Synchronize() const {
  DeviceGuard guard(device_);
  return Check(Cuda().StreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::StatusOr<std::shared_ptr<CudaEvent>> CudaEvent::Create(int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  internal::CudaEvent event = nullptr;
  absl::Status s = Check(
      Cuda().EventCreateWithFlags(&event, internal::kCudaEventDisableTiming),
      "cudaEventCreateWithFlags");
  if (!s.ok()) return s;
  return std::shared_ptr<CudaEvent>(new CudaEvent(event, device));
}

CudaEvent::~CudaEvent() {
  if (event_ == nullptr) return;
  DeviceGuard guard(device_);
  (void)Cuda().EventDestroy(event_);
}

absl::Status CudaEvent::Record(const CudaStream& stream) {
  DeviceGuard guard(device_);
  return Check(Cuda().EventRecord(event_, stream.get()), "cudaEventRecord");
}

absl::StatusOr<bool> CudaEvent::Query() const {
  // On the event's device: a thread that never chose one (a reaper, a
  // caller's worker) would otherwise create a context on device 0.
  DeviceGuard guard(device_);
  CudaError e = Cuda().EventQuery(event_);
  if (e == internal::kCudaSuccess) return true;
  if (e == internal::kCudaErrorNotReady) {
    // Not an error; make sure it is not left as the "last error".
    (void)Cuda().GetLastError();
    return false;
  }
  return Check(e, "cudaEventQuery");
}

absl::Status CudaEvent::Synchronize() const {
  DeviceGuard guard(device_);
  return Check(Cuda().EventSynchronize(event_), "cudaEventSynchronize");
}

absl::Status StreamWaitEvent(const CudaStream& stream, const CudaEvent& event) {
  DeviceGuard guard(stream.device());
  return Check(Cuda().StreamWaitEvent(stream.get(), event.get(), 0),
               "cudaStreamWaitEvent");
}

absl::Status RecordEvent(CudaEvent& event, CudaStreamHandle stream) {
  DeviceGuard guard(event.device());
  if (!guard.status().ok()) return guard.status();
  return Check(Cuda().EventRecord(event.get(), stream), "cudaEventRecord");
}

absl::Status StreamWaitEvent(CudaStreamHandle stream, const CudaEvent& event) {
  DeviceGuard guard(event.device());
  if (!guard.status().ok()) return guard.status();
  return Check(Cuda().StreamWaitEvent(stream, event.get(), 0),
               "cudaStreamWaitEvent");
}

namespace {

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

absl::Status LaunchHostFunction(const CudaStream& stream, void (*fn)(void*),
                                void* arg) {
  DeviceGuard guard(stream.device());
  if (!guard.status().ok()) return guard.status();
  return Check(Cuda().LaunchHostFunc(stream.get(), fn, arg),
               "cudaLaunchHostFunc");
}

}  // namespace rankd::dataplane::nccl
