// DescriptorFromProto: groups, and where the rank runs on its node.
#include "dataplane/descriptor_proto.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

v1::SessionDescriptor Proto(uint32_t world, uint32_t rank) {
  v1::SessionDescriptor p;
  p.set_job_id("job");
  p.set_world_size(world);
  p.set_rank(rank);
  v1::CollectiveGroup* g = p.add_groups();
  g->set_id(1);
  for (uint32_t r = 0; r < world; ++r) g->add_members(r);
  g->set_local_rank(rank);
  return p;
}

TEST(DescriptorFromProtoTest, TakesTheNodePlacement) {
  v1::SessionDescriptor p = Proto(8, 6);
  p.set_local_rank(2);
  p.set_nproc_per_node(4);
  p.set_node_index(1);
  p.set_nnodes(2);
  auto d = DescriptorFromProto(p);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rank(), 6u);
  EXPECT_EQ(d->local_rank(), 2u);
  EXPECT_EQ(d->ranks_on_node(), 4u);
  ASSERT_NE(d->group(1), nullptr);
  EXPECT_EQ(d->group(1)->size(), 8u);
}

TEST(DescriptorFromProtoTest, TakesTheEpoch) {
  v1::SessionDescriptor p = Proto(4, 1);
  p.set_epoch(3);
  auto d = DescriptorFromProto(p);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->epoch(), 3u);
}

TEST(DescriptorFromProtoTest, AnOldDaemonsEpochZeroIsEpochOne) {
  auto d = DescriptorFromProto(Proto(4, 1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->epoch(), 1u);
}

TEST(DescriptorFromProtoTest, RecoveryByDomainConfinesToTheRanksReplica) {
  v1::SessionDescriptor p = Proto(8, 5);
  p.mutable_topology()->set_tensor(2);
  p.mutable_topology()->set_pipeline(2);
  p.mutable_topology()->set_data(2);
  p.set_recovery_by_domain(true);
  auto d = DescriptorFromProto(p);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(d->recovery_domain().has_value());
  EXPECT_EQ(*d->recovery_domain(), (RecoveryDomain{1, 4, 4}));
}

// Degrees whose product wraps to 0 in 32 bits (65536 * 65536) divided by
// it: SIGFPE before anything was checked.
TEST(DescriptorFromProtoTest, ADomainOfImpossibleDegreesIsRefused) {
  v1::SessionDescriptor p = Proto(8, 5);
  p.mutable_topology()->set_tensor(65536);
  p.mutable_topology()->set_pipeline(65536);
  p.mutable_topology()->set_data(2);
  p.set_recovery_by_domain(true);
  auto d = DescriptorFromProto(p);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(
      d.status().message(),
      "job job: recovery by domain: tensor(65536) * pipeline(65536) * "
      "expert(0) ranks per replica do not tile the world of 8"))
      << d.status();
  p.mutable_topology()->set_tensor(3);
  p.mutable_topology()->set_pipeline(1);
  EXPECT_EQ(DescriptorFromProto(p).status().code(),
            absl::StatusCode::kInvalidArgument);  // 3 does not divide 8
}

TEST(DescriptorFromProtoTest, WithoutRecoveryByDomainThereIsNoDomain) {
  v1::SessionDescriptor p = Proto(8, 5);
  p.mutable_topology()->set_tensor(2);
  p.mutable_topology()->set_data(4);
  auto d = DescriptorFromProto(p);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->recovery_domain().has_value());
}

TEST(DescriptorFromProtoTest, WithoutNprocPerNodeTheWorldIsOneNode) {
  auto d = DescriptorFromProto(Proto(4, 3));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->local_rank(), 3u);
  EXPECT_EQ(d->ranks_on_node(), 4u);
}

TEST(DescriptorFromProtoTest, AnImpossiblePlacementIsRejectedNamingTheJob) {
  v1::SessionDescriptor p = Proto(4, 1);
  p.set_local_rank(4);
  p.set_nproc_per_node(4);
  auto d = DescriptorFromProto(p);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(d.status().message(), "job job")) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "local rank 4"))
      << d.status();
}

}  // namespace
}  // namespace rankd::dataplane
