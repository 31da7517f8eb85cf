// Unit tests for capabilities.h: DistributedCapabilities failing closed and
// RequireCollective / RequireCapability naming what is missing.
#include "dataplane/capabilities.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(CapabilityTest, DefaultsFailClosed) {
  DistributedCapabilities caps;
  EXPECT_FALSE(caps.world_collectives);
  EXPECT_TRUE(caps.collective_groups.empty());
  EXPECT_FALSE(caps.point_to_point);
  EXPECT_FALSE(caps.variable_all_to_all);
  EXPECT_FALSE(caps.exact_completion);
  absl::Status world = RequireCollective(caps, "nccl", "all_reduce_sum",
                                         CollectiveScope::World());
  EXPECT_EQ(world.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(world.message(), "nccl"));
  EXPECT_TRUE(absl::StrContains(world.message(), "world_collectives"));
  absl::Status group =
      RequireCollective(caps, "nccl", "all_gather", CollectiveScope::Group(3));
  EXPECT_EQ(group.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(group.message(), "collective_groups"));
  absl::Status p2p = RequireCapability(false, "gloo", "send", "point_to_point");
  EXPECT_EQ(p2p.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(p2p.message(), "point_to_point"));
}

TEST(CapabilityTest, AdvertisedCapabilitiesPass) {
  DistributedCapabilities caps;
  caps.world_collectives = true;
  caps.collective_groups = {3};
  EXPECT_TRUE(
      RequireCollective(caps, "x", "op", CollectiveScope::World()).ok());
  EXPECT_TRUE(
      RequireCollective(caps, "x", "op", CollectiveScope::Group(3)).ok());
  EXPECT_FALSE(
      RequireCollective(caps, "x", "op", CollectiveScope::Group(4)).ok());
  EXPECT_TRUE(RequireCapability(true, "x", "op", "point_to_point").ok());
}

}  // namespace
}  // namespace rankd::dataplane
