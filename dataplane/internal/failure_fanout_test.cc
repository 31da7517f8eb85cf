// FailureFanout: every registration runs once with its epoch's failure; a
// registration whose owner is gone is dropped and never runs, so sessions
// opened and closed in one healthy epoch leave nothing behind.
#include "dataplane/internal/failure_fanout.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::internal {
namespace {

TEST(FailureFanoutTest, EveryRegistrationRunsOnceWithTheFailure) {
  FailureFanout fanout(1);
  int plain = 0, owned = 0;
  auto owner = std::make_shared<int>(0);
  fanout.Register([&](const absl::Status& s) {
    EXPECT_EQ(s.message(), "rank 3 lost");
    ++plain;
  });
  fanout.RegisterOwned([&](const absl::Status&) { ++owned; }, owner);
  fanout.Fire(absl::AbortedError("rank 3 lost"));
  fanout.Fire(absl::AbortedError("again"));  // the epoch failed already
  EXPECT_EQ(plain, 1);
  EXPECT_EQ(owned, 1);
  // After the failure: at once.
  fanout.Register([&](const absl::Status&) { ++plain; });
  EXPECT_EQ(plain, 2);
  EXPECT_EQ(fanout.registrations(), 0u);
}

// Before: 10,000 sessions opened and closed in one healthy epoch left
// 10,000 registrations (and what each captured) behind.
TEST(FailureFanoutTest, RegistrationsOfOwnersGoneAreDropped) {
  FailureFanout fanout(1);
  auto live = std::make_shared<int>(0);
  int live_ran = 0, gone_ran = 0;
  fanout.RegisterOwned([&](const absl::Status&) { ++live_ran; }, live);
  for (int i = 0; i < 10000; ++i) {
    auto session = std::make_shared<int>(i);
    fanout.RegisterOwned([&](const absl::Status&) { ++gone_ran; }, session);
  }
  EXPECT_LE(fanout.registrations(), 64u);
  fanout.Fire(absl::AbortedError("lost"));
  EXPECT_EQ(live_ran, 1);
  EXPECT_EQ(gone_ran, 0);
}

TEST(FailureFanoutTest, ALaterEpochStartsAfresh) {
  FailureFanout fanout(1);
  int ran = 0;
  fanout.Register([&](const absl::Status&) { ++ran; });
  fanout.Fire(absl::AbortedError("epoch 1 ended"));
  EXPECT_FALSE(fanout.StartEpoch(1));
  EXPECT_TRUE(fanout.StartEpoch(2));
  EXPECT_EQ(fanout.epoch(), 2u);
  fanout.Register([&](const absl::Status& s) {
    EXPECT_EQ(s.message(), "epoch 2 ended");
    ++ran;
  });
  EXPECT_EQ(ran, 1);
  fanout.Fire(absl::AbortedError("epoch 2 ended"));
  EXPECT_EQ(ran, 2);
}

TEST(FailureFanoutTest, NothingRunsAfterClose) {
  FailureFanout fanout(1);
  int ran = 0;
  fanout.Register([&](const absl::Status&) { ++ran; });
  fanout.Close();
  fanout.Fire(absl::AbortedError("lost"));
  fanout.Register([&](const absl::Status&) { ++ran; });
  EXPECT_EQ(ran, 0);
}

}  // namespace
}  // namespace rankd::dataplane::internal
