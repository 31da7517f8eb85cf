// RAII handles for the CUDA runtime objects the NCCL backend uses: the
// current device (DeviceGuard), streams, events, device buffers, plus the
// device probe and a few stream-ordered copies.
//
// rankd is built without CUDA: the CUDA runtime (libcudart.so.13 or .12) is
// opened on first use (internal/native_library.h says where it is looked
// for). Where it cannot be opened, or there is no driver or device, every
// factory returns Unavailable with the reason and ProbeDevices() reports 0
// devices with that reason; nothing fails at program start. CUDA handle
// types are forward-declared exactly as the CUDA runtime declares them
// (cudaStream_t == CUstream_st*, cudaEvent_t == CUevent_st*), so callers
// can pass them to code built against the real headers.
//
// Rules the handles follow so that a hung NCCL kernel never blocks the host
// in a destructor:
//   - DeviceBuffer uses the stream-ordered allocator (cudaMallocAsync /
//     cudaFreeAsync) when the device supports memory pools: cudaFree
//     synchronizes the whole device, cudaFreeAsync does not. A buffer keeps
//     its allocation stream alive and frees on it.
//   - No pinned host memory (cudaFreeHost synchronizes the device too).
//   - Streams are created non-blocking (no implicit sync with stream 0).
//
// Thread-safety: handles are immutable after creation and may be shared
// between threads (through std::shared_ptr); CudaEvent::Record must not race
// with other uses of the same event.
#ifndef RANKD_DATAPLANE_NCCL_CUDA_HANDLES_H_
#define RANKD_DATAPLANE_NCCL_CUDA_HANDLES_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

// As declared by the CUDA runtime (driver_types.h).
struct CUstream_st;
struct CUevent_st;

namespace rankd::dataplane::nccl {

using CudaStreamHandle = CUstream_st*;  // cudaStream_t
using CudaEventHandle = CUevent_st*;    // cudaEvent_t

// What the machine offers. device_count is 0 (with a reason) when the CUDA
// runtime cannot be loaded, or there is no driver or device; never an
// error.
struct DeviceProbe {
  int device_count = 0;
  std::string reason;
};
DeviceProbe ProbeDevices();

// "cuda: <what>: cudaErrorX (text)" (the number alone when the runtime is
// not loaded) with a code that fits the error:
// ResourceExhausted for out-of-memory, Unavailable for missing devices or
// drivers, Internal otherwise.
absl::Status CudaStatus(int cuda_error, absl::string_view what);

// Makes `device` current for the calling thread while it lives, and then
// makes the caller's device current again, so rankd never changes a
// caller's CUDA state. One exception: when the previous device's primary
// context does not exist (a thread that never chose a device reports
// device 0), restoring would create a context on that GPU in every
// process, so the guard's device stays current instead. Every CUDA call
// rankd makes sets its device first.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  // OK when the device is current.
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
  int previous_ = -1;  // >= 0: restore it
};

// The calling thread's current device (cudaGetDevice).
absl::StatusOr<int> CurrentDevice();
// Whether `device`'s primary context exists in this process
// (cuDevicePrimaryCtxGetState); Unimplemented when the driver cannot say.
absl::StatusOr<bool> PrimaryContextActive(int device);

// A non-blocking CUDA stream on one device. Destroying it does not wait:
// work already queued still runs (CUDA releases the stream afterwards).
class CudaStream {
 public:
  static absl::StatusOr<std::shared_ptr<CudaStream>> Create(int device);
  // One stream per device for rankd's own small device-to-host reads
  // (DeviceTensor::ToHost, Agreement::Resolve, agreement records), created
  // on first use and kept for the process's life, instead of a stream per
  // call. Nothing queued on it waits for an event, so reads never block
  // behind unfinished work.
  static absl::StatusOr<std::shared_ptr<CudaStream>> ForTransfers(int device);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  CudaStreamHandle get() const { return stream_; }
  int device() const { return device_; }
  // Blocks until every piece of work queued so far has finished.
  absl::Status Synchronize() const;
  // Held by a submitter across all the work of one operation (waits,
  // copies, NCCL calls, the completion event), so that operations from
  // several threads never interleave on this stream.
  absl::Mutex& submit_mu() const { return submit_mu_; }

 private:
  CudaStream(CudaStreamHandle stream, int device)
      : stream_(stream), device_(device) {}
  CudaStreamHandle stream_;
  int device_;
  mutable absl::Mutex submit_mu_;
};

// A CUDA event without timing. Query() is exact and never blocks.
class CudaEvent {
 public:
  static absl::StatusOr<std::shared_ptr<CudaEvent>> Create(int device);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Captures the work queued on `stream` so far.
  absl::Status Record(const CudaStream& stream);
  // true once the captured work finished, false while it runs; an error
  // when the work failed (a sticky CUDA error).
  absl::StatusOr<bool> Query() const;
  // Blocks until the captured work finished.
  absl::Status Synchronize() const;

  CudaEventHandle get() const { return event_; }
  int device() const { return device_; }

 private:
  CudaEvent(CudaEventHandle event, int device)
      : event_(event), device_(device) {}
  CudaEventHandle event_;
  int device_;
};

// Makes later work on `stream` wait for `event` (no host blocking).
absl::Status StreamWaitEvent(const CudaStream& stream, const CudaEvent& event);

// Streams rankd did not create, named by their raw handle (a C ABI caller's
// cudaStream_t): ordering rankd's work against them. `stream` must be a
// stream of `event`'s device (or CUDA's default stream, nullptr); a handle
// that is not fails with the CUDA error (CudaStatus naming the call).
//
// Records `event` on `stream` (cudaEventRecord).
absl::Status RecordEvent(CudaEvent& event, CudaStreamHandle stream);
// Makes later work on `stream` wait for `event` (cudaStreamWaitEvent).
absl::Status StreamWaitEvent(CudaStreamHandle stream, const CudaEvent& event);

// What cudaPointerGetAttributes says about a pointer.
struct PointerAttributes {
  // cudaMemoryType's values.
  enum class Memory { kUnregistered = 0, kHost = 1, kDevice = 2, kManaged = 3 };
  Memory memory = Memory::kUnregistered;
  int device = -1;  // for kDevice and kManaged
};
// The attributes of `pointer`, asked with `device` current. Unimplemented
// when the loaded CUDA runtime does not export cudaPointerGetAttributes (the
// CPU stand-in); InvalidArgument naming the CUDA error when the call fails
// (the pointer is nothing CUDA can describe); a failure to load the runtime
// or select `device` as DeviceGuard reports it.
absl::StatusOr<PointerAttributes> GetPointerAttributes(const void* pointer,
                                                       int device);

// Device memory. A zero-byte buffer is valid and holds no memory (data()
// is nullptr); allocating one makes no CUDA call.
class DeviceBuffer {
 public:
  // Allocates `bytes` on stream->device(), ordered on `stream`.
  static absl::StatusOr<std::shared_ptr<DeviceBuffer>> Allocate(
      size_t bytes, std::shared_ptr<CudaStream> stream);
  // Device memory owned elsewhere (e.g. a framework tensor): never freed
  // by rankd; `keep_alive` (may be null) is held as long as the buffer.
  // Makes no CUDA call.
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

// Runs fn(arg) on a CUDA-owned host thread once the work queued on `stream`
// so far finished (cudaLaunchHostFunc); later work on `stream` waits for fn
// to return. fn must not call CUDA. Tests use it to hold a stream.
absl::Status LaunchHostFunction(const CudaStream& stream, void (*fn)(void*),
                                void* arg);

// Stream-ordered copies and fills on `stream` (no host blocking unless
// noted). Zero bytes is a no-op.
absl::Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes,
                                const CudaStream& stream);
// `height` rows of `width` bytes, rows `src_pitch` / `dst_pitch` apart.
absl::Status Copy2DDeviceToDevice(void* dst, size_t dst_pitch, const void* src,
                                  size_t src_pitch, size_t width, size_t height,
                                  const CudaStream& stream);
absl::Status FillBytes(void* dst, int value, size_t bytes,
                       const CudaStream& stream);
// Host <-> device; both return once `src` may be reused / `dst` holds the
// data (they synchronize `stream`).
absl::Status CopyHostToDevice(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream);
// Queues a host-to-device copy without waiting; `src` must stay valid
// until the stream reached it.
absl::Status CopyHostToDeviceAsync(void* dst, const void* src, size_t bytes,
                                   const CudaStream& stream);
absl::Status CopyDeviceToHost(void* dst, const void* src, size_t bytes,
                              const CudaStream& stream);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_CUDA_HANDLES_H_
