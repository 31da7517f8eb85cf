// The daemon's file descriptor limit (RLIMIT_NOFILE) against what its
// flags let it hold (docs/operations.md, "Listeners"): at start the soft
// limit is raised as far as the limits need, up to the hard limit; where
// the hard limit is too low for --max_tcp_connections, that flag is
// lowered to what fits, with a warning, and the daemon refuses to start
// only when not even its nodes' connections would fit. Depends on
// daemon/config.h and POSIX getrlimit/setrlimit.
#ifndef RANKD_DAEMON_DESCRIPTOR_LIMIT_H_
#define RANKD_DAEMON_DESCRIPTOR_LIMIT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/config.h"

namespace rankd {

// Connections the public TCP listener may hold for `max_tcp_connections`:
// those open and those it shut down that gRPC has yet to close (TcpGate
// refuses a new connection beyond this).
constexpr uint64_t TcpListenerConnections(uint32_t max_tcp_connections) {
  return uint64_t{max_tcp_connections} + max_tcp_connections / 4 + 8;
}

// Descriptors the public TCP listener may hold for `max_tcp_connections`:
// its connections, and the gate's own duplicate of each one not
// authenticated yet (at most one per open connection).
constexpr uint64_t TcpListenerDescriptors(uint32_t max_tcp_connections) {
  return TcpListenerConnections(max_tcp_connections) + max_tcp_connections;
}

// Descriptors the daemon holds besides the TCP listener's connections: the
// metrics endpoint's connections, four per node (round link, peer
// channels), the round link's handshakes (RoundLinkHandshakes), four per
// local rank (Unix socket connections), and 256 for files, listening
// sockets and gRPC's own.
uint64_t OtherDescriptors(const DaemonConfig& config);

// Round link connections in their handshake at once on the coordinator
// (RoundLinkServer::Limits): two per node, as the TCP listener's minimum,
// and room for a node reconnecting while probes knock.
uint32_t RoundLinkHandshakes(const DaemonConfig& config);

// The fewest TCP connections a job needs: two per node and room for
// operators and probes.
uint32_t MinTcpConnections(const DaemonConfig& config);

// What to do about RLIMIT_NOFILE (pure; ApplyDescriptorLimit does it).
struct DescriptorPlan {
  uint64_t needed = 0;      // descriptors the (possibly lowered) limits need
  uint64_t soft_limit = 0;  // the soft limit to set (never below today's)
  // --max_tcp_connections to run with: the flag's, or lower where the hard
  // limit is too low (`lowered`).
  uint32_t max_tcp_connections = 0;
  bool lowered = false;
};

// Plans for `config` under soft limit `soft` and hard limit `hard`
// (RLIM_INFINITY: none). FailedPrecondition naming the hard limit and the
// flags when not even MinTcpConnections would fit.
absl::StatusOr<DescriptorPlan> PlanDescriptors(const DaemonConfig& config,
                                               uint64_t soft, uint64_t hard);

// Reads RLIMIT_NOFILE, plans, raises the soft limit, and lowers
// config->network's TCP limits where the plan says (unauthenticated and
// health connections stay below the total). Returns a warning to log ("" when
// nothing was lowered); FailedPrecondition as PlanDescriptors, Internal
// when the limit cannot be read or set.
absl::StatusOr<std::string> ApplyDescriptorLimit(DaemonConfig* config);

}  // namespace rankd

#endif  // RANKD_DAEMON_DESCRIPTOR_LIMIT_H_
