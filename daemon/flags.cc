#include "daemon/flags.h"

#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/string_view.h"

namespace rankd {
namespace flags_internal {

// A flag value that is either absent (never given) or the exact text given,
// possibly empty.
struct OptionalText {
  std::optional<std::string> text;
};

bool AbslParseFlag(absl::string_view input, OptionalText* out,
                   std::string* /*error*/) {
  out->text = std::string(input);
  return true;
}

std::string AbslUnparseFlag(const OptionalText& value) {
  return value.text.value_or("");
}

}  // namespace flags_internal
}  // namespace rankd

using rankd::flags_internal::OptionalText;

// Help texts name the RANKD_* fallback and the default (see config.h).
ABSL_FLAG(OptionalText, job_id, OptionalText{},
          "Job id, [A-Za-z0-9._-]{1,128}; the same on every node. "
          "Env RANKD_JOB_ID. Default rankd-job.");
ABSL_FLAG(OptionalText, world_size, OptionalText{},
          "Total number of ranks = nnodes * nproc_per_node. Env "
          "RANKD_WORLD_SIZE. Default nnodes * nproc_per_node.");
ABSL_FLAG(OptionalText, nnodes, OptionalText{},
          "Number of nodes (daemons) in the job. Env RANKD_NNODES, else "
          "LWS_GROUP_SIZE. Default 1.");
ABSL_FLAG(OptionalText, node_index, OptionalText{},
          "This node's index, 0..nnodes-1; node 0 coordinates by default. "
          "Env RANKD_NODE_INDEX, else LWS_WORKER_INDEX or "
          "JOB_COMPLETION_INDEX. Default 0.");
ABSL_FLAG(OptionalText, nproc_per_node, OptionalText{},
          "Ranks (serving processes) per node. Env RANKD_NPROC_PER_NODE. "
          "Default world_size / nnodes.");
ABSL_FLAG(OptionalText, coordinator, OptionalText{},
          "HOST:PORT of the coordinator daemon. Env RANKD_COORDINATOR, else "
          "LWS_LEADER_ADDRESS plus the --listen port. Default: node 0 "
          "coordinates.");
ABSL_FLAG(OptionalText, listen, OptionalText{},
          "HOST:PORT ([IPV6]:PORT) the TCP listener binds. Env RANKD_LISTEN. "
          "Default 0.0.0.0:7421.");
ABSL_FLAG(OptionalText, advertise_address, OptionalText{},
          "HOST:PORT peers use to reach this daemon. Env "
          "RANKD_ADVERTISE_ADDRESS. Default: the --listen address if it names "
          "a host, else POD_IP, else the host name, with the --listen port.");
ABSL_FLAG(OptionalText, socket, OptionalText{},
          "Unix socket path for local ranks; empty disables it. Env "
          "RANKD_SOCKET. Default /run/rankd/rankd.sock.");
ABSL_FLAG(OptionalText, tensor_parallel, OptionalText{},
          "Tensor-parallel degree. Env RANKD_TENSOR_PARALLEL. Default 1.");
ABSL_FLAG(OptionalText, pipeline_parallel, OptionalText{},
          "Pipeline-parallel degree. Env RANKD_PIPELINE_PARALLEL. Default 1.");
ABSL_FLAG(OptionalText, expert_parallel, OptionalText{},
          "Expert-parallel degree. Env RANKD_EXPERT_PARALLEL. Default 1. "
          "Data parallel is world_size / (tensor * pipeline * expert).");
ABSL_FLAG(OptionalText, heartbeat_interval_ms, OptionalText{},
          "Milliseconds between heartbeats to the coordinator, 10..60000. Env "
          "RANKD_HEARTBEAT_INTERVAL_MS. Default 250.");
ABSL_FLAG(OptionalText, heartbeat_timeout_ms, OptionalText{},
          "Milliseconds without a heartbeat before a node is lost; more than "
          "twice the interval, at most 600000. Env "
          "RANKD_HEARTBEAT_TIMEOUT_MS. Default 2000.");
ABSL_FLAG(OptionalText, register_timeout_ms, OptionalText{},
          "Milliseconds a daemon keeps retrying registration with an "
          "unreachable coordinator before it exits with status 1. Env "
          "RANKD_REGISTER_TIMEOUT_MS. Default 300000.");
ABSL_FLAG(OptionalText, recovery, OptionalText{},
          "on: a lost rank or node moves the job to RECOVERING at a new epoch "
          "and replacements may join its slots; domain: the same per "
          "data-parallel replica, the other replicas serving on "
          "(docs/contract.md, \"Data-parallel domains\"); off: it fails the "
          "job. Read by the coordinator. Env RANKD_RECOVERY. Default off.");
ABSL_FLAG(OptionalText, recovery_deadline_ms, OptionalText{},
          "Milliseconds a job may stay RECOVERING before it fails, naming "
          "what never came back; 100..86400000. Env "
          "RANKD_RECOVERY_DEADLINE_MS. Default 300000.");
ABSL_FLAG(OptionalText, tls_cert, OptionalText{},
          "PEM certificate for TLS (needs --tls_key). Env RANKD_TLS_CERT. "
          "Default: no TLS.");
ABSL_FLAG(OptionalText, tls_key, OptionalText{},
          "PEM private key for --tls_cert. Env RANKD_TLS_KEY.");
ABSL_FLAG(OptionalText, tls_ca, OptionalText{},
          "PEM CA bundle that verifies peers. Env RANKD_TLS_CA.");
ABSL_FLAG(OptionalText, tls_require_client_cert, OptionalText{},
          "true to require client certificates signed by --tls_ca (mutual "
          "TLS). Env RANKD_TLS_REQUIRE_CLIENT_CERT. Default false.");
ABSL_FLAG(OptionalText, credentials_dir, OptionalText{},
          "Folder with the job's credentials (node.key or node.token, "
          "rank.token, operator.token; create one with `rankctl credentials "
          "create DIR`). Env RANKD_CREDENTIALS_DIR. Required unless "
          "--allow_unauthenticated.");
ABSL_FLAG(OptionalText, allow_unauthenticated, OptionalText{},
          "true to run without credentials: anyone who can reach the TCP port "
          "can change the job. Only for trusted, isolated networks. Env "
          "RANKD_ALLOW_UNAUTHENTICATED. Default false.");
ABSL_FLAG(OptionalText, admin_kv_read, OptionalText{},
          "true to let operators read key-value values with Admin.KvGet (with "
          "the operator token when credentials are on). Env "
          "RANKD_ADMIN_KV_READ. Default false.");
// What callers may make the daemon hold (docs/operations.md, "Limits").
ABSL_FLAG(OptionalText, kv_max_bytes, OptionalText{},
          "Bytes of keys and values the job's key-value broker holds "
          "(enforced by the coordinator, which holds it). Env "
          "RANKD_KV_MAX_BYTES. Default 268435456.");
ABSL_FLAG(OptionalText, kv_max_keys, OptionalText{},
          "Keys the job's key-value broker holds (enforced by the "
          "coordinator). Env RANKD_KV_MAX_KEYS. Default 65536.");
ABSL_FLAG(OptionalText, kv_max_keys_per_rank, OptionalText{},
          "Keys one rank may have created that still exist (enforced by the "
          "coordinator). Env RANKD_KV_MAX_KEYS_PER_RANK. Default 4096.");
ABSL_FLAG(OptionalText, max_waiting_gets_per_rank, OptionalText{},
          "Blocking key-value gets one rank may have waiting at once "
          "(enforced by the coordinator, where gets wait). Env "
          "RANKD_MAX_WAITING_GETS_PER_RANK. Default 64.");
ABSL_FLAG(OptionalText, max_streams_per_caller, OptionalText{},
          "Event streams one rank (Watch, enforced by its own daemon) or node "
          "(Subscribe, enforced by the coordinator) may hold open. Env "
          "RANKD_MAX_STREAMS_PER_CALLER. Default 8.");
ABSL_FLAG(OptionalText, max_operator_streams, OptionalText{},
          "Admin.WatchEvents streams the daemon serves at once. Env "
          "RANKD_MAX_OPERATOR_STREAMS. Default 64.");
ABSL_FLAG(OptionalText, kv_max_bytes_per_rank, OptionalText{},
          "Bytes of keys and values one rank may have written that still "
          "exist (enforced by the coordinator), so one rank cannot fill the "
          "broker. Env RANKD_KV_MAX_BYTES_PER_RANK. Default kv_max_bytes / "
          "world_size.");
ABSL_FLAG(OptionalText, max_round_bytes_per_rank, OptionalText{},
          "Bytes of all_gather_words frames one rank's rounds in flight may "
          "hold on this daemon (its node's and the coordinator). Env "
          "RANKD_MAX_ROUND_BYTES_PER_RANK. Default 4194304.");
ABSL_FLAG(OptionalText, max_reflection_streams, OptionalText{},
          "Server reflection streams the daemon serves at once; more are "
          "refused (RESOURCE_EXHAUSTED). Env RANKD_MAX_REFLECTION_STREAMS. "
          "Default 32.");
ABSL_FLAG(OptionalText, max_reflection_requests_per_stream, OptionalText{},
          "Requests one server reflection stream may carry; the next ends "
          "the stream (RESOURCE_EXHAUSTED). Env "
          "RANKD_MAX_REFLECTION_REQUESTS_PER_STREAM. Default 1024.");
ABSL_FLAG(OptionalText, max_reflection_streams_per_peer, OptionalText{},
          "Server reflection streams one peer (a TCP address, an IPv6 /64, "
          "a process on the Unix socket) may hold on one listener; more are "
          "refused (RESOURCE_EXHAUSTED). Env "
          "RANKD_MAX_REFLECTION_STREAMS_PER_PEER. Default 8.");
ABSL_FLAG(OptionalText, kv_shared_prefixes, OptionalText{},
          "Comma-separated key prefixes the job declares shared: keys under "
          "them belong to no rank and are written with compare-and-set "
          "(enforced by the coordinator). Env RANKD_KV_SHARED_PREFIXES. "
          "Default none.");
ABSL_FLAG(OptionalText, issue_rank_tokens, OptionalText{},
          "true to hand this node's rank tokens, once, to the first caller of "
          "Rank.IssueRankTokens on the Unix socket (rankrun beside a sidecar "
          "daemon). Env RANKD_ISSUE_RANK_TOKENS. Default false.");
ABSL_FLAG(OptionalText, round_link_port, OptionalText{},
          "Coordinator only: TCP port of the round link, where nodes send "
          "their all_gather_words rounds as plain frames instead of gRPC "
          "messages (docs/architecture.md), on the --listen host; 0 picks a "
          "free port, off serves none. Never offered with TLS. Env "
          "RANKD_ROUND_LINK_PORT. Default 0.");
ABSL_FLAG(OptionalText, metrics_listen, OptionalText{},
          "HOST:PORT of the Prometheus endpoint (HTTP, /metrics). Env "
          "RANKD_METRICS_LISTEN. Default off.");

// The listeners' bounds (docs/operations.md, "Listeners").
ABSL_FLAG(OptionalText, max_tcp_connections, OptionalText{},
          "TCP connections the public listener holds at once; more are "
          "closed as they arrive. Env RANKD_MAX_TCP_CONNECTIONS. Default "
          "max(256, 2 * nnodes + 64).");
ABSL_FLAG(OptionalText, max_tcp_connections_per_peer, OptionalText{},
          "TCP connections one peer address may hold open at once. Env "
          "RANKD_MAX_TCP_CONNECTIONS_PER_PEER. Default 64.");
ABSL_FLAG(OptionalText, max_tcp_unauthenticated, OptionalText{},
          "TCP connections the public listener holds at once before one of "
          "their calls presents a valid credential; below "
          "--max_tcp_connections. One more closes the oldest of them. Env "
          "RANKD_MAX_TCP_UNAUTHENTICATED. Default max(1, "
          "max_tcp_connections / 2).");
ABSL_FLAG(OptionalText, max_tcp_unauthenticated_per_peer, OptionalText{},
          "TCP connections one peer address (IPv6: one /64) may hold open at "
          "once before one of their calls presents a valid credential. One "
          "more closes the oldest of them. Env "
          "RANKD_MAX_TCP_UNAUTHENTICATED_PER_PEER. Default 8.");
ABSL_FLAG(OptionalText, max_tcp_health_connections, OptionalText{},
          "TCP connections without a credential whose calls are all "
          "grpc.health.v1 (probes, load balancers) kept open past "
          "--tcp_unauthenticated_ms; 0: none. Env "
          "RANKD_MAX_TCP_HEALTH_CONNECTIONS. Default min(32, "
          "max_tcp_connections / 4).");
ABSL_FLAG(OptionalText, max_tcp_health_connections_per_peer, OptionalText{},
          "... of them from one peer address (IPv6: one /64); 0: none. Env "
          "RANKD_MAX_TCP_HEALTH_CONNECTIONS_PER_PEER. Default 4.");
ABSL_FLAG(OptionalText, tcp_unauthenticated_bytes, OptionalText{},
          "Bytes a TCP connection may send before one of its calls presents "
          "a valid credential; beyond them it is closed. Env "
          "RANKD_TCP_UNAUTHENTICATED_BYTES. Default 2097152.");
ABSL_FLAG(OptionalText, tcp_unauthenticated_ms, OptionalText{},
          "How long a TCP connection may stay open before one of its calls "
          "presents a valid credential. Env RANKD_TCP_UNAUTHENTICATED_MS. "
          "Default 10000.");
ABSL_FLAG(OptionalText, tcp_max_connection_idle_ms, OptionalText{},
          "gRPC closes a TCP connection that had no call for this long; 0: "
          "never (gRPC 1.51 keeps a closed connection's memory until this "
          "timer fires). Env RANKD_TCP_MAX_CONNECTION_IDLE_MS. Default 0.");
ABSL_FLAG(OptionalText, tcp_max_connection_age_ms, OptionalText{},
          "gRPC asks a TCP connection this old to go away (its calls may "
          "finish); 0: never (a node's event stream lives as long as the "
          "job). Env RANKD_TCP_MAX_CONNECTION_AGE_MS. Default 0.");
ABSL_FLAG(OptionalText, tcp_memory_bytes, OptionalText{},
          "Memory quota of the TCP listener's gRPC server (its own; the Unix "
          "socket's is apart). Env RANKD_TCP_MEMORY_BYTES. Default 536870912.");
ABSL_FLAG(OptionalText, tcp_max_threads, OptionalText{},
          "Threads the TCP listener's gRPC server may use for synchronous "
          "services. Env RANKD_TCP_MAX_THREADS. Default 64.");
ABSL_FLAG(OptionalText, local_memory_bytes, OptionalText{},
          "Memory quota of the Unix socket's gRPC server. Env "
          "RANKD_LOCAL_MEMORY_BYTES. Default 1073741824.");
ABSL_FLAG(OptionalText, metrics_request_timeout_ms, OptionalText{},
          "How long a metrics connection may take to send its request and "
          "read the answer before it is closed. Env "
          "RANKD_METRICS_REQUEST_TIMEOUT_MS. Default 5000.");
ABSL_FLAG(OptionalText, metrics_max_connections, OptionalText{},
          "Connections the metrics endpoint holds at once; a new one closes "
          "one that was answered, else the one longest stalled (sending its "
          "request or not reading its answer). Env "
          "RANKD_METRICS_MAX_CONNECTIONS. Default 64.");
ABSL_FLAG(OptionalText, metrics_max_connections_per_address, OptionalText{},
          "Connections the metrics endpoint holds from one address (an IPv6 "
          "/64); a new one closes that address's oldest. Env "
          "RANKD_METRICS_MAX_CONNECTIONS_PER_ADDRESS. Default 8.");

namespace rankd {

RawConfig RawConfigFromFlags() {
  RawConfig raw;
  raw.job_id = absl::GetFlag(FLAGS_job_id).text;
  raw.world_size = absl::GetFlag(FLAGS_world_size).text;
  raw.nnodes = absl::GetFlag(FLAGS_nnodes).text;
  raw.node_index = absl::GetFlag(FLAGS_node_index).text;
  raw.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node).text;
  raw.coordinator = absl::GetFlag(FLAGS_coordinator).text;
  raw.listen = absl::GetFlag(FLAGS_listen).text;
  raw.advertise_address = absl::GetFlag(FLAGS_advertise_address).text;
  raw.socket = absl::GetFlag(FLAGS_socket).text;
  raw.tensor_parallel = absl::GetFlag(FLAGS_tensor_parallel).text;
  raw.pipeline_parallel = absl::GetFlag(FLAGS_pipeline_parallel).text;
  raw.expert_parallel = absl::GetFlag(FLAGS_expert_parallel).text;
  raw.heartbeat_interval_ms = absl::GetFlag(FLAGS_heartbeat_interval_ms).text;
  raw.heartbeat_timeout_ms = absl::GetFlag(FLAGS_heartbeat_timeout_ms).text;
  raw.register_timeout_ms = absl::GetFlag(FLAGS_register_timeout_ms).text;
  raw.recovery = absl::GetFlag(FLAGS_recovery).text;
  raw.recovery_deadline_ms = absl::GetFlag(FLAGS_recovery_deadline_ms).text;
  raw.tls_cert = absl::GetFlag(FLAGS_tls_cert).text;
  raw.tls_key = absl::GetFlag(FLAGS_tls_key).text;
  raw.tls_ca = absl::GetFlag(FLAGS_tls_ca).text;
  raw.tls_require_client_cert =
      absl::GetFlag(FLAGS_tls_require_client_cert).text;
  raw.credentials_dir = absl::GetFlag(FLAGS_credentials_dir).text;
  raw.allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated).text;
  raw.admin_kv_read = absl::GetFlag(FLAGS_admin_kv_read).text;
  raw.kv_max_bytes = absl::GetFlag(FLAGS_kv_max_bytes).text;
  raw.kv_max_keys = absl::GetFlag(FLAGS_kv_max_keys).text;
  raw.kv_max_keys_per_rank = absl::GetFlag(FLAGS_kv_max_keys_per_rank).text;
  raw.max_waiting_gets_per_rank =
      absl::GetFlag(FLAGS_max_waiting_gets_per_rank).text;
  raw.max_streams_per_caller = absl::GetFlag(FLAGS_max_streams_per_caller).text;
  raw.max_operator_streams = absl::GetFlag(FLAGS_max_operator_streams).text;
  raw.kv_max_bytes_per_rank = absl::GetFlag(FLAGS_kv_max_bytes_per_rank).text;
  raw.max_round_bytes_per_rank =
      absl::GetFlag(FLAGS_max_round_bytes_per_rank).text;
  raw.max_reflection_streams = absl::GetFlag(FLAGS_max_reflection_streams).text;
  raw.max_reflection_requests_per_stream =
      absl::GetFlag(FLAGS_max_reflection_requests_per_stream).text;
  raw.max_reflection_streams_per_peer =
      absl::GetFlag(FLAGS_max_reflection_streams_per_peer).text;
  raw.kv_shared_prefixes = absl::GetFlag(FLAGS_kv_shared_prefixes).text;
  raw.issue_rank_tokens = absl::GetFlag(FLAGS_issue_rank_tokens).text;
  raw.metrics_listen = absl::GetFlag(FLAGS_metrics_listen).text;
  raw.round_link_port = absl::GetFlag(FLAGS_round_link_port).text;
  raw.max_tcp_connections = absl::GetFlag(FLAGS_max_tcp_connections).text;
  raw.max_tcp_connections_per_peer =
      absl::GetFlag(FLAGS_max_tcp_connections_per_peer).text;
  raw.max_tcp_unauthenticated =
      absl::GetFlag(FLAGS_max_tcp_unauthenticated).text;
  raw.max_tcp_unauthenticated_per_peer =
      absl::GetFlag(FLAGS_max_tcp_unauthenticated_per_peer).text;
  raw.max_tcp_health_connections =
      absl::GetFlag(FLAGS_max_tcp_health_connections).text;
  raw.max_tcp_health_connections_per_peer =
      absl::GetFlag(FLAGS_max_tcp_health_connections_per_peer).text;
  raw.tcp_unauthenticated_bytes =
      absl::GetFlag(FLAGS_tcp_unauthenticated_bytes).text;
  raw.tcp_unauthenticated_ms = absl::GetFlag(FLAGS_tcp_unauthenticated_ms).text;
  raw.tcp_max_connection_idle_ms =
      absl::GetFlag(FLAGS_tcp_max_connection_idle_ms).text;
  raw.tcp_max_connection_age_ms =
      absl::GetFlag(FLAGS_tcp_max_connection_age_ms).text;
  raw.tcp_memory_bytes = absl::GetFlag(FLAGS_tcp_memory_bytes).text;
  raw.tcp_max_threads = absl::GetFlag(FLAGS_tcp_max_threads).text;
  raw.local_memory_bytes = absl::GetFlag(FLAGS_local_memory_bytes).text;
  raw.metrics_request_timeout_ms =
      absl::GetFlag(FLAGS_metrics_request_timeout_ms).text;
  raw.metrics_max_connections =
      absl::GetFlag(FLAGS_metrics_max_connections).text;
  raw.metrics_max_connections_per_address =
      absl::GetFlag(FLAGS_metrics_max_connections_per_address).text;
  return raw;
}

}  // namespace rankd
