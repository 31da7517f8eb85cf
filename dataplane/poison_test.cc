// Unit tests of PoisonLatch: first cause wins, refusals carry it.
#include "dataplane/poison.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(PoisonLatchTest, HealthyUntilPoisoned) {
  PoisonLatch latch;
  EXPECT_FALSE(latch.poisoned());
  EXPECT_TRUE(latch.Check("gloo", "barrier").ok());
  EXPECT_FALSE(latch.Poison(absl::OkStatus()));
  EXPECT_FALSE(latch.poisoned());
}

TEST(PoisonLatchTest, FirstCauseWins) {
  PoisonLatch latch;
  EXPECT_TRUE(latch.Poison(absl::AbortedError("rank 4 lost")));
  EXPECT_FALSE(latch.Poison(absl::DeadlineExceededError("later")));
  EXPECT_TRUE(latch.poisoned());
  EXPECT_EQ(latch.cause().code(), absl::StatusCode::kAborted);
  absl::Status refused = latch.Check("gloo", "all_reduce_sum");
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "rank 4 lost"));
  EXPECT_TRUE(absl::StrContains(refused.message(), "all_reduce_sum"));
  EXPECT_TRUE(absl::StrContains(refused.message(), "poisoned"));
}

}  // namespace
}  // namespace rankd::dataplane
