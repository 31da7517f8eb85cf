// FailureWatch: the job failure a rankd c10d store has seen, and the Gloo
// endpoints whose connections it shuts down then (c10d_store/store.h).
// Shared between a store and the client's failure callback, which may
// outlive it. Depends on c10d_store/internal/gloo_sockets.h and abseil.
#ifndef RANKD_C10D_STORE_INTERNAL_FAILURE_WATCH_H_
#define RANKD_C10D_STORE_INTERNAL_FAILURE_WATCH_H_

#include <atomic>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "c10d_store/internal/gloo_sockets.h"

namespace rankd::c10d_store::internal {

class FailureWatch {
 public:
  // Records `failure` (non-OK; an OK status is ignored) when it is the
  // first, and then shuts down this process's sockets at every endpoint
  // noted so far. A later failure changes nothing, but its call returns
  // only once the first one's shutdown finished (at most kShutdownBound):
  // a caller that then reports the failure reports it with the
  // connections shut, and sockets_shut_down() counts them. Thread-safe;
  // never blocks on anything but syscalls.
  void Fail(const absl::Status& failure);

  // How long a later Fail waits for the first one's shutdown.
  static constexpr absl::Duration kShutdownBound = absl::Seconds(10);

  // The first failure recorded; OK while none was.
  absl::Status failure() const;

  // Notes the endpoints of a Gloo address value; once failed, shuts down
  // the sockets at them at once (a group made after the failure).
  void NoteEndpoints(const std::vector<Endpoint>& endpoints);

  // Sockets shut down so far.
  int sockets_shut_down() const { return shut_.load(); }

 private:
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::set<Endpoint> endpoints_ ABSL_GUARDED_BY(mu_);
  // The first Fail's shutdown finished.
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> shut_{0};
};

}  // namespace rankd::c10d_store::internal

#endif  // RANKD_C10D_STORE_INTERNAL_FAILURE_WATCH_H_
