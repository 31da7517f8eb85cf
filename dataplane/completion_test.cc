// Unit tests for the rules of dataplane/completion.h: bounded waits reject a
// zero or negative timeout and an unsupported mode before waiting.
#include "dataplane/completion.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

// A completion that is never complete and supports only quarantine.
class Never final : public BoundedCompletion {
 public:
  bool IsComplete() const override { return false; }
  absl::Status Wait() override { return absl::OkStatus(); }
  bool SupportsCancellation(CancellationMode mode) const override {
    return mode == CancellationMode::kQuarantineUntilComplete;
  }
  absl::StatusOr<WaitOutcome> WaitBounded(absl::Duration timeout,
                                          CancellationMode mode) override {
    if (absl::Status s = CheckBoundedWait(*this, timeout, mode, "never");
        !s.ok()) {
      return s;
    }
    return WaitOutcome::DeadlineExceeded(mode);
  }
};

TEST(CompletionTest, ZeroTimeoutIsInvalid) {
  Never c;
  absl::Status s =
      CheckBoundedWait(c, absl::ZeroDuration(),
                       CancellationMode::kQuarantineUntilComplete, "never");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "positive timeout"));
  EXPECT_EQ(c.WaitBounded(absl::ZeroDuration(),
                          CancellationMode::kQuarantineUntilComplete)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CompletionTest, NegativeTimeoutIsInvalid) {
  Never c;
  EXPECT_EQ(CheckBoundedWait(c, absl::Milliseconds(-5),
                             CancellationMode::kQuarantineUntilComplete, "n")
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CompletionTest, UnsupportedModeFailsBeforeWaiting) {
  Never c;
  absl::Status s = CheckBoundedWait(c, absl::Seconds(1),
                                    CancellationMode::kNativeCancel, "never");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "NativeCancel"));
  EXPECT_TRUE(absl::StrContains(s.message(), "never"));
}

TEST(CompletionTest, SupportedModeAndPositiveTimeoutPass) {
  Never c;
  EXPECT_TRUE(CheckBoundedWait(c, absl::Milliseconds(1),
                               CancellationMode::kQuarantineUntilComplete, "n")
                  .ok());
  auto outcome = c.WaitBounded(absl::Milliseconds(1),
                               CancellationMode::kQuarantineUntilComplete);
  ASSERT_TRUE(outcome.ok());
  EXPECT_FALSE(outcome->completed());
  EXPECT_EQ(outcome->mode(), CancellationMode::kQuarantineUntilComplete);
}

TEST(CompletionTest, OutcomesAndModeNames) {
  EXPECT_TRUE(WaitOutcome::Completed().completed());
  EXPECT_FALSE(WaitOutcome::DeadlineExceeded(CancellationMode::kNativeCancel)
                   .completed());
  EXPECT_STREQ(CancellationModeName(CancellationMode::kNativeCancel),
               "NativeCancel");
  EXPECT_STREQ(CancellationModeName(CancellationMode::kQuarantineUntilComplete),
               "QuarantineUntilComplete");
}

}  // namespace
}  // namespace rankd::dataplane
