// Completions of the NCCL backend (docs/contract.md): a CUDA event recorded
// after the operation's work plus every resource the work uses (tensors'
// buffers, output and scratch buffers, the stream, the communicator).
//
//   NcclOp          shared state of one submitted operation: the event, the
//                   retained resources and the outcome.
//   NcclOpOwner     what an operation reports to (its session core): poison,
//                   native cancellation (ncclCommAbort), quarantine.
//   NcclCompletion  the BoundedCompletion handed to callers.
//
// Operations whose work may still run go to the owner's Quarantine
// (dataplane/quarantine.h, shared with Gloo), which frees their resources
// only after cudaEventQuery says done.
//
// Exactness: IsComplete() is true only once the event reports the GPU work
// finished, never early. Wait() polls the event (it does not call
// cudaEventSynchronize, so a concurrent abort is always observed).
// Ownership: a completion destroyed while its work still runs hands the
// operation to its owner's quarantine, so no live buffer is ever freed.
// WaitBounded:
//   - kNativeCancel: poisons the session, marks its running operations
//     failed and aborts its communicators (ncclCommAbort returns after
//     teardown), then waits up to the owner's abort grace for the aborted
//     kernels to leave; anything still running is quarantined.
//   - kQuarantineUntilComplete: poisons the session (the communicators
//     refuse new work), marks the operation failed and moves it to the
//     quarantine; the work keeps running and its resources are freed when
//     the event completes.
// Both return DeadlineExceeded{mode}; later Wait() calls return the cause.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_
#define RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/completion.h"
#include "dataplane/nccl/cuda_handles.h"
#include "dataplane/quarantine.h"

namespace rankd::dataplane::nccl {

// One submitted operation. Thread-safe.
class NcclOp : public std::enable_shared_from_this<NcclOp> {
 public:
  // `event` captures the operation's work (nullptr when it could not be
  // recorded: the operation then never reports done, and its resources are
  // only released by Quarantine::Abandon, i.e. leaked on purpose).
  NcclOp(std::string operation, std::shared_ptr<CudaEvent> event,
         std::vector<std::shared_ptr<const void>> retained);
  // An operation registered before its native work is queued, so that an
  // abort in between marks it failed (FailIfRunning) instead of missing it:
  // it never reports done until MarkRecorded() says `event` was recorded
  // after the work.
  static std::shared_ptr<NcclOp> Pending(
      std::string operation, std::shared_ptr<CudaEvent> event,
      std::vector<std::shared_ptr<const void>> retained);
  void MarkRecorded();
  // Runs once, when the event first reports the work finished: its error
  // (say, members that submitted different work) becomes the outcome.
  void SetVerifier(std::function<absl::Status()> verify);
  // The operation was refused before any payload was queued (members
  // disagree; NcclSessionOptions::verify_agreement): `refusal` is its
  // outcome, and, unlike any other failure, it does not poison the session.
  void Refuse(absl::Status refusal);
  bool refused() const;

  const std::string& operation() const { return operation_; }
  const std::shared_ptr<CudaEvent>& event() const { return event_; }

  // Exact and non-blocking: true once the event says the work finished (or
  // the event reported a CUDA error, which becomes the status).
  bool Done();
  // The outcome; meaningful once Done(): OK, the CUDA error, or the cause
  // given to FailIfRunning.
  absl::Status status() const;
  // Marks the operation failed with `cause` unless its work already
  // finished. Used before communicators are aborted.
  void FailIfRunning(const absl::Status& cause);
  // Releases the retained resources (no-op until Done()).
  void ReleaseIfDone();
  // Hands the operation to `quarantine` (dataplane/quarantine.h), which
  // holds what it retained until Done(). Once per operation: later calls do
  // nothing.
  void QuarantineIn(Quarantine& quarantine);
  // Releases them unconditionally by leaking them (never frees memory the
  // GPU may still use).
  void Abandon();

 private:
  // The work finished: done, and the verifier's outcome.
  void FinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string operation_;
  const std::shared_ptr<CudaEvent> event_;
  mutable absl::Mutex mu_;
  bool recorded_ ABSL_GUARDED_BY(mu_) = true;
  std::function<absl::Status()> verify_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const void>> retained_ ABSL_GUARDED_BY(mu_);
  bool quarantined_ ABSL_GUARDED_BY(mu_) = false;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
};

// The session side of an operation.
class NcclOpOwner {
 public:
  virtual ~NcclOpOwner() = default;
  // OK while healthy; the original cause once poisoned.
  virtual absl::Status PoisonStatus() const = 0;
  // Records the first failure; every later operation fails with it.
  virtual void Poison(const absl::Status& cause) = 0;
  // Whether CancelNative tears native work down.
  virtual bool SupportsNativeCancel() const = 0;
  // Poisons, fails running operations and aborts every communicator;
  // returns after teardown.
  virtual void CancelNative(const absl::Status& cause) = 0;
  virtual void Quarantine(std::shared_ptr<NcclOp> op) = 0;
  // After CancelNative: how long to wait for aborted work to leave.
  virtual absl::Duration AbortGrace() const = 0;
};

// The owner of operations that belong to no session
// (NcclBackend::SubmitLocalDependencies): no communicator to abort, a
// process-wide quarantine reaped by a background thread.
std::shared_ptr<NcclOpOwner> LocalOpOwner();

class NcclCompletion final : public BoundedCompletion {
 public:
  NcclCompletion(std::shared_ptr<NcclOp> op,
                 std::shared_ptr<NcclOpOwner> owner);
  // Quarantines the operation when its work still runs.
  ~NcclCompletion() override;

  bool IsComplete() const override;
  absl::Status Wait() override;
  bool SupportsCancellation(CancellationMode mode) const override;
  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                          CancellationMode mode) override;

  const std::string& operation() const { return op_->operation(); }
  const std::shared_ptr<NcclOp>& op() const { return op_; }

 private:
  // Done() plus poisoning the owner on a CUDA error.
  bool Poll() const;
  const std::shared_ptr<NcclOp> op_;
  const std::shared_ptr<NcclOpOwner> owner_;
};

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_
