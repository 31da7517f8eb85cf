// Unit tests of PoisonLatch: first cause wins, refusals carry it, and a
// poisoned session never answers InvalidArgument.
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

TEST(PoisonLatchTest, APoisoningInvalidArgumentBecomesFailedPrecondition) {
  // InvalidArgument means "refused, the session is still usable": a
  // poisoned session never answers it, on any backend.
  PoisonLatch latch;
  EXPECT_TRUE(latch.Poison(
      absl::InvalidArgumentError("members disagree on operation #1 on world")));
  EXPECT_EQ(latch.cause().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(latch.cause().message(),
            "members disagree on operation #1 on world");
  EXPECT_EQ(latch.Check("gloo", "barrier").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(AsPoisonCause(absl::AbortedError("lost")).code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE(AsPoisonCause(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace rankd::dataplane
