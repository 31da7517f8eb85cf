// Which CUDA devices there are and which one the calling thread uses: the
// device probe, CUDA errors as absl::Status, and DeviceGuard, which every
// other CUDA handle (cuda_stream.h, cuda_event.h, device_buffer.h,
// cuda_copy.h) uses to run each CUDA call on its own device without
// changing the caller's.
//
// rankd is built without CUDA: the CUDA runtime (libcudart.so.13 or .12) is
// opened on first use (internal/native_library.h says where it is looked
// for). Where it cannot be opened, or there is no driver or device, every
// function here and every handle factory returns Unavailable with the
// reason, and ProbeDevices() reports 0 devices with that reason; nothing
// fails at program start.
//
// Depends on absl only (no CUDA headers); the CUDA handle headers depend on
// this one. Thread-safe: every function may be called from any thread.
#ifndef RANKD_DATAPLANE_NCCL_CUDA_DEVICE_H_
#define RANKD_DATAPLANE_NCCL_CUDA_DEVICE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::dataplane::nccl {

// What the machine offers.
struct DeviceProbe {
  int device_count = 0;
  std::string reason;  // why device_count is 0; empty otherwise
};

// Counts the CUDA devices. Never fails: when the CUDA runtime cannot be
// loaded, or there is no driver or device, device_count is 0 and reason
// says why ("no GPU usable: ..." / "no GPU: ...").
DeviceProbe ProbeDevices();

// A CUDA error as a status: "cuda: <what>: cudaErrorX (text)" ("error <n>"
// when the runtime is not loaded), with the code that fits the error:
// ResourceExhausted for out-of-memory, Unavailable for missing devices or
// drivers, Internal otherwise. Never returns OK, not even for
// cuda_error == 0 (callers only pass failures).
absl::Status CudaStatus(int cuda_error, absl::string_view what);

// Makes `device` current for the calling thread while it lives, and then
// makes the caller's device current again, so rankd never changes a
// caller's CUDA state. One exception: when the previous device's primary
// context does not exist (a thread that never chose a device reports
// device 0), restoring would create a context on that GPU in every
// process, so the guard's device stays current instead. Every CUDA call
// rankd makes sets its device first.
//
// Use on one thread only (the one that made it), and only as a local.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  // Restores the previous device (see above); never fails visibly.
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // OK when `device` is current. Otherwise Unavailable when the runtime
  // could not be loaded, or the CudaStatus of cudaGetDevice/cudaSetDevice
  // (e.g. Unavailable for an invalid device); nothing is restored then.
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
  int previous_ = -1;  // >= 0: restore it
};

// The calling thread's current device (cudaGetDevice). The runtime's load
// error when it cannot be loaded, the CudaStatus of the call otherwise.
absl::StatusOr<int> CurrentDevice();

// Whether `device`'s primary context exists in this process
// (cuDevicePrimaryCtxGetState); asking creates none. Unimplemented when
// the driver cannot say (no libcuda.so.1, or the CPU stand-in), Internal
// when the driver call fails, the load error when there is no runtime.
absl::StatusOr<bool> PrimaryContextActive(int device);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_CUDA_DEVICE_H_
