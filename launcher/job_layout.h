// job_layout.h: the job this node takes part in, as rankrun tells its
// ranks: from the command line alone when rankrun starts the daemon, or the
// reused daemon's job checked against the command line.
//
// Depends on the launcher's options, node_daemon.h (DaemonJob),
// common/topology and abseil.
#ifndef RANKD_LAUNCHER_JOB_LAYOUT_H_
#define RANKD_LAUNCHER_JOB_LAYOUT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/topology.h"
#include "launcher/node_daemon.h"
#include "launcher/options.h"

namespace rankd::launcher {

// This node's place in the job. Copyable value type.
struct Layout {
  std::string job_id;
  uint32_t nnodes = 1;
  uint32_t node_rank = 0;
  uint32_t nproc_per_node = 1;
  uint32_t world_size = 1;
  ParallelTopology topology;
};

// The reused daemon's job (`job`, from the daemon at `target`), checked
// against every size the options gave: returns InvalidArgument naming each
// option that disagrees with the daemon and suggesting --daemon=start.
absl::StatusOr<Layout> LayoutFromDaemon(const LaunchOptions& o,
                                        const DaemonJob& job,
                                        const std::string& target);

// The job from the options alone (a daemon rankrun starts): sizes default
// to 1 and the job id to kDefaultJobId. Returns InvalidArgument when the
// node rank is not below --nnodes, the parallel degrees do not divide the
// world size, or a multi-node job lacks --coordinator or
// --credentials_dir.
absl::StatusOr<Layout> LayoutFromOptions(const LaunchOptions& o);

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_JOB_LAYOUT_H_
