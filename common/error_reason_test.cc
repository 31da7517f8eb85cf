// Unit tests for common/error_reason.h: a reason rides on a failed status
// (never on OK), survives copies, is replaced or erased, is kept across a
// rewritten message, and an unknown wire number reads as kUnspecified.
#include "common/error_reason.h"

#include "gtest/gtest.h"

namespace rankd {
namespace {

TEST(ErrorReasonTest, RidesOnAFailedStatusOnly) {
  const absl::Status fenced = WithReason(
      absl::FailedPreconditionError("rank 3 joined into epoch 1 ..."),
      ErrorReason::kEpochFenced);
  EXPECT_EQ(ReasonOf(fenced), ErrorReason::kEpochFenced);
  EXPECT_EQ(fenced.message(), "rank 3 joined into epoch 1 ...");
  const absl::Status copy = fenced;
  EXPECT_EQ(ReasonOf(copy), ErrorReason::kEpochFenced);
  EXPECT_EQ(ReasonOf(absl::FailedPreconditionError("other")),
            ErrorReason::kUnspecified);
  EXPECT_TRUE(WithReason(absl::OkStatus(), ErrorReason::kEpochFenced).ok());
  EXPECT_EQ(ReasonOf(WithReason(absl::OkStatus(), ErrorReason::kEpochFenced)),
            ErrorReason::kUnspecified);
}

TEST(ErrorReasonTest, UnspecifiedErasesAndKeepReasonCarriesItOver) {
  const absl::Status fenced =
      WithReason(absl::FailedPreconditionError("x"), ErrorReason::kEpochFenced);
  EXPECT_EQ(ReasonOf(WithReason(fenced, ErrorReason::kUnspecified)),
            ErrorReason::kUnspecified);
  const absl::Status rewritten =
      KeepReason(fenced, absl::FailedPreconditionError("KvSet: x"));
  EXPECT_EQ(rewritten.message(), "KvSet: x");
  EXPECT_EQ(ReasonOf(rewritten), ErrorReason::kEpochFenced);
  EXPECT_EQ(
      ReasonOf(KeepReason(absl::InternalError("y"), absl::InternalError("z"))),
      ErrorReason::kUnspecified);
}

TEST(ErrorReasonTest, WireNumbers) {
  EXPECT_EQ(ErrorReasonFromWire(0), ErrorReason::kUnspecified);
  EXPECT_EQ(ErrorReasonFromWire(1), ErrorReason::kEpochFenced);
  EXPECT_EQ(ErrorReasonFromWire(2), ErrorReason::kEpochEnded);
  // A newer daemon's reason this build does not know: the code decides.
  EXPECT_EQ(ErrorReasonFromWire(3), ErrorReason::kUnspecified);
  EXPECT_EQ(ErrorReasonFromWire(0xffffffffu), ErrorReason::kUnspecified);
}

}  // namespace
}  // namespace rankd
