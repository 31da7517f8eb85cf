// Unit tests of ReformGate (capi/internal/reform_gate.h): calls are
// admitted unless a re-form holds the gate, never refused spuriously under
// contention, and a re-form has the session only once every admitted call
// left.
#include "capi/internal/reform_gate.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace rankd::capi::internal {
namespace {

TEST(ReformGateTest, ClosedRefusesCallsAndASecondReformUntilReopened) {
  ReformGate gate;
  ASSERT_TRUE(gate.Enter());
  gate.Leave();
  ASSERT_TRUE(gate.Close());
  EXPECT_FALSE(gate.Enter());
  EXPECT_FALSE(gate.Close());
  gate.Reopen();
  EXPECT_TRUE(gate.Enter());
  gate.Leave();
}

TEST(ReformGateTest, CloseWaitsForTheCallsAdmittedBeforeIt) {
  ReformGate gate;
  ASSERT_TRUE(gate.Enter());
  std::atomic<bool> left{false};
  std::thread call([&] {
    absl::SleepFor(absl::Milliseconds(200));
    left = true;
    gate.Leave();
  });
  ASSERT_TRUE(gate.Close());
  EXPECT_TRUE(left) << "the re-form took the session while a call ran";
  call.join();
  gate.Reopen();
}

TEST(ReformGateTest, ContendedCallsAreNeverRefusedWhileOpen) {
  ReformGate gate;
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (!gate.Enter()) {
          ++refused;
          continue;
        }
        gate.Leave();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(refused.load(), 0);
}

TEST(ReformGateTest, NoCallRunsWhileAReformHoldsTheGate) {
  ReformGate gate;
  std::atomic<bool> stop{false};
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  std::atomic<bool> reforming{false};
  std::vector<std::thread> calls;
  for (int t = 0; t < 4; ++t) {
    calls.emplace_back([&] {
      while (!stop) {
        if (!gate.Enter()) continue;
        ++inside;
        if (reforming) overlapped = true;
        --inside;
        gate.Leave();
      }
    });
  }
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(gate.Close());
    reforming = true;
    if (inside.load() != 0) overlapped = true;
    absl::SleepFor(absl::Microseconds(50));
    reforming = false;
    gate.Reopen();
  }
  stop = true;
  for (auto& t : calls) t.join();
  EXPECT_FALSE(overlapped);
}

}  // namespace
}  // namespace rankd::capi::internal
