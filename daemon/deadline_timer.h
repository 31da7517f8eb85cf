// DeadlineTimer: runs callbacks at absolute times on one background thread.
//
// Every blocking wait in the daemon (round deadlines, key-value gets, join
// waits, heartbeat checks) is bounded by a callback scheduled here. Times are
// on MonotonicNow's clock (common/monotonic_clock.h) and the thread sleeps on
// the kernel's monotonic clock, so setting the wall clock neither fires a
// callback early nor holds one back. Depends on absl and common/.
#ifndef RANKD_DAEMON_DEADLINE_TIMER_H_
#define RANKD_DAEMON_DEADLINE_TIMER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

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

  // Runs `callback` on the timer thread at or soon after `when`, a time on
  // MonotonicNow's clock (at once if `when` is past). Callbacks must not block;
  // they may call Schedule and Cancel. Returns an id for Cancel (never 0).
  TimerId Schedule(absl::Time when, std::function<void()> callback);

  // Prevents a scheduled callback from running. Returns false when it has
  // already run, is running, or was never scheduled. Cancel(0) is a no-op.
  bool Cancel(TimerId id);

 private:
  void Run();

  // A std::mutex, not an absl::Mutex: this abseil's timed waits sleep until
  // a wall-clock instant, std::condition_variable's until a steady one.
  std::mutex mu_;
  std::condition_variable changed_;  // notified on Schedule and stop
  // All guarded by mu_.
  bool stopping_ = false;
  TimerId next_id_ = 1;
  // Ordered by time, then id, so equal times run in scheduling order.
  std::map<std::pair<absl::Time, TimerId>, std::function<void()>> queue_;
  std::map<TimerId, absl::Time> when_;
  std::thread thread_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_DEADLINE_TIMER_H_
