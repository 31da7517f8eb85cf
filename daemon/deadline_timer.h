// DeadlineTimer: runs callbacks at absolute times on one background thread.
//
// Every blocking wait in the daemon (round deadlines, key-value gets, join
// waits, heartbeat checks) is bounded by a callback scheduled here. Depends
// only on absl.
#ifndef RANKD_DAEMON_DEADLINE_TIMER_H_
#define RANKD_DAEMON_DEADLINE_TIMER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rankd {

class DeadlineTimer {
 public:
  using TimerId = uint64_t;

  // Starts the timer thread.
  DeadlineTimer();
  // Stops the thread; callbacks not yet run are dropped without running.
  ~DeadlineTimer();

  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `callback` on the timer thread at or soon after `when` (at once if
  // `when` is past). Callbacks must not block; they may call Schedule and
  // Cancel. Returns an id for Cancel (never 0).
  TimerId Schedule(absl::Time when, std::function<void()> callback);

  // Prevents a scheduled callback from running. Returns false when it has
  // already run, is running, or was never scheduled. Cancel(0) is a no-op.
  bool Cancel(TimerId id);

 private:
  void Run();

  absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on Schedule and stop
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Ordered by time, then id, so equal times run in scheduling order.
  std::map<std::pair<absl::Time, TimerId>, std::function<void()>> queue_
      ABSL_GUARDED_BY(mu_);
  std::map<TimerId, absl::Time> when_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_DEADLINE_TIMER_H_
