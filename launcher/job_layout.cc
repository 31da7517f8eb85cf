// job_layout.cc: see job_layout.h.

#include "launcher/job_layout.h"

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::launcher {

absl::StatusOr<Layout> LayoutFromDaemon(const LaunchOptions& o,
                                        const DaemonJob& job,
                                        const std::string& target) {
  std::vector<std::string> disagree;
  auto check = [&](const char* flag, std::optional<uint32_t> given,
                   uint32_t daemon) {
    if (given.has_value() && *given != daemon) {
      disagree.push_back(
          absl::StrCat(flag, "=", *given, " (the daemon's ", daemon, ")"));
    }
  };
  check("--nproc_per_node", o.nproc_per_node, job.nproc_per_node);
  check("--nnodes", o.nnodes, job.nnodes);
  if (o.node_rank.has_value() && *o.node_rank != job.node_index) {
    disagree.push_back(absl::StrCat(o.node_rank_source, "=", *o.node_rank,
                                    " (the daemon's node ", job.node_index,
                                    ")"));
  }
  check("--tensor_parallel", o.tensor_parallel, job.tensor_parallel);
  check("--pipeline_parallel", o.pipeline_parallel, job.pipeline_parallel);
  check("--expert_parallel", o.expert_parallel, job.expert_parallel);
  if (!o.job_id.empty() && o.job_id != job.job_id) {
    disagree.push_back(absl::StrCat("--job_id=", o.job_id, " (the daemon's ",
                                    job.job_id, ")"));
  }
  if (!disagree.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the rankd daemon at ", target, " serves job '", job.job_id, "' (node ",
        job.node_index, " of ", job.nnodes, ", ", job.nproc_per_node,
        " per node), which contradicts ", absl::StrJoin(disagree, ", "),
        "; fix the options or start a daemon of its own (--daemon=start)"));
  }
  Layout l;
  l.job_id = job.job_id;
  l.nnodes = job.nnodes;
  l.node_rank = job.node_index;
  l.nproc_per_node = job.nproc_per_node;
  l.world_size = job.world_size;
  absl::StatusOr<ParallelTopology> t =
      TopologyFromDegrees(job.world_size, job.tensor_parallel,
                          job.pipeline_parallel, job.expert_parallel);
  if (!t.ok()) return t.status();
  l.topology = *t;
  return l;
}

absl::StatusOr<Layout> LayoutFromOptions(const LaunchOptions& o) {
  Layout l;
  l.job_id = o.job_id.empty() ? kDefaultJobId : o.job_id;
  l.nnodes = o.nnodes.value_or(1);
  l.node_rank = o.node_rank.value_or(0);
  l.nproc_per_node = o.nproc_per_node.value_or(1);
  if (l.node_rank >= l.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.node_rank_source, "=", l.node_rank,
                     " must be below --nnodes(", l.nnodes, ")"));
  }
  l.world_size = l.nnodes * l.nproc_per_node;
  const uint32_t tp = o.tensor_parallel.value_or(1);
  const uint32_t pp = o.pipeline_parallel.value_or(1);
  const uint32_t ep = o.expert_parallel.value_or(1);
  absl::StatusOr<ParallelTopology> t =
      TopologyFromDegrees(l.world_size, tp, pp, ep);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tensor_parallel(", tp, ") * --pipeline_parallel(", pp,
        ") * --expert_parallel(", ep, ") does not divide the world size ",
        l.world_size, " (--nnodes ", l.nnodes, " * --nproc_per_node ",
        l.nproc_per_node, "); data parallel is the quotient"));
  }
  l.topology = *t;
  if (l.nnodes > 1 && o.coordinator.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", l.nnodes,
        " needs --coordinator=HOST:PORT (node 0's daemon) to start this "
        "node's daemon (or --daemon=reuse for a running one)"));
  }
  if (l.nnodes > 1 && o.credentials_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", l.nnodes,
        " needs --credentials_dir=DIR, the job's credentials shared by every "
        "node (make them once with `rankctl credentials create DIR`)"));
  }
  return l;
}

}  // namespace rankd::launcher
