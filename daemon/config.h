// Configuration of one rankd daemon: what it is told on its command line and
// in its environment, merged, defaulted and validated into a DaemonConfig.
//
// Every setting comes from, in order of precedence:
//   1. its command-line flag (see daemon/flags.h), e.g. --world_size;
//   2. its RANKD_<FLAG NAME IN UPPER CASE> environment variable, e.g.
//      RANKD_WORLD_SIZE, RANKD_TENSOR_PARALLEL, RANKD_SOCKET;
//   3. a Kubernetes convention, for the settings that have one:
//        LeaderWorkerSet  LWS_LEADER_ADDRESS  coordinator host (the leader's
//                                             listen port is assumed)
//                         LWS_GROUP_SIZE      nnodes
//                         LWS_WORKER_INDEX    node_index
//        Indexed Job /    JOB_COMPLETION_INDEX node_index
//        JobSet
//        downward API     POD_IP              advertise host
//                         POD_NAME, NODE_NAME recorded for reports
//        container        HOSTNAME            advertise host fallback
//   4. a built-in default.
// A flag or RANKD_ variable is taken literally, even when empty (so
// RANKD_SOCKET= disables the socket); an empty Kubernetes variable counts as
// absent. When an explicit setting (1 or 2) and a Kubernetes variable both
// give nnodes or node_index and disagree, or two Kubernetes variables
// disagree, resolution fails naming both instead of guessing.
//
// Every error is InvalidArgument and names the flag or variable to fix, with
// the value it had, e.g. "--world_size=7 is not --nnodes(2) *
// --nproc_per_node(4)". Settings that came from the environment are named by
// their variable (RANKD_WORLD_SIZE=7, LWS_GROUP_SIZE(2)).
//
// Depends on abseil, //common:host_port (HostPort, ParseHostPort,
// JoinHostPort, IsWildcardHost, re-exported here) and //common:topology
// only. Resolution is pure except that ResolveConfig asks the operating
// system for the host name when HOSTNAME is not set, and ProcessEnv reads
// the process environment.

#ifndef RANKD_DAEMON_CONFIG_H_
#define RANKD_DAEMON_CONFIG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/host_port.h"
#include "common/limits.h"
#include "common/topology.h"

namespace rankd {

// Defaults.
inline constexpr char kDefaultJobId[] = "rankd-job";
inline constexpr char kDefaultListenAddress[] = "0.0.0.0:7421";
inline constexpr char kDefaultSocketPath[] = "/run/rankd/rankd.sock";
inline constexpr int64_t kDefaultHeartbeatIntervalMs = 250;
inline constexpr int64_t kDefaultHeartbeatTimeoutMs = 2000;
// How long a daemon keeps trying to register with its coordinator before it
// gives up and exits non-zero.
inline constexpr int64_t kDefaultRegisterTimeoutMs = 300'000;
inline constexpr int64_t kMinRegisterTimeoutMs = 100;
// How long a job may stay RECOVERING (--recovery_deadline_ms) and the
// accepted range: long enough for a replacement to start, short enough that
// a job never waits unseen for hours.
inline constexpr int64_t kDefaultRecoveryDeadlineMs = 300'000;
inline constexpr int64_t kMinRecoveryDeadlineMs = 100;
inline constexpr int64_t kMaxRecoveryDeadlineMs = 86'400'000;

// Accepted ranges (milliseconds). The timeout must also exceed twice the
// interval, so that one late heartbeat never declares a node lost.
inline constexpr int64_t kMinHeartbeatIntervalMs = 10;
inline constexpr int64_t kMaxHeartbeatIntervalMs = 60'000;
inline constexpr int64_t kMaxHeartbeatTimeoutMs = 600'000;

// Longest Unix socket path (sockaddr_un.sun_path holds 108 bytes with NUL).
inline constexpr size_t kMaxSocketPathLength = kMaxUnixSocketPathBytes;

// Certificate files for the TCP listener and for connections to peers.
// Either cert_file and key_file are both set (TLS on) or neither is (TLS
// off). ca_file verifies peers; require_client_cert (mutual TLS) needs it.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  bool require_client_cert = false;

  bool enabled() const { return !cert_file.empty(); }
};

// Bounds of the daemon's listeners (docs/operations.md, "Listeners"), as
// its flags set them. The defaults are the constants of common/limits.h.
struct NetworkLimits {
  // TCP connections the public listener holds at once
  // (--max_tcp_connections); 0 until resolved: max(256, 2 * nnodes + 64).
  uint32_t max_tcp_connections = 0;
  // ... of them from one peer address (--max_tcp_connections_per_peer).
  uint32_t max_tcp_connections_per_peer = kMaxTcpConnectionsPerPeer;
  // ... of them not yet authenticated: in all (--max_tcp_unauthenticated;
  // 0 until resolved: max(1, max_tcp_connections / 2); always below
  // max_tcp_connections), and from one address group, an IPv4 address or
  // an IPv6 /64 (--max_tcp_unauthenticated_per_peer).
  uint32_t max_tcp_unauthenticated = 0;
  uint32_t max_tcp_unauthenticated_per_peer = kMaxTcpUnauthenticatedPerPeer;
  // ... of them whose calls are all grpc.health.v1, kept past the
  // unauthenticated time: in all (--max_tcp_health_connections; 0 until
  // resolved: min(32, max_tcp_connections / 4)) and from one address group
  // (--max_tcp_health_connections_per_peer). 0: none.
  uint32_t max_tcp_health_connections = 0;
  uint32_t max_tcp_health_connections_per_peer =
      kMaxTcpHealthConnectionsPerPeer;
  // Bytes a TCP connection may send before one of its calls authenticates
  // (--tcp_unauthenticated_bytes), and how long it may stay open so
  // (--tcp_unauthenticated_ms); beyond either it is closed.
  uint32_t tcp_unauthenticated_bytes = kTcpUnauthenticatedBytes;
  uint32_t tcp_unauthenticated_ms = kTcpUnauthenticatedMs;
  // gRPC's connection idle and age limits on the TCP listener
  // (--tcp_max_connection_idle_ms, --tcp_max_connection_age_ms); 0: none.
  uint32_t tcp_max_connection_idle_ms = kTcpMaxConnectionIdleMs;
  uint32_t tcp_max_connection_age_ms = 0;
  // The TCP server's gRPC resource quota (--tcp_memory_bytes,
  // --tcp_max_threads) and the Unix socket server's (--local_memory_bytes).
  uint32_t tcp_memory_bytes = kTcpMemoryBytes;
  uint32_t tcp_max_threads = kTcpMaxThreads;
  uint32_t local_memory_bytes = kLocalMemoryBytes;
  // The metrics endpoint: how long a connection may take to send its
  // request (--metrics_request_timeout_ms), how many it holds at once
  // (--metrics_max_connections) and from one address
  // (--metrics_max_connections_per_address).
  uint32_t metrics_request_timeout_ms = kMetricsRequestTimeoutMs;
  uint32_t metrics_max_connections = kMetricsMaxConnections;
  uint32_t metrics_max_connections_per_address =
      kMetricsMaxConnectionsPerAddress;
};

// The validated configuration of one daemon. Every field is set by
// ResolveConfig; a DaemonConfig it returns satisfies all rules listed there.
struct DaemonConfig {
  // Matches [A-Za-z0-9._-]{1,128}. Default kDefaultJobId.
  std::string job_id;
  // world_size == nnodes * nproc_per_node; node_index < nnodes.
  uint32_t world_size = 0;
  uint32_t nnodes = 0;
  uint32_t nproc_per_node = 0;
  uint32_t node_index = 0;
  // Product of the degrees == world_size.
  ParallelTopology topology;

  // True when this daemon is the job's coordinator; coordinator_address is
  // then its own advertise_address. Otherwise coordinator_address is the
  // host:port it registers with.
  bool is_coordinator = false;
  std::string coordinator_address;

  // host:port the TCP listener binds. Default kDefaultListenAddress. Port 0
  // (pick any) is accepted only for a single-node job.
  std::string listen_address;
  // host:port peers use to reach this daemon.
  std::string advertise_address;
  // Unix socket for local ranks; empty when disabled.
  std::string socket_path;

  absl::Duration heartbeat_interval = absl::Milliseconds(250);
  absl::Duration heartbeat_timeout = absl::Milliseconds(2000);
  absl::Duration register_timeout =
      absl::Milliseconds(kDefaultRegisterTimeoutMs);
  // --recovery=on: a lost rank or node makes the job RECOVERING at a new
  // epoch instead of FAILED (read by the coordinating daemon).
  bool recovery = false;
  // --recovery=domain: recovery (above) by data-parallel domain, so that a
  // loss stops only its replica (docs/contract.md, "Data-parallel
  // domains").
  bool recovery_by_domain = false;
  absl::Duration recovery_deadline =
      absl::Milliseconds(kDefaultRecoveryDeadlineMs);

  TlsFiles tls;
  // Folder holding the job's credentials (common/credentials.h); empty when
  // none were given. Not read here: daemon/transport/security.h loads them.
  std::string credentials_dir;
  // True only when the operator asked to run without credentials.
  bool allow_unauthenticated = false;
  // True when operators may read key-value values through Admin.KvGet (with
  // the operator token). Off by default.
  bool admin_kv_read = false;

  // What callers may make this daemon hold (--kv_max_bytes, --kv_max_keys,
  // --kv_max_keys_per_rank, --kv_max_bytes_per_rank,
  // --max_waiting_gets_per_rank, --max_streams_per_caller,
  // --max_operator_streams, --max_round_bytes_per_rank,
  // --max_reflection_streams, --max_reflection_requests_per_stream,
  // --max_reflection_streams_per_peer); each
  // >= 1.
  CallerLimits limits;
  // Key prefixes the job declares shared (--kv_shared_prefixes): keys under
  // them belong to no rank and are written with compare-and-set
  // (daemon/coordinator/kv_store.h). Empty by default.
  std::vector<std::string> kv_shared_prefixes;
  // Hand this node's rank tokens, once, to the first caller of
  // Rank.IssueRankTokens on the Unix socket (the launcher beside a sidecar
  // daemon). Off by default.
  bool issue_rank_tokens = false;

  // Identity of the host, pod and Kubernetes node ("" when unknown).
  std::string hostname;
  std::string pod_name;
  std::string node_name;

  // host:port of the Prometheus endpoint (daemon/metrics.h); empty when off.
  std::string metrics_address;

  // The coordinator's round link port (daemon/transport/round_link_server.h) on
  // the listen host: 0 for any free port, -1 when off.
  int round_link_port = 0;

  // What the network may make the daemon hold (docs/operations.md,
  // "Listeners"): the public TCP listener's bounds and the metrics
  // endpoint's.
  NetworkLimits network;
};

// The rankd settings exactly as given on the command line: one field per
// flag, nullopt when the flag was not given. Values are unparsed.
struct RawConfig {
  std::optional<std::string> job_id;
  std::optional<std::string> world_size;
  std::optional<std::string> nnodes;
  std::optional<std::string> node_index;
  std::optional<std::string> nproc_per_node;
  std::optional<std::string> coordinator;
  std::optional<std::string> listen;
  std::optional<std::string> advertise_address;
  std::optional<std::string> socket;
  std::optional<std::string> tensor_parallel;
  std::optional<std::string> pipeline_parallel;
  std::optional<std::string> expert_parallel;
  std::optional<std::string> heartbeat_interval_ms;
  std::optional<std::string> heartbeat_timeout_ms;
  std::optional<std::string> register_timeout_ms;
  std::optional<std::string> recovery;
  std::optional<std::string> recovery_deadline_ms;
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  std::optional<std::string> tls_ca;
  std::optional<std::string> tls_require_client_cert;
  std::optional<std::string> credentials_dir;
  std::optional<std::string> allow_unauthenticated;
  std::optional<std::string> admin_kv_read;
  std::optional<std::string> kv_max_bytes;
  std::optional<std::string> kv_max_keys;
  std::optional<std::string> kv_max_keys_per_rank;
  std::optional<std::string> max_waiting_gets_per_rank;
  std::optional<std::string> max_streams_per_caller;
  std::optional<std::string> max_operator_streams;
  std::optional<std::string> kv_max_bytes_per_rank;
  std::optional<std::string> max_round_bytes_per_rank;
  std::optional<std::string> max_reflection_streams;
  std::optional<std::string> max_reflection_requests_per_stream;
  std::optional<std::string> max_reflection_streams_per_peer;
  std::optional<std::string> kv_shared_prefixes;
  std::optional<std::string> issue_rank_tokens;
  std::optional<std::string> metrics_listen;
  std::optional<std::string> round_link_port;
  std::optional<std::string> max_tcp_connections;
  std::optional<std::string> max_tcp_connections_per_peer;
  std::optional<std::string> max_tcp_unauthenticated;
  std::optional<std::string> max_tcp_unauthenticated_per_peer;
  std::optional<std::string> max_tcp_health_connections;
  std::optional<std::string> max_tcp_health_connections_per_peer;
  std::optional<std::string> tcp_unauthenticated_bytes;
  std::optional<std::string> tcp_unauthenticated_ms;
  std::optional<std::string> tcp_max_connection_idle_ms;
  std::optional<std::string> tcp_max_connection_age_ms;
  std::optional<std::string> tcp_memory_bytes;
  std::optional<std::string> tcp_max_threads;
  std::optional<std::string> local_memory_bytes;
  std::optional<std::string> metrics_request_timeout_ms;
  std::optional<std::string> metrics_max_connections;
  std::optional<std::string> metrics_max_connections_per_address;
};

// Returns the value of environment variable `name`, or nullopt when unset.
using EnvLookup =
    std::function<std::optional<std::string>(std::string_view name)>;

// Returns an EnvLookup that reads this process's environment.
EnvLookup ProcessEnv();

// Merges `flags`, RANKD_* variables and Kubernetes variables from `env` with
// the defaults (see the file comment) and validates the result:
//   - numbers are decimal digits only (no sign, spaces or suffix) and fit
//     in 32 bits; booleans are true/false/1/0/yes/no;
//   - job_id matches [A-Za-z0-9._-]{1,128};
//   - nnodes >= 1 (default 1), node_index < nnodes (default 0);
//   - world_size and nproc_per_node: at least one is given; the missing one
//     is derived (nproc_per_node = world_size / nnodes must divide); both
//     satisfy world_size == nnodes * nproc_per_node <= kMaxWorldSize;
//   - tensor/pipeline/expert_parallel >= 1 (default 1), their product
//     divides world_size, data parallel is the quotient;
//   - addresses are HOST:PORT or [IPV6]:PORT; advertised and coordinator
//     ports are 1..65535;
//   - advertise address: --advertise_address, else the listen address if
//     it names a specific host, else POD_IP, else the host name, each with
//     the listen port;
//   - coordinator: --coordinator, else LWS_LEADER_ADDRESS with the listen
//     port. Without either, node 0 coordinates and every other node fails.
//     With LWS_LEADER_ADDRESS, node 0 (the leader) coordinates. With an
//     explicit address, this daemon coordinates iff the address names it:
//     same port as its advertise address, and host equal to its advertise
//     host, POD_IP, HOSTNAME or POD_NAME, or whose first DNS label is
//     HOSTNAME or POD_NAME (so "rankd-0.rankd.ns.svc" names pod "rankd-0");
//   - socket path is "" (disabled) or absolute and <= 107 bytes;
//   - heartbeat interval in [10ms, 60s], timeout in (2 * interval, 600s];
//   - TLS: cert and key together; ca or require_client_cert need them;
//     require_client_cert needs ca;
//   - credentials: --credentials_dir and --allow_unauthenticated=true
//     exclude each other (whether credentials are needed at all is checked
//     when the daemon loads them);
//   - limits (--kv_max_*, --max_*): each >= 1, default in common/limits.h;
//     --kv_max_bytes_per_rank defaults to kv_max_bytes / world_size (at
//     least 1);
//   - --kv_shared_prefixes: comma-separated, each 1..512 bytes, none
//     starting "r<digit>" (those keys belong to ranks);
//   - --issue_rank_tokens: a boolean.
// Returns InvalidArgument naming the flag or variable to fix.
absl::StatusOr<DaemonConfig> ResolveConfig(const RawConfig& flags,
                                           const EnvLookup& env);

// Returns a one-line, human-readable summary of `config` for the startup log.
// Contains no secrets (the credentials folder is named, never read).
std::string DescribeConfig(const DaemonConfig& config);

}  // namespace rankd

#endif  // RANKD_DAEMON_CONFIG_H_
