#include "dataplane/watchdog.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"

namespace rankd::dataplane {

Watchdog::Watchdog(Options options, OperationLedger* ledger,
                   const MismatchDiagnosis* diagnosis, NativeSession* session)
    : options_(std::move(options)),
      ledger_(ledger),
      diagnosis_(diagnosis),
      session_(session),
      signal_(std::make_shared<Signal>()) {}

Watchdog::~Watchdog() { Stop(); }

void Watchdog::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void Watchdog::Stop() {
  {
    absl::MutexLock lock(&signal_->mu);
    signal_->stop = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Detach() {
  detached_.store(true);
  absl::MutexLock lock(&control_plane_mu_);  // the tick under way
}

std::function<void(const absl::Status&)> Watchdog::JobFailureCallback() const {
  std::weak_ptr<Signal> weak = signal_;
  return [weak](const absl::Status& cause) {
    std::shared_ptr<Signal> signal = weak.lock();
    if (signal == nullptr) return;
    absl::MutexLock lock(&signal->mu);
    if (signal->cause.ok()) {
      signal->cause =
          cause.ok() ? absl::AbortedError("rankd: the job failed") : cause;
    }
  };
}

absl::Status Watchdog::notified_failure() const {
  absl::MutexLock lock(&signal_->mu);
  return signal_->cause;
}

void Watchdog::EnforceDeadlines(absl::Time now) {
  if (!session_->aborted()) {
    std::optional<OperationLedger::Expired> expired =
        ledger_->FirstExpired(now - options_.native_first);
    if (expired.has_value()) {
      const absl::Status error = absl::DeadlineExceededError(absl::StrCat(
          options_.backend, " backend: ", expired->op->operation(),
          " did not complete within ",
          absl::FormatDuration(options_.op_timeout), " (op_timeout); ",
          options_.abort_effect, " and the session is poisoned"));
      Explanation why{error};
      // Reports meet under the sequence number the native layer ordered
      // the work by; work it never ordered has nothing to compare.
      if (!expired->what.members.empty() && expired->ordered) {
        absl::MutexLock lock(&control_plane_mu_);
        if (!detached_.load()) why = diagnosis_->Explain(expired->what, error);
      }
      diagnosis_->NoteLocalAbort();
      session_->Abort(why.status);
    }
  }
  // Finished work needs no deadline (its completion may live on).
  ledger_->Prune();
}

void Watchdog::Loop() {
  while (true) {
    absl::Status cause;
    {
      Signal& signal = *signal_;
      absl::MutexLock lock(&signal.mu);
      signal.mu.AwaitWithTimeout(
          absl::Condition(
              +[](Signal* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
                return s->stop || (!s->cause.ok() && !s->handled);
              },
              &signal),
          options_.interval);
      if (signal.stop) return;
      if (!signal.cause.ok() && !signal.handled) {
        signal.handled = true;
        cause = signal.cause;
      }
    }
    if (!session_->aborted()) {
      if (cause.ok() && !detached_.load()) {
        absl::MutexLock lock(&control_plane_mu_);
        if (!detached_.load()) cause = session_->JobHealth();
      }
      if (cause.ok()) cause = session_->NativeHealth();
      if (!cause.ok()) {
        diagnosis_->NoteLocalAbort();
        session_->Abort(cause);
      }
    }
    // Also once poisoned but not aborted (quarantined work, a refused
    // agreement): work that never finishes is still ended by its deadline.
    EnforceDeadlines(MonotonicNow());
  }
}

}  // namespace rankd::dataplane
