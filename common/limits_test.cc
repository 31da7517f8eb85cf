// Unit tests for common/limits.h.
#include "common/limits.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

TEST(LimitsTest, TimeoutsNeedADeadlineWithinTheLimit) {
  EXPECT_TRUE(CheckTimeoutMs(1, "timeout_ms").ok());
  EXPECT_TRUE(CheckTimeoutMs(kMaxTimeoutMs, "timeout_ms").ok());
  absl::Status zero = CheckTimeoutMs(0, "timeout_ms");
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.message(),
            "timeout_ms must be > 0: every wait needs a deadline");
  absl::Status long_wait =
      CheckTimeoutMs(kMaxTimeoutMs + 1, "wait_for_world_ms");
  EXPECT_EQ(long_wait.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(long_wait.message(),
            "wait_for_world_ms=3600001 exceeds the limit of 3600000 ms");
}

TEST(LimitsTest, AnOptionalWaitMayBeZeroButNotOverTheLimit) {
  EXPECT_TRUE(CheckOptionalTimeoutMs(0, "timeout_ms").ok());
  EXPECT_TRUE(CheckOptionalTimeoutMs(kMaxTimeoutMs, "timeout_ms").ok());
  EXPECT_EQ(CheckOptionalTimeoutMs(kMaxTimeoutMs + 1, "timeout_ms").message(),
            "timeout_ms=3600001 exceeds the limit of 3600000 ms");
}

TEST(LimitsTest, TextOverTheLimitIsNamedNotEchoed) {
  EXPECT_TRUE(CheckTextSize("reason", std::string(kMaxReasonBytes, 'x'),
                            kMaxReasonBytes)
                  .ok());
  absl::Status s = CheckTextSize(
      "reason", std::string(kMaxReasonBytes + 1, 'x'), kMaxReasonBytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "reason has 1025 bytes; the limit is 1024");
  EXPECT_FALSE(absl::StrContains(s.message(), "xx"));
}

}  // namespace
}  // namespace rankd
