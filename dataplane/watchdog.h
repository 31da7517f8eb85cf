// Watchdog: the one thread of a session, on either backend, that holds the
// job's health and every outstanding operation's deadline (docs/dataplane.md,
// "The engine"). It is backend-independent: what it aborts is the
// backend's, behind NativeSession (native_layer.h).
//
// It wakes every `interval`, or at once when the control plane reports the
// job failed (through the callback JobFailureCallback() returns), and then,
// until the session was aborted, in order:
//   1. the job: the notified failure, else NativeSession::JobHealth(); a
//   failure
//      aborts the session with it (it names the lost rank or node);
//   2. native health: NativeSession::NativeHealth() (errors native work reports
//      on its own, e.g. NCCL's asynchronous errors); an error aborts;
//   3. deadlines: the first ledger operation past its deadline (plus
//      Options::native_first). When the native layer ordered it (recorded
//      its sequence number) and it has members, MismatchDiagnosis compares
//      it with what the other members submitted, so the abort's cause is
//      DeadlineExceeded naming the operation and the members that did not
//      report it, or InvalidArgument naming who submitted what; then the
//      session is aborted with it;
//   4. finished operations leave the ledger.
// Abort is the backend's: poison the session, fail what it must (NCCL:
// OperationLedger::FailAll), abort every native context (so no member stays in
// a collective with a dead or diverged peer). The watchdog marks the diagnosis
// locally aborted (MismatchDiagnosis::NoteLocalAbort) before it aborts.
//
// Detach() stops every call into the control plane (steps 1 and 3's
// diagnosis) and returns once the tick under way made its last one, so the
// control plane may go away while the session lives on.
//
// Start and Stop are called by the session's owner, from one thread; the
// rest is thread-safe. Depends on dataplane/mismatch_diagnosis.h,
// native_layer.h, operation_ledger.h and absl.
#ifndef RANKD_DATAPLANE_WATCHDOG_H_
#define RANKD_DATAPLANE_WATCHDOG_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/mismatch_diagnosis.h"
#include "dataplane/native_layer.h"
#include "dataplane/operation_ledger.h"

namespace rankd::dataplane {

class Watchdog {
 public:
  struct Options {
    // "nccl" or "gloo": starts every message ("nccl backend: ...").
    std::string backend;
    // How often it looks without a notification.
    absl::Duration interval = absl::Milliseconds(50);
    // The per-operation deadline the ledger's deadlines come from, named in
    // the DeadlineExceeded message.
    absl::Duration op_timeout;
    // What Abort does, for that message ("every communicator of this
    // session was aborted").
    std::string abort_effect;
    // How long past its deadline an operation is left to the native layer
    // before step 3 acts: Gloo's calls time out on their own and then name
    // who is missing (the watchdog is their backstop); NCCL's never do.
    absl::Duration native_first = absl::ZeroDuration();
  };

  // `ledger`, `diagnosis` and `session` must outlive the watchdog. Nothing
  // runs until Start().
  Watchdog(Options options, OperationLedger* ledger,
           const MismatchDiagnosis* diagnosis, NativeSession* session);
  // Stops and joins the thread.
  ~Watchdog();

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts the thread; once.
  void Start();
  // Stops the thread and returns once it left; idempotent. Must not be
  // called from NativeSession::Abort.
  void Stop();
  // See the header comment; idempotent.
  void Detach();

  // What to register with ControlPlane::OnJobFailure: it latches the first
  // failure and wakes the thread. It holds no reference to the watchdog or
  // the session, so it may outlive both (it is then a no-op).
  std::function<void(const absl::Status&)> JobFailureCallback() const;
  // What that callback serves (ControlPlane::OnJobFailureWhileAlive): gone
  // with the watchdog, after which the callback does nothing.
  std::weak_ptr<const void> JobFailureOwner() const { return signal_; }
  // The failure the control plane notified, or OK.
  absl::Status notified_failure() const;

  // One tick's steps 3 and 4 at `now`, on the calling thread (tests, and
  // what the thread runs).
  void EnforceDeadlines(absl::Time now);

 private:
  struct Signal {
    mutable absl::Mutex mu;
    absl::Status cause ABSL_GUARDED_BY(mu);
    bool handled ABSL_GUARDED_BY(mu) = false;
    bool stop ABSL_GUARDED_BY(mu) = false;
  };
  void Loop();

  const Options options_;
  OperationLedger* const ledger_;
  const MismatchDiagnosis* const diagnosis_;
  NativeSession* const session_;
  const std::shared_ptr<Signal> signal_;
  std::atomic<bool> detached_{false};
  // Held while a tick calls into the control plane; Detach waits for it.
  absl::Mutex control_plane_mu_;
  std::thread thread_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_WATCHDOG_H_
