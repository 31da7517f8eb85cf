// HostExecutor: the in-order executor of a host backend, whose native calls
// block (Gloo's): the host's counterpart of a CUDA stream, and the Executor
// of the CommunicationBackend contract (GlooExecutor is this class). One
// thread runs submitted operations one at a time, in submission order (a
// waiter or the submitter of local work may run the next one instead:
// RunIfNext, Submit's `local`, never out of order or two at once); each
// operation's OperationCompletion is finished (exactly, after its last
// native call) when it returns. Before running queued work the executor
// asks its ExecutionHost (execution_host.h) whether the session was
// poisoned meanwhile, and finishes such work with the cause without running
// it (no native submission); a native failure goes through the host, which
// poisons the session.
//
// Held work. Waking the executor thread for an operation that its caller
// then runs itself (RunIfNext) costs a futex call and two context switches
// per operation -- tens of microseconds on a VM, more than a small
// collective -- for nothing. So once a caller ran its previous operation
// itself at once (kPromptWait), the next submission does not wake the
// thread: the operation is held for that caller. The thread, which looks
// at held work on a timer instead (and sleeps while a caller runs a long
// operation, or when no work came for kHeldStartBound), starts held work
// that nobody took once it is kHeldStartBound old: work still progresses
// when nobody waits, that much later. Anything else that needs the work
// under way starts it at once: a poll, a bounded wait or a dropped
// completion (StartHeld, through the host), a waiter whose operation is
// not next, an abort, shutdown. Order, outcomes and deadlines are the same
// either way; a caller that does not wait at once for an operation gets
// the next one started by the thread without delay again.
//
// A backend owns one or more of them (lanes 0, 1, ...: Gloo's
// GlooSessionOptions::executors), each with its own native contexts, so
// work on different executors overlaps; a backend refuses an executor of
// another. Thread-safe. Depends on operation.h and absl; its host is only
// declared here.
#ifndef RANKD_DATAPLANE_HOST_EXECUTOR_H_
#define RANKD_DATAPLANE_HOST_EXECUTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
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
#include "dataplane/operation.h"

namespace rankd::dataplane {

class ExecutionHost;  // execution_host.h

// What an operation's body reports.
struct TaskResult {
  absl::Status status;
  // True when `status` is a native (transport) failure, which poisons the
  // session. False for failures every member detects identically before
  // moving data (e.g. a cross-rank shape disagreement), which leave the
  // members in step and the session usable.
  bool native_failure = false;
  // A native failure whose cause is already established (the members
  // disagreed, as MismatchDiagnosis proved): no lost peer to wait for.
  bool explained = false;

  static TaskResult Ok() { return {}; }
  static TaskResult Native(absl::Status s) { return {std::move(s), true}; }
  static TaskResult Explained(absl::Status s) {
    return {std::move(s), true, true};
  }
  static TaskResult Agreed(absl::Status s) { return {std::move(s), false}; }
};

class HostExecutor {
 public:
  // An operation's body. It is given the operation's name (Submit's
  // `operation`, the subject of its messages; the reference is valid while
  // the body runs), which the operation keeps: a body needs no copy of its
  // own.
  using Task = std::function<TaskResult(const std::string& operation)>;

  // Executor number `lane` of its backend (0 is the default one); its
  // operations use the native contexts of that lane. `backend` ("gloo", a
  // string literal) starts the executor's own messages.
  explicit HostExecutor(const char* backend, uint32_t lane = 0);
  uint32_t lane() const { return lane_; }
  // Shuts down (finishing queued work with Cancelled) if not done yet.
  ~HostExecutor();

  HostExecutor(const HostExecutor&) = delete;
  HostExecutor& operator=(const HostExecutor&) = delete;

  // Sets the host; once, before the first Submit.
  void Bind(std::weak_ptr<ExecutionHost> host);

  // Queues `task` behind all earlier work and returns its completion, which
  // retains `resources` until the task finished. A failure every member
  // detects alike (TaskResult::Agreed) is the operation's refusal
  // (Operation::Refuse): it leaves the session usable. `kind`
  // ("all_reduce_sum") is checked with the host's Admission first (poison,
  // fence): its error is returned and nothing is queued. FailedPrecondition
  // after Shutdown. Non-local work may be held for its caller (see "Held
  // work" above).
  //
  // `local`: the task is short work of this process alone that never waits
  // for a peer (a one-member group's sum, at most a small copy). When
  // nothing is queued or running, it runs at once on the calling thread --
  // in the same order, with the same checks and outcome -- and Submit
  // returns its finished completion: handing it to the executor thread would
  // cost two thread hand-offs (the wake, then the waiter's), tens of
  // microseconds on a VM, for work of a few hundred nanoseconds. Work that
  // moves data between members must never be local: it would block the
  // submitter, and members that submit in another order would deadlock.
  absl::StatusOr<std::shared_ptr<OperationCompletion>> Submit(
      const char* kind, std::string operation,
      std::vector<std::shared_ptr<const void>> resources, Task task,
      bool local = false);

  // Runs `op` now on the calling thread when it is the next queued item and
  // nothing runs (the executor thread then finds it gone); returns whether
  // it did. For a caller about to block until `op` finished
  // (OperationOwner::RunIfNext): the work then runs exactly as a direct
  // native call would, in the same order, without the two thread hand-offs
  // (the executor thread's wake, the waiter's) that cost more than a small
  // collective on a VM. When it may not run `op`, it starts held work (the
  // executor thread then runs what is ahead).
  bool RunIfNext(const std::shared_ptr<Operation>& op);

  // Hands every held operation to the executor thread now (see "Held work"
  // above): for a caller that needs work under way without running it.
  void StartHeld();

  // Queued operations held for their callers (see above); for tests.
  size_t held() const;

  // Stops accepting work; queued work is finished with `cause` without
  // running; waits for the running task (the owner aborts it natively
  // first if it must not wait) and joins the thread. Idempotent. Must not be
  // called from the executor thread.
  void Shutdown(const absl::Status& cause);

  // True when nothing is queued or running.
  bool idle() const;

  // Waits until idle or `timeout` passes; returns whether idle.
  bool WaitIdle(absl::Duration timeout) const;

  // A caller that ran its operation itself (RunIfNext) before the executor
  // thread took it -- and, when it was held, within this long of submitting
  // it -- waits at once: its next submission is held for it. (A woken
  // executor thread often delays its caller longer than this; that caller
  // still won the race.)
  static constexpr absl::Duration kPromptWait = absl::Microseconds(100);
  // Held work that nobody took is started by the executor thread once it is
  // this old.
  static constexpr absl::Duration kHeldStartBound = absl::Milliseconds(10);

 private:
  struct Item {
    std::shared_ptr<Operation> op;
    Task task;
    // When it was queued (steady clock).
    std::chrono::steady_clock::time_point queued;
    // Left to its caller: the executor thread does not take it yet.
    bool held = false;
    // Held when submitted (`held` may have been cleared since).
    bool submitted_held = false;
  };
  void Loop();
  // Whether the executor thread may take the front item now.
  bool FrontReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Un-holds every held item queued at least `age` ago.
  void ReleaseHeld(std::chrono::steady_clock::duration age)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes the executor thread when what it waits for now holds, and
  // WaitIdle's waiters when the executor is idle. Called after every change
  // of queue_, running_, stopping_ or a held flag. (Condition variables,
  // not absl::Condition waits: with a condition waiter on mu_, every unlock
  // -- four per operation -- evaluates it, about a microsecond per
  // operation on the benchmark machine.)
  void NotifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs (or, with `shutdown` an error or the host gone, refuses) one item
  // and finishes its operation; `running_` is set for it. Never throws: an
  // exception outside the task (which RunTask guards) finishes the item
  // with an internal error, so that running_ is always cleared after.
  static void RunItem(const char* backend, Item& item,
                      const absl::Status& shutdown,
                      const std::shared_ptr<ExecutionHost>& host);

  const char* const backend_;
  const uint32_t lane_;
  mutable absl::Mutex mu_;
  // What the executor thread waits for, if it waits (Loop).
  enum class Awaiting { kNothing, kWork, kEnd, kReady };
  Awaiting awaiting_ ABSL_GUARDED_BY(mu_) = Awaiting::kNothing;
  absl::CondVar thread_cv_;
  mutable absl::CondVar idle_cv_;
  std::weak_ptr<ExecutionHost> host_ ABSL_GUARDED_BY(mu_);
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  // An item is running, on the executor thread or (local work) on its
  // submitter's; the executor thread starts the next one only after.
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status shutdown_cause_ ABSL_GUARDED_BY(mu_);
  // The caller of the last operation waited for it at once (kPromptWait):
  // the next one is held for its caller.
  bool prompt_waiter_ ABSL_GUARDED_BY(mu_) = false;
  // When a caller's RunIfNext started the item that runs now.
  std::chrono::steady_clock::time_point waiter_started_ ABSL_GUARDED_BY(mu_);
  // Submissions so far, for the executor thread to tell a burst of work
  // from a pause.
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  // Items RunIfNext took, for the executor thread to poll without the lock.
  std::atomic<uint64_t> taken_by_waiters_{0};
  std::thread thread_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_HOST_EXECUTOR_H_
