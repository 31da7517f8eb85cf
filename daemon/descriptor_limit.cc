#include "daemon/descriptor_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rankd {

uint64_t OtherDescriptors(const DaemonConfig& config) {
  return uint64_t{config.network.metrics_max_connections} + 1 +
         4 * uint64_t{config.nnodes} + RoundLinkHandshakes(config) +
         4 * uint64_t{config.nproc_per_node} + 256;
}

uint32_t RoundLinkHandshakes(const DaemonConfig& config) {
  return 2 * config.nnodes + 16;
}

uint32_t MinTcpConnections(const DaemonConfig& config) {
  return 2 * config.nnodes + 16;
}

absl::StatusOr<DescriptorPlan> PlanDescriptors(const DaemonConfig& config,
                                               uint64_t soft, uint64_t hard) {
  const uint64_t other = OtherDescriptors(config);
  DescriptorPlan plan;
  plan.max_tcp_connections = config.network.max_tcp_connections;
  if (hard != RLIM_INFINITY &&
      TcpListenerDescriptors(plan.max_tcp_connections) + other > hard) {
    // The most connections m that fit: 2m + m / 4 + 8 <= hard - other.
    const uint64_t room = hard > other + 8 ? hard - other - 8 : 0;
    uint64_t most = room * 4 / 9 + 1;
    while (most > 0 && 2 * most + most / 4 > room) --most;
    most = std::min<uint64_t>(most, UINT32_MAX);
    if (most < MinTcpConnections(config)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the hard limit on open files (RLIMIT_NOFILE, ", hard,
          ") leaves room for ", most, " TCP connections, fewer than the ",
          MinTcpConnections(config), " a job of --nnodes=", config.nnodes,
          " needs (2 per node and 16); raise it (ulimit -Hn, systemd "
          "LimitNOFILE=) or lower --metrics_max_connections"));
    }
    plan.max_tcp_connections = static_cast<uint32_t>(most);
    plan.lowered = true;
  }
  plan.needed = TcpListenerDescriptors(plan.max_tcp_connections) + other;
  plan.soft_limit = std::max(soft, plan.needed);
  if (hard != RLIM_INFINITY) plan.soft_limit = std::min(plan.soft_limit, hard);
  return plan;
}

absl::StatusOr<std::string> ApplyDescriptorLimit(DaemonConfig* config) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot read the open files limit (RLIMIT_NOFILE): ",
                     std::strerror(errno)));
  }
  absl::StatusOr<DescriptorPlan> plan =
      PlanDescriptors(*config, limit.rlim_cur, limit.rlim_max);
  if (!plan.ok()) return plan.status();
  if (plan->soft_limit != limit.rlim_cur) {
    limit.rlim_cur = plan->soft_limit;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot raise the open files limit (RLIMIT_NOFILE) to ",
                       plan->soft_limit, ": ", std::strerror(errno)));
    }
  }
  if (!plan->lowered) return std::string();
  NetworkLimits& n = config->network;
  const uint32_t wanted = n.max_tcp_connections;
  n.max_tcp_connections = plan->max_tcp_connections;
  if (n.max_tcp_unauthenticated >= n.max_tcp_connections) {
    n.max_tcp_unauthenticated =
        std::max<uint32_t>(1, n.max_tcp_connections / 2);
  }
  if (n.max_tcp_health_connections >= n.max_tcp_connections) {
    n.max_tcp_health_connections = n.max_tcp_connections / 4;
  }
  return absl::StrCat(
      "warning: --max_tcp_connections=", wanted, " needs ",
      TcpListenerDescriptors(wanted) + OtherDescriptors(*config),
      " open files, above the hard limit (RLIMIT_NOFILE) of ", limit.rlim_max,
      "; serving at most ", n.max_tcp_connections,
      " TCP connections (--max_tcp_unauthenticated=", n.max_tcp_unauthenticated,
      "). Raise the hard limit (ulimit -Hn, systemd "
      "LimitNOFILE=) to serve more.");
}

}  // namespace rankd
