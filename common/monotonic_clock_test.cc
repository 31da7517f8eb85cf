// Unit tests of MonotonicNow and ToSteadyTime. That a step of the wall clock
// leaves a job alone is tested end to end in tests/wall_clock_step_test.cc.
#include "common/monotonic_clock.h"

#include <chrono>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

TEST(MonotonicClockTest, StartsNearTheWallClock) {
  EXPECT_LT(absl::AbsDuration(MonotonicNow() - absl::Now()), absl::Seconds(1));
}

TEST(MonotonicClockTest, NeverGoesBackAcrossThreads) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      absl::Time last = MonotonicNow();
      for (int i = 0; i < 100000; ++i) {
        absl::Time now = MonotonicNow();
        ASSERT_GE(now, last);
        last = now;
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(MonotonicClockTest, AdvancesWithTheSteadyClock) {
  const absl::Time before = MonotonicNow();
  const auto steady_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const absl::Duration elapsed = MonotonicNow() - before;
  const absl::Duration steady_elapsed =
      absl::FromChrono(std::chrono::steady_clock::now() - steady_before);
  EXPECT_GE(elapsed, absl::Milliseconds(20));
  EXPECT_LE(elapsed, steady_elapsed);
}

TEST(MonotonicClockTest, ToSteadyTimeNamesTheSameInstant) {
  const absl::Time due = MonotonicNow() + absl::Milliseconds(250);
  const auto steady_due = ToSteadyTime(due);
  const auto expected =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  EXPECT_LT(std::chrono::abs(steady_due - expected),
            std::chrono::milliseconds(50));
  EXPECT_EQ(ToSteadyTime(absl::InfiniteFuture()),
            std::chrono::steady_clock::time_point::max());
}

}  // namespace
}  // namespace rankd
