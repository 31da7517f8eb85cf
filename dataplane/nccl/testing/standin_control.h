// What tests can ask of the CPU stand-in for the CUDA runtime and NCCL
// (testing/cuda_nccl_standin.cc), beyond the CUDA and NCCL functions it
// imitates. Test-only: the stand-in is never linked into a product binary;
// a test reaches it through the file $RANKD_NCCL_LIBRARY names (the same
// file rankd's loader opened), and Standin() is null when that is not the
// stand-in (a real GPU run), so such tests skip or take the real path.
//
// Depends on nothing but libc (dlopen).
#ifndef RANKD_DATAPLANE_NCCL_TESTING_STANDIN_CONTROL_H_
#define RANKD_DATAPLANE_NCCL_TESTING_STANDIN_CONTROL_H_

#include <cstdint>

extern "C" {
// 1 in the stand-in; absent from real libraries.
int rankd_standin_version(void);
// Whether device `device`'s primary context was created in this process
// (by cudaSetDevice, or by a runtime call on a thread that never chose a
// device, which means device 0).
int rankd_standin_primary_context_active(int device);
// NCCL kernels running now on `device` (entered, not yet left).
int rankd_standin_running_kernels(int device);
// The next cudaEventRecord blocks its caller until some communicator was
// aborted (ncclCommAbort/ncclCommDestroy) or `timeout_ms` passed: opens the
// window between "NCCL accepted the work" and the completion event that
// follows it.
void rankd_standin_hold_next_event_record_until_abort(int timeout_ms);
// Lowers cudaDevAttrMaxPitch to `bytes` (<= 0: back to 2^31 - 1).
void rankd_standin_set_max_pitch(int64_t bytes);
// Streams created so far (cudaStreamCreateWithFlags, default streams).
int64_t rankd_standin_streams_created(void);
// Device memory allocations made so far (cudaMalloc + cudaMallocAsync).
int64_t rankd_standin_allocations(void);
// Whether memory of `owner`'s default pool is accessible from `peer`.
int rankd_standin_pool_access(int owner, int peer);
// cudaMemPoolSetAccess and cudaMemPoolSetAttribute calls made so far on
// `device`'s default pool (-1 for no such device).
int64_t rankd_standin_default_pool_changes(int device);
// The stand-in GPU behind visible ordinal `device` (CUDA_VISIBLE_DEVICES
// maps them), or -1.
int rankd_standin_physical_device(int device);
// The next `count` calls of the NCCL function named `function` (e.g.
// "ncclAllReduce", "ncclGroupEnd", "ncclCommInitRankConfig",
// "ncclCommGetAsyncError") return `result` and do nothing else;
// ncclGetLastError then says the error was injected. A count <= 0 or
// ncclSuccess clears that function's injection.
void rankd_standin_fail_nccl_calls(const char* function, int result, int count);
// The next NCCL kernel that starts (any communicator) fails
// asynchronously with `result`: its communicator's ncclCommGetAsyncError
// reports it, and the kernel stays, writing nothing, until the
// communicator is aborted, as a failed NCCL kernel does.
void rankd_standin_fail_next_kernel(int result);
// For the calling thread: its NCCL launches on non-blocking communicators
// of 2+ ranks (each answers ncclInProgress until NCCL's launch thread
// queued the work); how often it blocked (a voluntary context switch: a
// sleep or a contended lock) between such a launch and the
// ncclCommGetAsyncError that saw the work queued, outside the stand-in's
// own calls; and how many of those blocks were early: the caller left the
// stand-in to block less than 1 ms after the launch. A caller that sleeps
// between polls blocks early in every launch; one that spins or yields
// first blocks only in long waits (a loaded machine can keep NCCL's new
// thread from a CPU for milliseconds).
void rankd_standin_thread_launch_waits(int64_t* in_progress_launches,
                                       int64_t* blocks, int64_t* early_blocks);
// For the calling thread: its waits for device work so far
// (cudaStreamSynchronize, cudaEventSynchronize, each event record it
// found not ready with cudaEventQuery, once however often it polled it,
// and each cudaMemcpyAsync between the device and pageable host memory,
// for which CUDA may synchronize; page-locked memory from cudaMallocHost
// is copied without).
int64_t rankd_standin_thread_host_syncs(void);
}

namespace rankd::dataplane::nccl::testing {

// The stand-in's test-control functions, resolved from $RANKD_NCCL_LIBRARY.
struct StandinControl {
  int (*primary_context_active)(int device);
  int (*running_kernels)(int device);
  void (*hold_next_event_record_until_abort)(int timeout_ms);
  void (*set_max_pitch)(int64_t bytes);
  int64_t (*streams_created)();
  int64_t (*allocations)();
  int (*pool_access)(int owner, int peer);
  int64_t (*default_pool_changes)(int device);
  int (*physical_device)(int device);
  void (*fail_nccl_calls)(const char* function, int result, int count);
  void (*fail_next_kernel)(int result);
  void (*thread_launch_waits)(int64_t* in_progress_launches, int64_t* blocks,
                              int64_t* early_blocks);
  int64_t (*thread_host_syncs)();
};

// The stand-in loaded in this process, or null (real libraries, or none).
const StandinControl* Standin();

}  // namespace rankd::dataplane::nccl::testing

#endif  // RANKD_DATAPLANE_NCCL_TESTING_STANDIN_CONTROL_H_
