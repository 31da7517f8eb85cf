#include "daemon/deadline_timer.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/monotonic_clock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

// Generous bound for "this should happen"; never used to assert speed.
constexpr absl::Duration kPatience = absl::Seconds(20);

// Records the order in which callbacks ran.
class Recorder {
 public:
  void Add(int v) {
    absl::MutexLock lock(&mu_);
    order_.push_back(v);
  }
  std::vector<int> order() const {
    absl::MutexLock lock(&mu_);
    return order_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int> order_;
};

// Occupies the timer thread until Release() so that callbacks can be queued
// deterministically behind it.
// The state is shared with the callback, which may still be returning from
// its wait when the Blocker goes away.
class Blocker {
 public:
  explicit Blocker(DeadlineTimer* timer) : state_(std::make_shared<State>()) {
    timer->Schedule(absl::InfinitePast(), [state = state_] {
      state->running.Notify();
      state->release.WaitForNotification();
    });
    EXPECT_TRUE(state_->running.WaitForNotificationWithTimeout(kPatience));
  }
  ~Blocker() { Release(); }
  void Release() {
    if (!state_->release.HasBeenNotified()) state_->release.Notify();
  }

 private:
  struct State {
    absl::Notification running;
    absl::Notification release;
  };
  std::shared_ptr<State> state_;
};

TEST(DeadlineTimerTest, RunsCallbackNotBeforeItsTime) {
  absl::Notification ran;
  absl::Time ran_at;
  DeadlineTimer timer;
  const absl::Time when = MonotonicNow() + absl::Milliseconds(30);
  timer.Schedule(when, [&] {
    ran_at = MonotonicNow();
    ran.Notify();
  });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(kPatience));
  EXPECT_GE(ran_at, when);
}

TEST(DeadlineTimerTest, PastTimeRunsAtOnce) {
  absl::Notification ran;
  DeadlineTimer timer;
  timer.Schedule(MonotonicNow() - absl::Hours(1), [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(kPatience));
}

TEST(DeadlineTimerTest, IdsAreNonZeroAndDistinct) {
  DeadlineTimer timer;
  const absl::Time far = MonotonicNow() + absl::Hours(1);
  DeadlineTimer::TimerId a = timer.Schedule(far, [] {});
  DeadlineTimer::TimerId b = timer.Schedule(far, [] {});
  DeadlineTimer::TimerId c = timer.Schedule(far, [] {});
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(c, 0u);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
}

TEST(DeadlineTimerTest, RunsInTimeOrderNotSchedulingOrder) {
  Recorder recorder;
  absl::Notification last;
  DeadlineTimer timer;
  Blocker blocker(&timer);
  const absl::Time base = MonotonicNow() - absl::Minutes(1);
  // All in the past, so they are due together once the blocker returns.
  timer.Schedule(base + absl::Seconds(3), [&] {
    recorder.Add(3);
    last.Notify();
  });
  timer.Schedule(base + absl::Seconds(1), [&] { recorder.Add(1); });
  timer.Schedule(base + absl::Seconds(2), [&] { recorder.Add(2); });
  blocker.Release();
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(recorder.order(), (std::vector<int>{1, 2, 3}));
}

TEST(DeadlineTimerTest, EqualTimesRunInSchedulingOrder) {
  Recorder recorder;
  absl::Notification last;
  DeadlineTimer timer;
  Blocker blocker(&timer);
  const absl::Time when = MonotonicNow() - absl::Seconds(1);
  for (int i = 0; i < 5; ++i) {
    timer.Schedule(when, [&, i] {
      recorder.Add(i);
      if (i == 4) last.Notify();
    });
  }
  blocker.Release();
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(recorder.order(), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(DeadlineTimerTest, EarlierTimerScheduledLaterWakesTheThread) {
  std::atomic<bool> late_ran{false};
  absl::Notification early;
  DeadlineTimer timer;
  timer.Schedule(MonotonicNow() + absl::Hours(1), [&] { late_ran = true; });
  timer.Schedule(MonotonicNow() + absl::Milliseconds(10),
                 [&] { early.Notify(); });
  // Would take an hour if the thread kept sleeping towards the first timer.
  EXPECT_TRUE(early.WaitForNotificationWithTimeout(kPatience));
  EXPECT_FALSE(late_ran);
}

TEST(DeadlineTimerTest, CancelPreventsTheCallback) {
  std::atomic<bool> cancelled_ran{false};
  absl::Notification sentinel;
  DeadlineTimer timer;
  Blocker blocker(&timer);
  const absl::Time past = MonotonicNow() - absl::Seconds(2);
  DeadlineTimer::TimerId id =
      timer.Schedule(past, [&] { cancelled_ran = true; });
  // Due after the cancelled one, so it proves the queue got past it.
  timer.Schedule(past + absl::Seconds(1), [&] { sentinel.Notify(); });
  EXPECT_TRUE(timer.Cancel(id));
  blocker.Release();
  ASSERT_TRUE(sentinel.WaitForNotificationWithTimeout(kPatience));
  EXPECT_FALSE(cancelled_ran);
}

TEST(DeadlineTimerTest, CancelTwiceReturnsFalseTheSecondTime) {
  DeadlineTimer timer;
  DeadlineTimer::TimerId id =
      timer.Schedule(MonotonicNow() + absl::Hours(1), [] {});
  EXPECT_TRUE(timer.Cancel(id));
  EXPECT_FALSE(timer.Cancel(id));
}

TEST(DeadlineTimerTest, CancelZeroAndUnknownIdsAreNoOps) {
  absl::Notification ran;
  DeadlineTimer timer;
  EXPECT_FALSE(timer.Cancel(0));
  EXPECT_FALSE(timer.Cancel(12345));
  // The timer still works.
  timer.Schedule(MonotonicNow(), [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(kPatience));
}

TEST(DeadlineTimerTest, CancelAfterRunReturnsFalse) {
  absl::Notification ran;
  DeadlineTimer timer;
  DeadlineTimer::TimerId id =
      timer.Schedule(MonotonicNow(), [&] { ran.Notify(); });
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(kPatience));
  EXPECT_FALSE(timer.Cancel(id));
}

TEST(DeadlineTimerTest, CancelWhileRunningReturnsFalse) {
  auto running = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  DeadlineTimer timer;
  DeadlineTimer::TimerId id =
      timer.Schedule(MonotonicNow(), [running, release] {
        running->Notify();
        release->WaitForNotification();
      });
  ASSERT_TRUE(running->WaitForNotificationWithTimeout(kPatience));
  EXPECT_FALSE(timer.Cancel(id));
  release->Notify();
}

TEST(DeadlineTimerTest, CallbacksMayScheduleAndCancel) {
  std::atomic<bool> cancelled_ran{false};
  std::atomic<bool> cancel_result{false};
  absl::Notification chained;
  DeadlineTimer timer;
  DeadlineTimer::TimerId victim = timer.Schedule(
      MonotonicNow() + absl::Hours(1), [&] { cancelled_ran = true; });
  timer.Schedule(MonotonicNow(), [&] {
    cancel_result = timer.Cancel(victim);
    timer.Schedule(MonotonicNow(), [&] { chained.Notify(); });
  });
  ASSERT_TRUE(chained.WaitForNotificationWithTimeout(kPatience));
  EXPECT_TRUE(cancel_result);
  EXPECT_FALSE(cancelled_ran);
}

TEST(DeadlineTimerTest, DestructorDropsPendingCallbacks) {
  auto ran = std::make_shared<std::atomic<bool>>(false);
  {
    DeadlineTimer timer;
    timer.Schedule(MonotonicNow() + absl::Hours(1), [ran] { *ran = true; });
  }
  EXPECT_FALSE(*ran);
}

TEST(DeadlineTimerTest, ManyCallbacksAllRunOnce) {
  constexpr int kCount = 200;
  std::vector<std::atomic<int>> runs(kCount);
  std::atomic<int> total{0};
  absl::Notification all;
  DeadlineTimer timer;
  const absl::Time base = MonotonicNow();
  for (int i = 0; i < kCount; ++i) {
    timer.Schedule(base + absl::Microseconds((i * 37) % 5000), [&, i] {
      runs[i]++;
      if (++total == kCount) all.Notify();
    });
  }
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(kPatience));
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

}  // namespace
}  // namespace rankd
