// Completions of the data-plane contract (docs/contract.md, Types): Completion
// (exact, non-blocking IsComplete and a blocking Wait on this work only),
// BoundedCompletion (WaitBounded with a deadline and a cancellation mode),
// and Submission, which pairs an output with the completion that makes it
// authoritative. A completion retains every tensor, buffer, stream, group and
// route its work uses until that work has finished; an error never drops
// live resources. Depends on absl only.
#ifndef RANKD_DATAPLANE_COMPLETION_H_
#define RANKD_DATAPLANE_COMPLETION_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rankd::dataplane {

// What happens to work that misses a bounded wait's deadline.
enum class CancellationMode {
  // Native cancellation and teardown have finished when WaitBounded returns
  // (for NCCL: ncclCommAbort). The communicator is unusable afterwards.
  kNativeCancel,
  // The work keeps running; ownership of the completion and every resource
  // it retains moves to a quarantine that frees them only after exact
  // completion, and the communicator refuses new work meanwhile.
  kQuarantineUntilComplete,
};

const char* CancellationModeName(CancellationMode mode);

// The outcome of WaitBounded: Completed, or DeadlineExceeded{mode} after the
// mode was applied.
class WaitOutcome {
 public:
  static WaitOutcome Completed() { return WaitOutcome(true, {}); }
  static WaitOutcome DeadlineExceeded(CancellationMode mode) {
    return WaitOutcome(false, mode);
  }
  bool completed() const { return completed_; }
  // The mode applied; meaningful only when !completed().
  CancellationMode mode() const { return mode_; }

 private:
  WaitOutcome(bool completed, CancellationMode mode)
      : completed_(completed), mode_(mode) {}
  bool completed_;
  CancellationMode mode_;
};

// Exact completion of submitted work. Thread-safe.
class Completion {
 public:
  virtual ~Completion() = default;

  // True once the work and all its effects are done (never blocks, never
  // early). A failed operation is complete too; Wait returns its error.
  virtual bool IsComplete() const = 0;

  // Blocks until this completion (and no other work) completes. Returns the
  // operation's status: OK, or the error that failed it (for a poisoned
  // session, the original cause).
  virtual absl::Status Wait() = 0;
};

// A completion whose wait can be bounded.
class BoundedCompletion : public Completion {
 public:
  // Whether WaitBounded may be called with `mode`: lets a scheduler refuse
  // a policy before it submits anything.
  virtual bool SupportsCancellation(CancellationMode mode) const = 0;

  // Waits at most `timeout`. Returns Completed when the work finished OK;
  // the work's error when it failed; DeadlineExceeded{mode} once `mode` has
  // been applied after the deadline (the session is then poisoned).
  // InvalidArgument for a zero or negative timeout and FailedPrecondition
  // for an unsupported mode, both before waiting at all.
  virtual absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                                  CancellationMode mode) = 0;
};

// Checks WaitBounded's arguments; shared by every implementation.
absl::Status CheckBoundedWait(const BoundedCompletion& completion,
                              absl::Duration timeout, CancellationMode mode,
                              const char* backend);

// An output and the completion after which it is authoritative.
template <typename T, typename C>
struct Submission {
  T output;
  C completion;
};

// The output of work that produces nothing (barriers, local dependencies).
struct Unit {};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_COMPLETION_H_
