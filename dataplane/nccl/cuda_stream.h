// CUDA streams: the queue every piece of rankd's device work goes on, and
// host functions queued on one. Events (cuda_event.h), buffers
// (device_buffer.h) and copies (cuda_copy.h) are all ordered on a
// CudaStream.
//
// Streams are created non-blocking (no implicit synchronization with the
// default stream), and destroying one never waits, so that a hung NCCL
// kernel never blocks the host in a destructor.
//
// CudaStreamHandle is forward-declared exactly as the CUDA runtime declares
// cudaStream_t (CUstream_st*), so callers can pass it to code built
// against the real headers. Depends on absl only; cuda_stream.cc uses
// cuda_device.h.
//
// Thread-safety: a CudaStream is immutable after creation and may be
// shared between threads (through std::shared_ptr); submitters that must
// not interleave hold submit_mu().
#ifndef RANKD_DATAPLANE_NCCL_CUDA_STREAM_H_
#define RANKD_DATAPLANE_NCCL_CUDA_STREAM_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

// As declared by the CUDA runtime (driver_types.h).
struct CUstream_st;

namespace rankd::dataplane::nccl {

using CudaStreamHandle = CUstream_st*;  // cudaStream_t

// A non-blocking CUDA stream on one device, owned by the CudaStream.
class CudaStream {
 public:
  // A new stream on `device`. On error: DeviceGuard's status when `device`
  // cannot be made current (Unavailable without a runtime or device),
  // otherwise the CudaStatus of cudaStreamCreateWithFlags.
  static absl::StatusOr<std::shared_ptr<CudaStream>> Create(int device);
  // One stream per device for rankd's own small device-to-host reads
  // (DeviceTensor::ToHost, Agreement::Resolve, agreement records), created
  // on first use and kept for the process's life, instead of a stream per
  // call. Nothing queued on it waits for an event, so reads never block
  // behind unfinished work. Errors as Create (a failure is not cached).
  static absl::StatusOr<std::shared_ptr<CudaStream>> ForTransfers(int device);
  // Releases the stream without waiting: work already queued still runs
  // (CUDA releases the stream afterwards).
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  // The raw handle, valid as long as this CudaStream lives.
  CudaStreamHandle get() const { return stream_; }
  int device() const { return device_; }
  // Blocks until every piece of work queued so far has finished; the
  // CudaStatus of cudaStreamSynchronize when any of it failed.
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

// Whether `stream` (null: the legacy default stream of `device`) is taking
// part in a CUDA graph capture (cudaStreamIsCapturing, asked with `device`
// current): true while the capture is active, and also once an error
// invalidated it (it ends only with cudaStreamEndCapture), and for the
// legacy stream while a blocking stream of the device captures
// (cudaErrorStreamCaptureImplicit). Work queued on such a stream would be
// recorded into the caller's graph, not run. Otherwise DeviceGuard's
// status or the CudaStatus of the call.
absl::StatusOr<bool> IsCapturing(CudaStreamHandle stream, int device);

// OK unless IsCapturing(stream, device); then FailedPrecondition
// "<what> is capturing a CUDA graph ...", saying that rankd's operations
// run outside captures (they finish on the host: completion events,
// agreement records, aborts) and that nothing was queued. IsCapturing's
// error when it cannot tell. rankd refuses before any native work, so the
// refusal leaves a session usable.
absl::Status CheckNotCapturing(CudaStreamHandle stream, int device,
                               absl::string_view what);

// Runs fn(arg) on a CUDA-owned host thread once the work queued on `stream`
// so far finished (cudaLaunchHostFunc); later work on `stream` waits for fn
// to return. fn must not call CUDA; `arg` stays the caller's and must live
// until fn ran. Tests use it to hold a stream. On error (DeviceGuard's
// status, or the CudaStatus of the call) fn never runs.
absl::Status LaunchHostFunction(const CudaStream& stream, void (*fn)(void*),
                                void* arg);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_CUDA_STREAM_H_
