// Unit tests for peer_transfer.h: CheckPeer: a peer outside the scope, or this
// rank itself.
#include "dataplane/peer_transfer.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

ResolvedScope Scope3(uint32_t me) { return ResolvedScope{{0, 1, 2}, me, 1}; }

TEST(PeerTest, RangeAndSelf) {
  EXPECT_TRUE(CheckPeer(2, Scope3(0), "send").ok());
  absl::Status outside = CheckPeer(3, Scope3(0), "send");
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(outside.message(), "outside"));
  absl::Status self = CheckPeer(1, Scope3(1), "receive");
  EXPECT_EQ(self.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(self.message(), "itself"));
}

}  // namespace
}  // namespace rankd::dataplane
