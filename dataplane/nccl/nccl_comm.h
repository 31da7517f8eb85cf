// NcclCommunicator: RAII for one ncclComm_t, always non-blocking
// (ncclConfig_t.blocking = 0), so that no NCCL call parks the host
// indefinitely and an abort from another thread is safe (NCCL joins its
// launch thread first; a blocking communicator's launch runs in the
// caller, which an abort cannot safely end: docs/nccl.md, "Submitting
// work"):
//   - StartInit() calls ncclCommInitRankConfig (or ncclCommInitRankScalable
//     with several unique ids) and returns at once; Split() makes a child
//     with ncclCommSplit (NCCL 2.18+), collective over this communicator's
//     ranks, and returns it ready; AwaitReady()/PollReady()
//     poll ncclCommGetAsyncError until the communicator is ready, failed, a
//     deadline passed or an interrupt (job failure) fired; on a deadline or
//     interrupt the communicator is aborted (ncclCommAbort) before it
//     returns.
//   - Enqueue() issues NCCL calls; a call that answers ncclInProgress is
//     polled until NCCL queued the work, bounded the same way, without
//     sleeping in the usual case (a spin-then-yield wait; docs/nccl.md,
//     "Submitting work").
//   - Abort() (ncclCommAbort) may be called from any thread at any time,
//     also while another thread is polling inside Enqueue(); it tears the
//     communicator down (kernels waiting for a dead peer exit) before it
//     returns. Later calls fail with the abort's cause.
//   - The destructor finalizes and destroys a healthy communicator within a
//     bound and aborts it otherwise.
// NCCL is opened on first use (internal/native_library.h); where it cannot
// be, StartInit and NewNcclUniqueId return Unavailable saying what was
// looked for where. The header does not include nccl.h.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_COMM_H_
#define RANKD_DATAPLANE_NCCL_NCCL_COMM_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/nccl_data_type.h"
#include "dataplane/nccl/nccl_unique_id.h"

// As declared by nccl.h (typedef struct ncclComm* ncclComm_t).
struct ncclComm;

namespace rankd::dataplane::nccl {

using NcclCommHandle = ncclComm*;  // ncclComm_t

// NCCL version code of the loaded library (ncclGetVersion), e.g. 22803;
// 0 when NCCL cannot be loaded.
int NcclRuntimeVersion();
// Whether ncclCommInitRankScalable can be used (the loaded NCCL is 2.23.4
// or later).
bool ScalableInitSupported();
// Whether ncclCommSplit can be used (the loaded NCCL is 2.18 or later).
bool SplitSupported();

// A fresh ncclUniqueId (ncclGetUniqueId): kNcclUniqueIdBytes raw bytes.
absl::StatusOr<std::string> NewNcclUniqueId();

// "nccl: <what>: ncclSystemError (text)[; last NCCL error: ...]" with the
// code NcclResultCodeOf (internal/result_codes.h) gives the result: never
// InvalidArgument, since an NCCL failure poisons the session.
absl::Status NcclStatus(int nccl_result, absl::string_view what,
                        NcclCommHandle comm = nullptr);

// The value of ncclInProgress / ncclSuccess (so callers need not include
// nccl.h).
inline constexpr int kNcclSuccess = 0;
inline constexpr int kNcclInProgress = 7;
// NCCL_SPLIT_NOCOLOR: a rank that joins no communicator of a Split().
inline constexpr int kNcclSplitNoColor = -1;

// Thin wrappers over the NCCL calls rankd issues (inside
// NcclCommunicator::Enqueue bodies), so that callers need not include
// nccl.h. Each returns the ncclResult_t. They need a communicator, so NCCL
// is loaded whenever they are called.
enum class NcclRedOp : int { kSum = 0, kMin = 3 };
int NcclAllReduce(const void* send, void* recv, size_t count, NcclDataType type,
                  NcclRedOp op, NcclCommHandle comm, CudaStreamHandle stream);
int NcclAllGather(const void* send, void* recv, size_t send_count,
                  NcclDataType type, NcclCommHandle comm,
                  CudaStreamHandle stream);
int NcclBroadcast(const void* send, void* recv, size_t count, NcclDataType type,
                  int root, NcclCommHandle comm, CudaStreamHandle stream);
int NcclSend(const void* send, size_t count, NcclDataType type, int peer,
             NcclCommHandle comm, CudaStreamHandle stream);
int NcclRecv(void* recv, size_t count, NcclDataType type, int peer,
             NcclCommHandle comm, CudaStreamHandle stream);
// ncclGroupStart(); calls(); ncclGroupEnd(). Returns the first error of
// `calls` (the group is still closed) or ncclGroupEnd's result.
int NcclGrouped(const std::function<int()>& calls);

class NcclCommunicator {
 public:
  struct Options {
    // For messages and logs ("world", "m2-...").
    std::string name;
    int device = 0;
    int nranks = 0;
    int rank = 0;
    // Raw ncclUniqueIds (kNcclUniqueIdBytes each); more than one needs
    // ScalableInitSupported(). Unused by Split().
    std::vector<std::string> unique_ids;
    // config.splitShare (only where SplitSupported()): whether the
    // communicators Split() makes from this one share its resources. NCCL
    // then also orders their kernels with this one's, in launch order,
    // across streams (they share its device stream: docs/nccl.md,
    // "Communicators and order").
    bool share_resources = false;
  };

  // Validates `options` and starts a non-blocking init. The communicator is
  // not usable until PollReady() returned true.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> StartInit(
      Options options);

  // A child of this ready communicator (ncclCommSplit; needs
  // SplitSupported(), Unimplemented otherwise): collective over every rank
  // of this one, each giving a `color` (kNcclSplitNoColor: no child, and
  // null is returned) and a `key` (the child's ranks go by key). Waits,
  // holding this communicator as Enqueue does, until NCCL finished the
  // split and the child is ready. `child` names it; its nranks and rank
  // must be what the colors and keys make. On `deadline` (DeadlineExceeded)
  // or `interrupt`, this communicator is aborted (which ends NCCL's split)
  // before it returns; any other failure is the NCCL error.
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> Split(
      Options child, int color, int key, absl::Time deadline,
      const std::function<absl::Status()>& interrupt);

  // Finalizes and destroys within `destroy_timeout` when healthy; aborts
  // otherwise (or when that bound passes).
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // One poll of an initializing communicator: true when ready, false while
  // init is in progress, the error (init failed) otherwise.
  absl::StatusOr<bool> PollReady();

  // Polls until ready. On `deadline` (DeadlineExceeded naming the
  // communicator) or when `interrupt` returns an error (that error), aborts
  // the communicator first. `interrupt` may be empty.
  absl::Status AwaitReady(absl::Time deadline,
                          const std::function<absl::Status()>& interrupt,
                          absl::Duration poll_interval = absl::Milliseconds(2));

  // For a ready communicator: OK while healthy (or still enqueuing), the
  // asynchronous error (ncclCommGetAsyncError) or the abort cause
  // otherwise. Never blocks for long.
  absl::Status CheckAsyncError();

  // Runs `body` with the communicator (with its device current) under the
  // communicator's lock. `body` issues NCCL calls and returns the last
  // ncclResult_t. ncclInProgress (NCCL 2.28 answers it at every group end
  // of a communicator of 2+ ranks, while a thread it started launches the
  // work) is polled with ncclCommGetAsyncError until NCCL queued the work:
  // spinning for 5 µs, then yielding the CPU until 10 ms passed (as NCCL's
  // own launch waits for room in its work queue), then sleeping 50 µs
  // doubling to 1 ms, so that the usual wait (tens of µs) never sleeps and
  // a long one (peers connecting on first use) does not hold a core.
  // `deadline` bounds the wait (DeadlineExceeded naming `what`; the caller
  // poisons and aborts), and `interrupt` (may be empty; checked between
  // polls) ends it early with its error; Abort() from another thread ends
  // it with the abort's cause. Calls are serialized: one Enqueue at a time.
  absl::Status Enqueue(absl::string_view what,
                       const std::function<int(NcclCommHandle)>& body,
                       absl::Time deadline,
                       const std::function<absl::Status()>& interrupt);

  // ncclCommAbort. Idempotent and thread-safe; returns after NCCL tore the
  // communicator down. Later calls fail with `cause`.
  void Abort(const absl::Status& cause);

  // Finalize (polled) then destroy within `timeout`; abort on error or
  // timeout. Idempotent.
  void Close(absl::Duration timeout);

  // OK until aborted or closed; then the cause.
  absl::Status closed_status() const;
  bool ready() const;
  const std::string& name() const { return options_.name; }
  int device() const { return options_.device; }
  int nranks() const { return options_.nranks; }
  int rank() const { return options_.rank; }

  // How long the destructor waits for a clean finalize.
  void set_destroy_timeout(absl::Duration timeout) {
    destroy_timeout_ = timeout;
  }

 private:
  explicit NcclCommunicator(Options options) : options_(std::move(options)) {}
  // Requires mu_; aborts and records `cause`.
  void AbortLocked(const absl::Status& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A failed Split: aborts this communicator (which ends NCCL's split),
  // then the child if NCCL made one; returns `cause`.
  absl::Status AbandonSplitLocked(const absl::Status& cause,
                                  NcclCommHandle* child)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  absl::Duration destroy_timeout_ = absl::Seconds(10);
  // Serializes Enqueue: NCCL needs an in-progress call polled to completion
  // before the next call on the communicator.
  absl::Mutex enqueue_mu_;
  // Guards the handle and every NCCL call that uses it (Abort takes only
  // this one, so it never waits for a polling Enqueue).
  mutable absl::Mutex mu_;
  NcclCommHandle comm_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_COMM_H_
