// JobSpec: the shape of one job (id, sizes, parallel topology, liveness
// timing) as every daemon of the job must agree on it, the limits this
// daemon enforces on its callers, and the conversions between it and the
// rankd.v1 messages. Depends on common/topology, common/limits and the
// protos.
#ifndef RANKD_DAEMON_JOB_SPEC_H_
#define RANKD_DAEMON_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "common/topology.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/common.pb.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

struct JobSpec {
  std::string job_id;
  uint32_t world_size = 1;
  uint32_t nnodes = 1;
  uint32_t nproc_per_node = 1;
  ParallelTopology topology;
  // A node (or rank without a watch stream) silent this long is lost.
  absl::Duration heartbeat_timeout = absl::Seconds(2);
  absl::Duration heartbeat_interval = absl::Milliseconds(250);
  // --recovery: a loss makes the job RECOVERING at a new epoch, for at most
  // recovery_deadline, instead of FAILED. Only the coordinator's count.
  bool recovery = false;
  absl::Duration recovery_deadline = absl::Minutes(5);
  // With `recovery`: recover by data-parallel domain (docs/contract.md,
  // "Data-parallel domains"): a loss ends only its domain's epoch and the
  // other domains keep serving. Without effect when topology.data is 1 (the
  // one domain is the world). Only the coordinator's count.
  bool recovery_by_domain = false;
  // What callers may make this daemon hold (its --kv_max_* and --max_*
  // flags). Not compared between nodes: each daemon enforces its own, and
  // the coordinator's apply to the job's key-value broker.
  CallerLimits limits;
  // Key prefixes the job declares shared (--kv_shared_prefixes; the
  // coordinator's apply, daemon/coordinator/kv_store.h).
  std::vector<std::string> kv_shared_prefixes;

  // Node that hosts `rank` under the default node-major assignment.
  uint32_t DefaultNodeOf(uint32_t rank) const { return rank / nproc_per_node; }
};

v1::ParallelTopology ToProto(const ParallelTopology& topology);
ParallelTopology FromProto(const v1::ParallelTopology& topology);
v1::JobConfig ToJobConfig(const JobSpec& spec);
v1::GroupKind ToProto(GroupKind kind);

// OK when `theirs` (a registering node's configuration) equals `ours`;
// otherwise FailedPrecondition naming every field that differs and the flag
// that sets it, e.g. "node 2 has --world_size=8 but the coordinator has 16".
absl::Status CheckSameJob(const v1::JobConfig& ours,
                          const v1::JobConfig& theirs, uint32_t their_node);

// The descriptor of `rank`: its groups (with its index in each) among
// `groups`, derived from spec.topology.
v1::SessionDescriptor BuildSessionDescriptor(
    const JobSpec& spec, const std::vector<GroupSpec>& groups,
    uint64_t job_incarnation, uint32_t rank, uint32_t node_index,
    uint32_t local_rank);

// The job's layout and every group, for admin answers; `nodes` is left
// empty for the caller to fill.
v1::Topology BuildTopology(const JobSpec& spec,
                           const std::vector<GroupSpec>& groups);

}  // namespace rankd

#endif  // RANKD_DAEMON_JOB_SPEC_H_
