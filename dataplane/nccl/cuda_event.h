// CUDA events: how rankd learns, without blocking, that work queued on a
// stream finished (completions, nccl_completion.h), and how it orders work
// on one stream after work on another, including streams rankd did not
// create (a C ABI caller's cudaStream_t, capi/nccl.cc).
//
// CudaEventHandle is forward-declared exactly as the CUDA runtime declares
// cudaEvent_t (CUevent_st*), so callers can pass it to code built against
// the real headers. Depends on cuda_stream.h; cuda_event.cc uses
// cuda_device.h.
//
// Thread-safety: a CudaEvent may be shared between threads (through
// std::shared_ptr) and queried from any of them, but recording it
// (CudaEvent::Record, RecordEvent) must not race with other uses of the
// same event.
#ifndef RANKD_DATAPLANE_NCCL_CUDA_EVENT_H_
#define RANKD_DATAPLANE_NCCL_CUDA_EVENT_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/nccl/cuda_stream.h"

// As declared by the CUDA runtime (driver_types.h).
struct CUevent_st;

namespace rankd::dataplane::nccl {

using CudaEventHandle = CUevent_st*;  // cudaEvent_t

// A CUDA event without timing, owned by the CudaEvent. Query() is exact and
// never blocks.
class CudaEvent {
 public:
  // A new event on `device`. On error: DeviceGuard's status when `device`
  // cannot be made current, otherwise the CudaStatus of
  // cudaEventCreateWithFlags.
  static absl::StatusOr<std::shared_ptr<CudaEvent>> Create(int device);
  // Releases the event without waiting for the work it captured.
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Captures the work queued on `stream` so far (a stream of this event's
  // device); the CudaStatus of cudaEventRecord on error.
  absl::Status Record(const CudaStream& stream);
  // true once the captured work finished (or nothing was recorded), false
  // while it runs; the CudaStatus of cudaEventQuery when the work failed
  // (a sticky CUDA error).
  absl::StatusOr<bool> Query() const;
  // Blocks until the captured work finished; the CudaStatus of
  // cudaEventSynchronize when it failed.
  absl::Status Synchronize() const;

  // The raw handle, valid as long as this CudaEvent lives.
  CudaEventHandle get() const { return event_; }
  int device() const { return device_; }

 private:
  CudaEvent(CudaEventHandle event, int device)
      : event_(event), device_(device) {}
  CudaEventHandle event_;
  int device_;
};

// Makes later work on `stream` wait for `event` (no host blocking); the
// CudaStatus of cudaStreamWaitEvent on error.
absl::Status StreamWaitEvent(const CudaStream& stream, const CudaEvent& event);

// Streams rankd did not create, named by their raw handle (a C ABI caller's
// cudaStream_t), which stays the caller's: ordering rankd's work against
// them. `stream` must be a stream of `event`'s device (or CUDA's default
// stream, nullptr); a handle that is not fails with the CUDA error
// (CudaStatus naming the call). DeviceGuard's status when `event`'s device
// cannot be made current.
//
// Records `event` on `stream` (cudaEventRecord).
absl::Status RecordEvent(CudaEvent& event, CudaStreamHandle stream);
// Makes later work on `stream` wait for `event` (cudaStreamWaitEvent).
absl::Status StreamWaitEvent(CudaStreamHandle stream, const CudaEvent& event);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_CUDA_EVENT_H_
