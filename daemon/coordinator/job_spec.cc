#include "daemon/coordinator/job_spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd {

v1::ParallelTopology ToProto(const ParallelTopology& topology) {
  v1::ParallelTopology out;
  out.set_tensor(topology.tensor);
  out.set_pipeline(topology.pipeline);
  out.set_expert(topology.expert);
  out.set_data(topology.data);
  return out;
}

ParallelTopology FromProto(const v1::ParallelTopology& topology) {
  ParallelTopology out;
  out.tensor = topology.tensor();
  out.pipeline = topology.pipeline();
  out.expert = topology.expert();
  out.data = topology.data();
  return out;
}

v1::JobConfig ToJobConfig(const JobSpec& spec) {
  v1::JobConfig config;
  config.set_job_id(spec.job_id);
  config.set_world_size(spec.world_size);
  config.set_nnodes(spec.nnodes);
  config.set_nproc_per_node(spec.nproc_per_node);
  *config.mutable_topology() = ToProto(spec.topology);
  return config;
}

v1::GroupKind ToProto(GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld:
      return v1::GROUP_KIND_WORLD;
    case GroupKind::kTensor:
      return v1::GROUP_KIND_TENSOR;
    case GroupKind::kPipeline:
      return v1::GROUP_KIND_PIPELINE;
    case GroupKind::kExpert:
      return v1::GROUP_KIND_EXPERT;
    case GroupKind::kData:
      return v1::GROUP_KIND_DATA;
  }
  return v1::GROUP_KIND_UNSPECIFIED;
}

absl::Status CheckSameJob(const v1::JobConfig& ours,
                          const v1::JobConfig& theirs, uint32_t their_node) {
  std::vector<std::string> diffs;
  auto compare = [&](const char* flag, auto mine, auto other) {
    if (mine != other) {
      diffs.push_back(
          absl::StrCat(flag, "=", other, " (coordinator: ", mine, ")"));
    }
  };
  compare("--job_id", ours.job_id(), theirs.job_id());
  compare("--world_size", ours.world_size(), theirs.world_size());
  compare("--nnodes", ours.nnodes(), theirs.nnodes());
  compare("--nproc_per_node", ours.nproc_per_node(), theirs.nproc_per_node());
  compare("--tensor_parallel", ours.topology().tensor(),
          theirs.topology().tensor());
  compare("--pipeline_parallel", ours.topology().pipeline(),
          theirs.topology().pipeline());
  compare("--expert_parallel", ours.topology().expert(),
          theirs.topology().expert());
  if (diffs.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("node ", their_node,
                   "'s daemon disagrees with the coordinator about the job: ",
                   absl::StrJoin(diffs, ", "),
                   "; start every daemon of a job with the same settings"));
}

v1::SessionDescriptor BuildSessionDescriptor(
    const JobSpec& spec, const std::vector<GroupSpec>& groups,
    uint64_t job_incarnation, uint32_t rank, uint32_t node_index,
    uint32_t local_rank) {
  v1::SessionDescriptor d;
  d.set_job_id(spec.job_id);
  d.set_job_incarnation(job_incarnation);
  d.set_world_size(spec.world_size);
  d.set_rank(rank);
  d.set_local_rank(local_rank);
  d.set_node_index(node_index);
  d.set_nnodes(spec.nnodes);
  d.set_nproc_per_node(spec.nproc_per_node);
  *d.mutable_topology() = ToProto(spec.topology);
  for (const auto& [group, index] : GroupsOfRank(groups, rank)) {
    v1::CollectiveGroup* g = d.add_groups();
    g->set_id(group->id);
    g->set_kind(ToProto(group->kind));
    for (uint32_t m : group->members) g->add_members(m);
    g->set_local_rank(index);
  }
  return d;
}

v1::Topology BuildTopology(const JobSpec& spec,
                           const std::vector<GroupSpec>& groups) {
  v1::Topology topology;
  topology.set_job_id(spec.job_id);
  topology.set_world_size(spec.world_size);
  topology.set_nnodes(spec.nnodes);
  topology.set_nproc_per_node(spec.nproc_per_node);
  *topology.mutable_topology() = ToProto(spec.topology);
  for (const GroupSpec& g : groups) {
    v1::CollectiveGroup* out = topology.add_groups();
    out->set_id(g.id);
    out->set_kind(ToProto(g.kind));
    for (uint32_t m : g.members) out->add_members(m);
  }
  return topology;
}

}  // namespace rankd
