// The one completion type of both backends (docs/contract.md, Completions)
// and the bookkeeping behind it, over a native layer that only reports when
// its work finished:
//
//   Operation            the shared state of one submitted operation: its
//                        name, every resource its work uses (retained until
//                        that work finished), and its outcome.
//   OperationOwner       the session side (declared in native_layer.h, the
//                        interface a backend implements): poison, the two
//                        cancellation modes, and what becomes of unfinished
//                        work nobody waits for any more.
//   OperationCompletion  the BoundedCompletion handed to callers; Gloo's and
//                        NCCL's CommunicationCompletion.
//
// The native layer reports the end of the work in one of two ways:
//   - pushed: Finish(status), from the thread that ran the work (Gloo's
//     executor, whose native calls block);
//   - probed: a Probe the operation asks whenever someone checks (NCCL: a
//     CUDA event query, the work running on the device). A probed operation
//     may be created Pending, before its native work is queued, so that an
//     abort in between (FailIfRunning) is never missed; it reports done only
//     after MarkQueued().
//
// Exactness: Done() and IsComplete() are true only once the native work
// finished, never early; an operation failed by FailIfRunning still waits
// for its work to leave. Outcomes: OK, the native error, the cause given to
// FailIfRunning, or a refusal (Refuse: members disagreed and the work was
// left out on every member) -- the one failure that leaves the session
// usable. A waiter that sees any other failure poisons the owner.
//
// Ownership: the resources go once the work finished, released in the
// thread that learns it (Finish's, or the waiter's), never before. A
// completion destroyed while its work still runs hands the operation to its
// owner (OperationOwner::Unattended), which keeps the resources alive until
// the work finished.
//
// Thread-safe. Depends on dataplane/completion.h, native_layer.h,
// quarantine.h and absl.
#ifndef RANKD_DATAPLANE_OPERATION_H_
#define RANKD_DATAPLANE_OPERATION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/completion.h"
#include "dataplane/native_layer.h"
#include "dataplane/quarantine.h"

namespace rankd::dataplane {

// How long a thread polls for work another thread hands it before it
// sleeps (a waiter for its operation's completion), or leaves fresh work to
// the submitter that will wait for it (the Gloo executor). Waking a sleeping
// thread costs a futex call and a context switch on each side -- tens of
// microseconds on a VM, whose idle CPUs halt -- more than a small
// operation, while a bounded poll costs at most its length. 30 us when this
// process may run on at least 2 CPUs; zero on one, where polling would only
// delay the thread it waits for.
absl::Duration HandOffSpin();

// How SpinUntil polls. kPause keeps the CPU (for a thread that another
// CPU will answer: a yield on a loaded machine can cost it a whole time
// slice after the answer came); kYield offers it between polls (for a
// thread that may have taken the CPU of the thread it waits for, as a
// thread just woken often preempts its waker).
enum class SpinMode { kPause, kYield };

// Polls `ready` for up to `spin`; returns whether it turned true.
bool SpinUntil(absl::Duration spin, const std::function<bool()>& ready,
               SpinMode mode = SpinMode::kPause);

class Operation : public std::enable_shared_from_this<Operation> {
 public:
  // Asks the native layer whether the work finished: true, false, or the
  // native error that ended it (which becomes the outcome, as written).
  using Probe = std::function<absl::StatusOr<bool>()>;

  // `operation` names the work in errors ("all_reduce_sum on group 3").
  // Without `probe` the work's end is pushed with Finish; with one, the
  // operation is queued already (see Pending).
  Operation(std::string operation,
            std::vector<std::shared_ptr<const void>> retained,
            Probe probe = nullptr);
  // A probed operation registered before its native work is queued: it
  // never reports done until MarkQueued() says the probe now covers the
  // work.
  static std::shared_ptr<Operation> Pending(
      std::string operation, std::vector<std::shared_ptr<const void>> retained,
      Probe probe);
  void MarkQueued();

  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  const std::string& operation() const { return operation_; }

  // Runs once, when the work is first seen finished OK: its error (say,
  // members that submitted different work) becomes the outcome.
  void SetVerifier(std::function<absl::Status()> verify);
  // The members agreed to leave this work out: `refusal` is the outcome
  // (unless another failure came first) and, unlike any other failure, it
  // does not poison the session.
  void Refuse(absl::Status refusal);
  bool refused() const;

  // Pushed end of the work: releases the retained resources (outside the
  // lock, so a woken waiter that allocates again finds its buffers back in
  // their pool), then marks the operation done with `status` unless an
  // earlier failure (Refuse, FailIfRunning) is already the outcome. Only the
  // first call counts.
  void Finish(absl::Status status);

  // Exact and non-blocking: true once the work finished (for a probed
  // operation, asks the probe).
  bool Done();
  // The outcome; final once Done().
  absl::Status status() const;
  // Blocks until Done() or `timeout` passes; returns Done().
  bool WaitFor(absl::Duration timeout);
  // Blocks until Done(); returns the outcome.
  absl::Status Wait();

  // Marks the operation failed with `cause` (Aborted naming it when `cause`
  // is OK) unless its work already finished (or is being Finished). A
  // native error the probe reports replaces a refusal: the work did run
  // and failed, so the session is poisoned after all. Used before native work
  // is aborted, so that killed work never reports success. The first cause
  // wins.
  void FailIfRunning(const absl::Status& cause);

  // Releases the retained resources once Done() (no-op before).
  void ReleaseIfDone();
  // Resources still retained (0 once released or quarantined).
  size_t retained() const;
  // Hands what the operation retains to `quarantine`, which frees it once
  // Done(). Once per operation: later calls do nothing.
  void QuarantineIn(Quarantine& quarantine);
  // Leaks what it still retains (never frees memory a device may still
  // use).
  void Abandon();

 private:
  // The work finished: done, then the verifier's outcome.
  void FinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the probe (when queued) and finishes on its answer.
  void ProbeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The outcome once finished_ is set, read without the lock: every writer
  // of status_ and refused_ returns once done_ is set, and both are written
  // before finished_ (release), so a reader that saw finished_ (acquire)
  // reads their final values. The waiting caller reads the outcome several
  // times per operation; each lock is an atomic exchange.
  const absl::Status& final_status() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return status_;
  }
  bool final_refused() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return refused_; }

  const std::string operation_;
  const Probe probe_;
  mutable absl::Mutex mu_;
  bool queued_ ABSL_GUARDED_BY(mu_) = true;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // done_, published once the outcome is final, for WaitFor, Done,
  // status and refused to read without the lock.
  std::atomic<bool> finished_{false};
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  bool quarantined_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::function<absl::Status()> verify_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const void>> retained_ ABSL_GUARDED_BY(mu_);
};

// The completion callers get. Thread-safe.
class OperationCompletion final : public BoundedCompletion {
 public:
  // How the completion refers to its owner.
  enum class OwnerRef {
    // Keeps the owner alive (NCCL: the session state must outlive work the
    // device may still run, to quarantine it).
    kShared,
    // Does not (Gloo: the owner's executors hold the completions' work and
    // finish all of it before the owner goes away, so a strong reference
    // would be a cycle). With the owner gone, the work has finished.
    kWeak,
  };

  // `backend` ("gloo", "nccl") names the backend in argument errors.
  OperationCompletion(std::shared_ptr<Operation> op,
                      const std::shared_ptr<OperationOwner>& owner,
                      OwnerRef ref, const char* backend);
  // Hands unfinished work to the owner (OperationOwner::Unattended).
  ~OperationCompletion() override;

  OperationCompletion(const OperationCompletion&) = delete;
  OperationCompletion& operator=(const OperationCompletion&) = delete;

  bool IsComplete() const override;
  absl::Status Wait() override;
  bool SupportsCancellation(CancellationMode mode) const override;
  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                          CancellationMode mode) override;

  const std::string& operation() const { return op_->operation(); }
  const std::shared_ptr<Operation>& op() const { return op_; }
  // Waits up to `timeout`; returns whether the work completed.
  bool WaitFor(absl::Duration timeout) const;
  // Resources still retained by the work.
  size_t retained() const { return op_->retained(); }

 private:
  std::shared_ptr<OperationOwner> Owner() const;
  // Done(); once done, releases the resources here, in the thread that
  // asked (never a watchdog that holds locks), and poisons the owner on a
  // failure that is not a refusal.
  bool Settle() const;

  const std::shared_ptr<Operation> op_;
  const std::shared_ptr<OperationOwner> shared_owner_;
  const std::weak_ptr<OperationOwner> weak_owner_;
  const char* const backend_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_OPERATION_H_
