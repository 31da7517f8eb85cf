#include "dataplane/nccl/cuda_handles.h"

#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "local_cuda_config.h"

#if RANKD_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rankd::dataplane::nccl {

bool BuiltWithCuda() { return RANKD_HAVE_CUDA != 0; }

std::shared_ptr<DeviceBuffer> DeviceBuffer::External(
    void* data, size_t bytes, int device,
    std::shared_ptr<const void> keep_alive) {
  std::shared_ptr<DeviceBuffer> buffer(
      new DeviceBuffer(data, bytes, device, false, nullptr));
  buffer->owned_ = false;
  buffer->keep_alive_ = std::move(keep_alive);
  return buffer;
}

std::string CudaUnavailableReason() {
#if RANKD_HAVE_CUDA
  return "";
#else
  return absl::StrCat("rankd was built without CUDA/NCCL (",
                      RANKD_CUDA_UNAVAILABLE_REASON, ")");
#endif
}

#if RANKD_HAVE_CUDA

namespace {

// Clears a non-sticky error so that it is not reported again by a later,
// unrelated cudaGetLastError (NCCL checks it after its own launches).
absl::Status Check(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return CudaStatus(error, what);
}

// Whether `device` supports cudaMallocAsync, cached per device.
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
    cudaError_t e =
        cudaDeviceGetAttribute(&value, cudaDevAttrMemoryPoolsSupported, device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      value = 0;
    }
    known = value != 0 ? 1 : 0;
  }
  return known == 1;
}

}  // namespace

absl::Status CudaStatus(int cuda_error, absl::string_view what) {
  auto error = static_cast<cudaError_t>(cuda_error);
  std::string message =
      absl::StrCat("cuda: ", what, ": ", cudaGetErrorName(error), " (",
                   cudaGetErrorString(error), ")");
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    probe.reason = absl::StrCat("no usable CUDA device: cudaGetDeviceCount: ",
                                cudaGetErrorName(e), " (",
                                cudaGetErrorString(e), ")");
    return probe;
  }
  if (count <= 0) {
    probe.reason = "no CUDA device: cudaGetDeviceCount returned 0";
    return probe;
  }
  probe.device_count = count;
  return probe;
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  cudaError_t e = cudaGetDevice(&current);
  if (e != cudaSuccess) {
    status_ = Check(e, "cudaGetDevice");
    return;
  }
  if (current != device) {
    status_ = Check(cudaSetDevice(device),
                    absl::StrCat("cudaSetDevice(", device, ")"));
  }
}

DeviceGuard::~DeviceGuard() = default;

absl::StatusOr<std::shared_ptr<CudaStream>> CudaStream::Create(int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  cudaStream_t stream = nullptr;
  absl::Status s = Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                         "cudaStreamCreateWithFlags");
  if (!s.ok()) return s;
  return std::shared_ptr<CudaStream>(new CudaStream(stream, device));
}

CudaStream::~CudaStream() {
  if (stream_ == nullptr) return;
  DeviceGuard guard(device_);
  (void)cudaStreamDestroy(stream_);
}

absl::Status CudaStream::Synchronize() const {
  DeviceGuard guard(device_);
  return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::StatusOr<std::shared_ptr<CudaEvent>> CudaEvent::Create(int device) {
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  cudaEvent_t event = nullptr;
  absl::Status s = Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                         "cudaEventCreateWithFlags");
  if (!s.ok()) return s;
  return std::shared_ptr<CudaEvent>(new CudaEvent(event, device));
}

CudaEvent::~CudaEvent() {
  if (event_ == nullptr) return;
  DeviceGuard guard(device_);
  (void)cudaEventDestroy(event_);
}

absl::Status CudaEvent::Record(const CudaStream& stream) {
  DeviceGuard guard(device_);
  return Check(cudaEventRecord(event_, stream.get()), "cudaEventRecord");
}

absl::StatusOr<bool> CudaEvent::Query() const {
  cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    // Not an error; make sure it is not left as the "last error".
    (void)cudaGetLastError();
    return false;
  }
  return Check(e, "cudaEventQuery");
}

absl::Status CudaEvent::Synchronize() const {
  return Check(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

absl::Status StreamWaitEvent(const CudaStream& stream, const CudaEvent& event) {
  DeviceGuard guard(stream.device());
  return Check(cudaStreamWaitEvent(stream.get(), event.get(), 0),
               "cudaStreamWaitEvent");
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
      async ? Check(cudaMallocAsync(&data, bytes, stream->get()),
                    absl::StrCat("cudaMallocAsync(", bytes, " bytes)"))
            : Check(cudaMalloc(&data, bytes),
                    absl::StrCat("cudaMalloc(", bytes, " bytes)"));
  if (!s.ok()) return s;
  return std::shared_ptr<DeviceBuffer>(
      new DeviceBuffer(data, bytes, device, async, std::move(stream)));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr || !owned_) return;
  DeviceGuard guard(device_);
  if (async_) {
    (void)cudaFreeAsync(data_, stream_->get());
  } else {
    (void)cudaFree(data_);
  }
  (void)cudaGetLastError();
}

absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes,
                                const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                               stream.get()),
               "cudaMemcpyAsync(device to device)");
}

absl::Status Copy2DDeviceToDevice(void* dst, size_t dst_pitch, const void* src,
                                  size_t src_pitch, size_t width,
                                  size_t height, const CudaStream& stream) {
  if (width == 0 || height == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  return Check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                 cudaMemcpyDeviceToDevice, stream.get()),
               "cudaMemcpy2DAsync(device to device)");
}

absl::Status FillBytes(void* dst, int value, size_t bytes,
                       const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  return Check(cudaMemsetAsync(dst, value, bytes, stream.get()),
               "cudaMemsetAsync");
}

absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  absl::Status s = Check(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream.get()),
      "cudaMemcpyAsync(host to device)");
  if (!s.ok()) return s;
  return stream.Synchronize();
}

absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  absl::Status s = Check(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream.get()),
      "cudaMemcpyAsync(device to host)");
  if (!s.ok()) return s;
  return stream.Synchronize();
}

#else  // !RANKD_HAVE_CUDA

namespace {
absl::Status NoCuda(absl::string_view what) {
  return absl::UnavailableError(
      absl::StrCat("cuda: ", what, ": ", CudaUnavailableReason()));
}
}  // namespace

absl::Status CudaStatus(int cuda_error, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("cuda: ", what, ": error ",
                                             cuda_error, "; ",
                                             CudaUnavailableReason()));
}

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  probe.reason = CudaUnavailableReason();
  return probe;
}

DeviceGuard::DeviceGuard(int) : status_(NoCuda("cudaSetDevice")) {}
DeviceGuard::~DeviceGuard() = default;

absl::StatusOr<std::shared_ptr<CudaStream>> CudaStream::Create(int) {
  return NoCuda("cudaStreamCreate");
}
CudaStream::~CudaStream() = default;
absl::Status CudaStream::Synchronize() const {
  return NoCuda("cudaStreamSynchronize");
}

absl::StatusOr<std::shared_ptr<CudaEvent>> CudaEvent::Create(int) {
  return NoCuda("cudaEventCreate");
}
CudaEvent::~CudaEvent() = default;
absl::Status CudaEvent::Record(const CudaStream&) {
  return NoCuda("cudaEventRecord");
}
absl::StatusOr<bool> CudaEvent::Query() const {
  return NoCuda("cudaEventQuery");
}
absl::Status CudaEvent::Synchronize() const {
  return NoCuda("cudaEventSynchronize");
}

absl::Status StreamWaitEvent(const CudaStream&, const CudaEvent&) {
  return NoCuda("cudaStreamWaitEvent");
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> DeviceBuffer::Allocate(
    size_t, std::shared_ptr<CudaStream>) {
  return NoCuda("cudaMalloc");
}
DeviceBuffer::~DeviceBuffer() = default;  // nothing was allocated

absl::Status CopyDeviceToDevice(void*, const void*, size_t,
                                const CudaStream&) {
  return NoCuda("cudaMemcpyAsync");
}
absl::Status Copy2DDeviceToDevice(void*, size_t, const void*, size_t, size_t,
                                  size_t, const CudaStream&) {
  return NoCuda("cudaMemcpy2DAsync");
}
absl::Status FillBytes(void*, int, size_t, const CudaStream&) {
  return NoCuda("cudaMemsetAsync");
}
absl::Status CopyHostToDevice(void*, const void*, size_t, const CudaStream&) {
  return NoCuda("cudaMemcpyAsync");
}
absl::Status CopyDeviceToHost(void*, const void*, size_t, const CudaStream&) {
  return NoCuda("cudaMemcpyAsync");
}

#endif  // RANKD_HAVE_CUDA

}  // namespace rankd::dataplane::nccl
