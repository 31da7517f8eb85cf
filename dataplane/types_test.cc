// Unit tests for every validation rule of dataplane/types.h.
#include "dataplane/types.h"

#include <limits>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(DtypeTest, SizesAndNames) {
  EXPECT_EQ(DtypeSize(TensorDtype::kBool), 1u);
  EXPECT_EQ(DtypeSize(TensorDtype::kU8), 1u);
  EXPECT_EQ(DtypeSize(TensorDtype::kF16), 2u);
  EXPECT_EQ(DtypeSize(TensorDtype::kBf16), 2u);
  EXPECT_EQ(DtypeSize(TensorDtype::kI32), 4u);
  EXPECT_EQ(DtypeSize(TensorDtype::kF64), 8u);
  EXPECT_EQ(DtypeSize(TensorDtype::kComplex64), 8u);
  EXPECT_STREQ(DtypeName(TensorDtype::kBf16), "bf16");
  EXPECT_STREQ(DtypeName(TensorDtype::kComplex64), "complex64");
}

TEST(ValueDescriptorTest, ScalarHasOneElement) {
  auto d = ValueDescriptor::Create({}, TensorDtype::kF32);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->element_count(), 1u);
  EXPECT_EQ(d->byte_size(), 4u);
  EXPECT_EQ(d->rows(), 1u);
  EXPECT_EQ(d->row_elements(), 1u);
  EXPECT_EQ(d->ToString(), "f32[]");
}

TEST(ValueDescriptorTest, ShapeAccessors) {
  auto d = ValueDescriptor::Create({3, 4, 5}, TensorDtype::kI64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->element_count(), 60u);
  EXPECT_EQ(d->byte_size(), 480u);
  EXPECT_EQ(d->rows(), 3u);
  EXPECT_EQ(d->row_elements(), 20u);
  EXPECT_EQ(d->RowDescriptor().shape(), (std::vector<size_t>{4, 5}));
  EXPECT_EQ(d->ToString(), "i64[3, 4, 5]");
}

TEST(ValueDescriptorTest, RejectsZeroDimension) {
  auto d = ValueDescriptor::Create({2, 0, 3}, TensorDtype::kF32);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(d.status().message(), "dimension 1"));
}

TEST(ValueDescriptorTest, RejectsOverflow) {
  const size_t big = std::numeric_limits<size_t>::max() / 2;
  EXPECT_EQ(ValueDescriptor::Create({big, 4}, TensorDtype::kU8).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The element count fits but the byte size does not.
  EXPECT_EQ(ValueDescriptor::Create({big}, TensorDtype::kF64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValueDescriptorTest, RowsAllowsZeroRowsOnly) {
  auto row = ValueDescriptor::Create({4}, TensorDtype::kF32);
  ASSERT_TRUE(row.ok());
  auto empty = ValueDescriptor::Rows(0, *row);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->shape(), (std::vector<size_t>{0, 4}));
  EXPECT_EQ(empty->byte_size(), 0u);
  auto three = ValueDescriptor::Rows(3, *row);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->element_count(), 12u);
  EXPECT_EQ(ValueDescriptor::Rows(std::numeric_limits<size_t>::max(), *row)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValueDescriptorTest, RowOfAScalarOrVectorIsAScalar) {
  auto v = ValueDescriptor::Create({7}, TensorDtype::kU32);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->RowDescriptor().shape().empty());
  EXPECT_EQ(v->RowDescriptor().element_count(), 1u);
}

TEST(ValueDescriptorTest, Equality) {
  auto a = *ValueDescriptor::Create({2, 2}, TensorDtype::kF32);
  auto b = *ValueDescriptor::Create({2, 2}, TensorDtype::kF32);
  auto c = *ValueDescriptor::Create({2, 2}, TensorDtype::kI32);
  auto e = *ValueDescriptor::Create({4}, TensorDtype::kF32);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(a == e);
}

TEST(CollectiveGroupDescriptorTest, Valid) {
  auto g = CollectiveGroupDescriptor::Create(3, {4, 6, 8}, 1, 6);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->id(), 3u);
  EXPECT_EQ(g->size(), 3u);
  EXPECT_EQ(g->local_rank(), 1u);
}

TEST(CollectiveGroupDescriptorTest, RejectsEmptyMembers) {
  EXPECT_EQ(CollectiveGroupDescriptor::Create(2, {}, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CollectiveGroupDescriptorTest, RejectsDuplicateMembers) {
  auto g = CollectiveGroupDescriptor::Create(2, {1, 2, 1}, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(g.status().message(), "twice"));
}

TEST(CollectiveGroupDescriptorTest, RejectsLocalRankNotThisRank) {
  EXPECT_EQ(CollectiveGroupDescriptor::Create(2, {1, 2}, 0, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CollectiveGroupDescriptor::Create(2, {1, 2}, 5, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

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

TEST(ScopeTest, WorldResolvesToEveryRank) {
  auto d = *DistributedSessionDescriptor::FromTopology({2, 1, 1, 2}, 4, 2);
  auto s = ResolveScope(d, CollectiveScope::World());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->members, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(s->local_rank, 2u);
  EXPECT_EQ(s->group_id, kWorldGroupId);
  EXPECT_EQ(CollectiveScope::World().ToString(), "world");
  EXPECT_EQ(CollectiveScope::Group(4).ToString(), "group 4");
}

TEST(ScopeTest, GroupResolvesToItsMembers) {
  auto d = *DistributedSessionDescriptor::FromTopology({2, 1, 1, 2}, 4, 3);
  // Tensor groups are ids 2 ({0,1}) and 3 ({2,3}).
  auto s = ResolveScope(d, CollectiveScope::Group(3));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->members, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(s->local_rank, 1u);
}

TEST(ScopeTest, NonMemberGroupIsNotFound) {
  auto d = *DistributedSessionDescriptor::FromTopology({2, 1, 1, 2}, 4, 3);
  auto s = ResolveScope(d, CollectiveScope::Group(2));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "group 2"));
  // It names this rank's groups and the capability they bound.
  EXPECT_TRUE(absl::StrContains(s.status().message(), "collective_groups"))
      << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "its groups are 1, 3"))
      << s.status();
}

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

TEST(AllGatherOutputTest, ScalarAndRows) {
  auto scalar = *ValueDescriptor::Create({}, TensorDtype::kI32);
  EXPECT_EQ(AllGatherOutput(scalar, 4).shape(), (std::vector<size_t>{4}));
  auto m = *ValueDescriptor::Create({2, 3}, TensorDtype::kI32);
  EXPECT_EQ(AllGatherOutput(m, 4).shape(), (std::vector<size_t>{8, 3}));
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

}  // namespace
}  // namespace rankd::dataplane
