#include "daemon/coordinator/job_spec.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/topology.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

#define EXPECT_STATUS(expr, code_, substring)                      \
  do {                                                             \
    const absl::Status _s = (expr);                                \
    EXPECT_EQ(_s.code(), (code_)) << _s;                           \
    EXPECT_TRUE(absl::StrContains(_s.message(), (substring)))      \
        << "missing '" << (substring) << "' in: " << _s.message(); \
  } while (0)

// 8 ranks on 2 nodes, tp2 pp2 dp2.
JobSpec EightRankSpec() {
  JobSpec spec;
  spec.job_id = "train-7";
  spec.world_size = 8;
  spec.nnodes = 2;
  spec.nproc_per_node = 4;
  spec.topology.tensor = 2;
  spec.topology.pipeline = 2;
  spec.topology.expert = 1;
  spec.topology.data = 2;
  return spec;
}

std::vector<uint32_t> Members(const v1::CollectiveGroup& g) {
  return std::vector<uint32_t>(g.members().begin(), g.members().end());
}

TEST(JobSpecTest, Defaults) {
  JobSpec spec;
  EXPECT_EQ(spec.world_size, 1u);
  EXPECT_EQ(spec.nnodes, 1u);
  EXPECT_EQ(spec.nproc_per_node, 1u);
  EXPECT_EQ(spec.heartbeat_timeout, absl::Seconds(2));
  EXPECT_EQ(spec.heartbeat_interval, absl::Milliseconds(250));
  EXPECT_TRUE(ValidateTopology(spec.topology, spec.world_size).ok());
}

TEST(JobSpecTest, DefaultNodeOfIsNodeMajor) {
  JobSpec spec = EightRankSpec();
  EXPECT_EQ(spec.DefaultNodeOf(0), 0u);
  EXPECT_EQ(spec.DefaultNodeOf(3), 0u);
  EXPECT_EQ(spec.DefaultNodeOf(4), 1u);
  EXPECT_EQ(spec.DefaultNodeOf(7), 1u);
}

TEST(JobSpecTest, TopologyProtoRoundTrip) {
  ParallelTopology t{.tensor = 2, .pipeline = 3, .expert = 4, .data = 5};
  v1::ParallelTopology p = ToProto(t);
  EXPECT_EQ(p.tensor(), 2u);
  EXPECT_EQ(p.pipeline(), 3u);
  EXPECT_EQ(p.expert(), 4u);
  EXPECT_EQ(p.data(), 5u);
  EXPECT_EQ(FromProto(p), t);
}

TEST(JobSpecTest, ToJobConfig) {
  v1::JobConfig c = ToJobConfig(EightRankSpec());
  EXPECT_EQ(c.job_id(), "train-7");
  EXPECT_EQ(c.world_size(), 8u);
  EXPECT_EQ(c.nnodes(), 2u);
  EXPECT_EQ(c.nproc_per_node(), 4u);
  EXPECT_EQ(c.topology().tensor(), 2u);
  EXPECT_EQ(c.topology().pipeline(), 2u);
  EXPECT_EQ(c.topology().expert(), 1u);
  EXPECT_EQ(c.topology().data(), 2u);
}

TEST(JobSpecTest, GroupKindToProto) {
  EXPECT_EQ(ToProto(GroupKind::kWorld), v1::GROUP_KIND_WORLD);
  EXPECT_EQ(ToProto(GroupKind::kTensor), v1::GROUP_KIND_TENSOR);
  EXPECT_EQ(ToProto(GroupKind::kPipeline), v1::GROUP_KIND_PIPELINE);
  EXPECT_EQ(ToProto(GroupKind::kExpert), v1::GROUP_KIND_EXPERT);
  EXPECT_EQ(ToProto(GroupKind::kData), v1::GROUP_KIND_DATA);
  EXPECT_EQ(ToProto(static_cast<GroupKind>(99)), v1::GROUP_KIND_UNSPECIFIED);
}

TEST(CheckSameJobTest, IdenticalConfigsAgree) {
  v1::JobConfig ours = ToJobConfig(EightRankSpec());
  EXPECT_TRUE(CheckSameJob(ours, ours, 1).ok());
}

TEST(CheckSameJobTest, NamesTheFlagAndBothValues) {
  v1::JobConfig ours = ToJobConfig(EightRankSpec());
  v1::JobConfig theirs = ours;
  theirs.set_world_size(16);
  EXPECT_STATUS(CheckSameJob(ours, theirs, 1),
                absl::StatusCode::kFailedPrecondition,
                "node 1's daemon disagrees with the coordinator about the "
                "job: --world_size=16 (coordinator: 8); start every daemon of "
                "a job with the same settings");
}

TEST(CheckSameJobTest, NamesEveryDifferingField) {
  v1::JobConfig ours = ToJobConfig(EightRankSpec());
  v1::JobConfig theirs = ours;
  theirs.set_job_id("train-8");
  theirs.set_nnodes(4);
  theirs.set_nproc_per_node(2);
  theirs.mutable_topology()->set_tensor(4);
  theirs.mutable_topology()->set_pipeline(1);
  theirs.mutable_topology()->set_expert(2);
  const absl::Status s = CheckSameJob(ours, theirs, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  for (const char* part :
       {"node 3's daemon disagrees", "--job_id=train-8 (coordinator: train-7)",
        "--nnodes=4 (coordinator: 2)", "--nproc_per_node=2 (coordinator: 4)",
        "--tensor_parallel=4 (coordinator: 2)",
        "--pipeline_parallel=1 (coordinator: 2)",
        "--expert_parallel=2 (coordinator: 1)"}) {
    EXPECT_TRUE(absl::StrContains(s.message(), part))
        << "missing '" << part << "' in: " << s.message();
  }
  EXPECT_FALSE(absl::StrContains(s.message(), "--world_size"));
}

TEST(BuildSessionDescriptorTest, FillsIdentityAndShape) {
  JobSpec spec = EightRankSpec();
  auto groups = DeriveGroups(spec.topology, spec.world_size);
  ASSERT_TRUE(groups.ok()) << groups.status();
  v1::SessionDescriptor d =
      BuildSessionDescriptor(spec, *groups, 0xabcdef, 5, 1, 1);
  EXPECT_EQ(d.job_id(), "train-7");
  EXPECT_EQ(d.job_incarnation(), 0xabcdefu);
  EXPECT_EQ(d.world_size(), 8u);
  EXPECT_EQ(d.rank(), 5u);
  EXPECT_EQ(d.local_rank(), 1u);
  EXPECT_EQ(d.node_index(), 1u);
  EXPECT_EQ(d.nnodes(), 2u);
  EXPECT_EQ(d.nproc_per_node(), 4u);
  EXPECT_EQ(FromProto(d.topology()), spec.topology);
}

TEST(BuildSessionDescriptorTest, ListsTheRanksGroupsWithItsIndex) {
  JobSpec spec = EightRankSpec();
  auto groups = DeriveGroups(spec.topology, spec.world_size);
  ASSERT_TRUE(groups.ok()) << groups.status();
  // rank 5 = ((d*P + p)*T + t)*E + e with d=1, p=0, t=1, e=0.
  v1::SessionDescriptor d = BuildSessionDescriptor(spec, *groups, 1, 5, 1, 1);
  ASSERT_EQ(d.groups_size(), 5);

  EXPECT_EQ(d.groups(0).id(), kWorldGroupId);
  EXPECT_EQ(d.groups(0).kind(), v1::GROUP_KIND_WORLD);
  EXPECT_EQ(Members(d.groups(0)),
            (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(d.groups(0).local_rank(), 5u);

  // Tensor groups 2..5: {0,1} {2,3} {4,5} {6,7}.
  EXPECT_EQ(d.groups(1).id(), 4u);
  EXPECT_EQ(d.groups(1).kind(), v1::GROUP_KIND_TENSOR);
  EXPECT_EQ(Members(d.groups(1)), (std::vector<uint32_t>{4, 5}));
  EXPECT_EQ(d.groups(1).local_rank(), 1u);

  // Pipeline groups 6..9: {0,2} {1,3} {4,6} {5,7}.
  EXPECT_EQ(d.groups(2).id(), 9u);
  EXPECT_EQ(d.groups(2).kind(), v1::GROUP_KIND_PIPELINE);
  EXPECT_EQ(Members(d.groups(2)), (std::vector<uint32_t>{5, 7}));
  EXPECT_EQ(d.groups(2).local_rank(), 0u);

  // Expert groups 10..17 are singletons.
  EXPECT_EQ(d.groups(3).id(), 15u);
  EXPECT_EQ(d.groups(3).kind(), v1::GROUP_KIND_EXPERT);
  EXPECT_EQ(Members(d.groups(3)), (std::vector<uint32_t>{5}));
  EXPECT_EQ(d.groups(3).local_rank(), 0u);

  // Data groups 18..21: {0,4} {1,5} {2,6} {3,7}.
  EXPECT_EQ(d.groups(4).id(), 19u);
  EXPECT_EQ(d.groups(4).kind(), v1::GROUP_KIND_DATA);
  EXPECT_EQ(Members(d.groups(4)), (std::vector<uint32_t>{1, 5}));
  EXPECT_EQ(d.groups(4).local_rank(), 1u);
}

TEST(BuildSessionDescriptorTest, SingleRankJob) {
  JobSpec spec;
  spec.job_id = "solo";
  auto groups = DeriveGroups(spec.topology, spec.world_size);
  ASSERT_TRUE(groups.ok()) << groups.status();
  v1::SessionDescriptor d = BuildSessionDescriptor(spec, *groups, 9, 0, 0, 0);
  EXPECT_EQ(d.rank(), 0u);
  EXPECT_EQ(d.world_size(), 1u);
  // World, tensor, pipeline, expert and data groups, all of size one.
  ASSERT_EQ(d.groups_size(), 5);
  for (const auto& g : d.groups()) {
    EXPECT_EQ(Members(g), (std::vector<uint32_t>{0}));
    EXPECT_EQ(g.local_rank(), 0u);
  }
}

}  // namespace
}  // namespace rankd
