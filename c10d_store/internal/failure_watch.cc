// The store's record of the job failure (c10d_store/internal/failure_watch.h).
#include "c10d_store/internal/failure_watch.h"

namespace rankd::c10d_store::internal {

void FailureWatch::Fail(const absl::Status& failure) {
  if (failure.ok()) return;
  std::set<Endpoint> endpoints;
  {
    absl::MutexLock lock(&mu_);
    // Only the first: every later store call reports the failure again,
    // and the sockets known then are shut down already (a group's made
    // later are, as NoteEndpoints sees them). A later caller returns once
    // the first caller's shutdown finished, so that whoever reports the
    // failure reports it with the connections shut (syscalls only: the
    // bound is never reached in practice).
    if (!failure_.ok()) {
      mu_.AwaitWithTimeout(absl::Condition(&shut_down_), kShutdownBound);
      return;
    }
    failure_ = failure;
    endpoints = endpoints_;
  }
  // Outside the lock: syscalls over every descriptor of the process.
  const int shut = ShutDownSocketsAt(endpoints);
  absl::MutexLock lock(&mu_);
  shut_ += shut;
  shut_down_ = true;
}

absl::Status FailureWatch::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void FailureWatch::NoteEndpoints(const std::vector<Endpoint>& endpoints) {
  if (endpoints.empty()) return;
  bool failed = false;
  {
    absl::MutexLock lock(&mu_);
    endpoints_.insert(endpoints.begin(), endpoints.end());
    failed = !failure_.ok();
  }
  if (failed) shut_ += ShutDownSocketsAt({endpoints.begin(), endpoints.end()});
}

}  // namespace rankd::c10d_store::internal
