// Unit tests for session_descriptor.h: every validation rule of
// DistributedSessionDescriptor, its derivation from a topology and its node
// placement.
#include "dataplane/session_descriptor.h"

#include "absl/strings/match.h"
#include "common/topology.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(DistributedSessionDescriptorTest, RejectsZeroWorld) {
  EXPECT_EQ(DistributedSessionDescriptor::Create(0, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DistributedSessionDescriptorTest, RejectsRankOutsideWorld) {
  EXPECT_EQ(DistributedSessionDescriptor::Create(4, 4, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DistributedSessionDescriptorTest, RejectsDuplicateGroupIds) {
  auto a = *CollectiveGroupDescriptor::Create(2, {0, 1}, 0, 0);
  auto b = *CollectiveGroupDescriptor::Create(2, {0, 2}, 0, 0);
  auto d = DistributedSessionDescriptor::Create(4, 0, {a, b});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(d.status().message(), "twice"));
}

TEST(DistributedSessionDescriptorTest, RejectsMemberOutsideWorld) {
  auto g = *CollectiveGroupDescriptor::Create(2, {0, 9}, 0, 0);
  auto d = DistributedSessionDescriptor::Create(4, 0, {g});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(d.status().message(), "member 9"));
}

TEST(DistributedSessionDescriptorTest, RejectsGroupOfAnotherRank) {
  auto g = *CollectiveGroupDescriptor::Create(2, {0, 1}, 1, 1);
  EXPECT_EQ(DistributedSessionDescriptor::Create(4, 0, {g}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DistributedSessionDescriptorTest, FromTopologyMatchesDerivedGroups) {
  ParallelTopology t{2, 2, 2, 1};
  auto d = DistributedSessionDescriptor::FromTopology(t, 8, 5);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->world_size(), 8u);
  EXPECT_EQ(d->rank(), 5u);
  auto groups = *DeriveGroups(t, 8);
  auto mine = GroupsOfRank(groups, 5);
  ASSERT_EQ(d->groups().size(), mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(d->groups()[i].id(), mine[i].first->id);
    EXPECT_EQ(d->groups()[i].members(), mine[i].first->members);
    EXPECT_EQ(d->groups()[i].local_rank(), mine[i].second);
  }
  EXPECT_NE(d->group(kWorldGroupId), nullptr);
  EXPECT_EQ(d->group(999), nullptr);
}

TEST(DistributedSessionDescriptorTest, FromTopologyRejectsBadInput) {
  EXPECT_FALSE(
      DistributedSessionDescriptor::FromTopology({2, 2, 1, 1}, 6, 0).ok());
  EXPECT_FALSE(
      DistributedSessionDescriptor::FromTopology({2, 1, 1, 1}, 2, 2).ok());
}

TEST(DistributedSessionDescriptorTest, NodePlacementDefaultsToOneNode) {
  ParallelTopology data8{1, 1, 1, 8};
  auto d = DistributedSessionDescriptor::FromTopology(data8, 8, 5);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->local_rank(), 5u);
  EXPECT_EQ(d->ranks_on_node(), 8u);
  ASSERT_TRUE(d->SetNodePlacement(1, 4).ok());
  EXPECT_EQ(d->local_rank(), 1u);
  EXPECT_EQ(d->ranks_on_node(), 4u);
  // Invalid placements change nothing.
  EXPECT_EQ(d->SetNodePlacement(4, 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d->SetNodePlacement(0, 9).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d->SetNodePlacement(0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d->local_rank(), 1u);
  EXPECT_EQ(d->ranks_on_node(), 4u);
}

TEST(DistributedSessionDescriptorTest, EpochDefaultsToOneAndRefusesZero) {
  auto d = DistributedSessionDescriptor::Create(2, 0, {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->epoch(), 1u);
  ASSERT_TRUE(d->SetEpoch(4).ok());
  EXPECT_EQ(d->epoch(), 4u);
  EXPECT_EQ(d->SetEpoch(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d->epoch(), 4u);
}

}  // namespace
}  // namespace rankd::dataplane
