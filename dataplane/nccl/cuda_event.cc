#include "dataplane/nccl/cuda_event.h"

#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/internal/cuda_call.h"
#include "dataplane/nccl/internal/native_abi.h"

namespace rankd::dataplane::nccl {

using internal::Check;
using internal::Cuda;
using internal::CudaError;

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

}  // namespace rankd::dataplane::nccl
