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

TEST(LimitsTest, JobIdsAreShortNamesOfSafeCharacters) {
  EXPECT_TRUE(IsJobId("llama-70b.v2_prod"));
  EXPECT_TRUE(IsJobId(std::string(kMaxJobIdBytes, 'j')));
  EXPECT_FALSE(IsJobId(""));
  EXPECT_FALSE(IsJobId(std::string(kMaxJobIdBytes + 1, 'j')));
  EXPECT_FALSE(IsJobId("job id"));
  EXPECT_FALSE(IsJobId("job/../x"));
}

TEST(LimitsTest, FramesShrinkSoThatEveryRoundsResultFits) {
  EXPECT_EQ(MaxFrameWords(1), kMaxFrameWords);
  EXPECT_EQ(MaxFrameWords(128), kMaxFrameWords);
  EXPECT_EQ(MaxFrameWords(129), kMaxRoundResultWords / 129);
  EXPECT_EQ(MaxFrameWords(1u << 20), 8u);
  EXPECT_TRUE(CheckFrameWords(kMaxFrameWords, 2).ok());
  EXPECT_EQ(CheckFrameWords(kMaxFrameWords + 1, 2).message(),
            "frame of 65537 words exceeds the limit of 65536 words per rank "
            "per round");
  EXPECT_EQ(CheckFrameWords(2049, 4096).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LimitsTest, AConnectionCarriesEveryCallItsNodesRanksMayHaveInFlight) {
  EXPECT_EQ(MaxCallsPerConnection(1), 1024);
  EXPECT_EQ(MaxCallsPerConnection(8), 1216);  // 8 x 144 + 64
  EXPECT_GE(
      MaxCallsPerConnection(64),
      static_cast<int>(64 * (kMaxWaitingGetsPerRank + kMaxStreamsPerCaller)));
}

}  // namespace
}  // namespace rankd
