// daemon/config_description.cc: DescribeConfig (daemon/config.h), the
// one line a daemon logs at start with every setting it resolved.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "daemon/config.h"

namespace rankd {

std::string DescribeConfig(const DaemonConfig& c) {
  const std::string tls = !c.tls.enabled()            ? "off"
                          : c.tls.require_client_cert ? "mutual"
                          : !c.tls.ca_file.empty()    ? "on+ca"
                                                      : "on";
  auto or_dash = [](const std::string& s) {
    return s.empty() ? std::string("-") : s;
  };
  return absl::StrCat(
      "job=", c.job_id, " world_size=", c.world_size, " nnodes=", c.nnodes,
      " nproc_per_node=", c.nproc_per_node, " node_index=", c.node_index,
      " tp=", c.topology.tensor, " pp=", c.topology.pipeline,
      " ep=", c.topology.expert, " dp=", c.topology.data,
      " role=", c.is_coordinator ? "coordinator" : "worker",
      " coordinator=", c.coordinator_address, " listen=", c.listen_address,
      " advertise=", c.advertise_address,
      " socket=", c.socket_path.empty() ? "off" : c.socket_path,
      " heartbeat=", absl::FormatDuration(c.heartbeat_interval), "/",
      absl::FormatDuration(c.heartbeat_timeout), " recovery=",
      c.recovery ? absl::StrCat(c.recovery_by_domain ? "domain/" : "on/",
                                absl::FormatDuration(c.recovery_deadline))
                 : "off",
      " tls=", tls, " credentials=",
      c.allow_unauthenticated     ? "NONE (--allow_unauthenticated)"
      : c.credentials_dir.empty() ? "-"
                                  : c.credentials_dir,
      " admin_kv_read=", c.admin_kv_read ? "on" : "off",
      " kv_limit=", c.limits.kv_max_bytes, "B,", c.limits.kv_max_keys, "keys,",
      c.limits.kv_max_keys_per_rank,
      "keys/rank waiting_gets=", c.limits.max_waiting_gets_per_rank,
      "/rank streams=", c.limits.max_streams_per_caller, "/caller,",
      c.limits.max_operator_streams, "/operators",
      " kv_per_rank=", c.limits.kv_max_bytes_per_rank, "B",
      " round_bytes=", c.limits.max_round_bytes_per_rank, "B/rank",
      " kv_shared=",
      c.kv_shared_prefixes.empty() ? "-"
                                   : absl::StrJoin(c.kv_shared_prefixes, ","),
      " issue_rank_tokens=", c.issue_rank_tokens ? "on" : "off",
      " metrics=", c.metrics_address.empty() ? "off" : c.metrics_address,
      " round_link=",
      !c.is_coordinator        ? "-"
      : c.round_link_port < 0  ? "off"
      : c.tls.enabled()        ? "off(tls)"
      : c.round_link_port == 0 ? "any-port"
                               : absl::StrCat(c.round_link_port),
      " reflection=", c.limits.max_reflection_streams, "streams,",
      c.limits.max_reflection_requests_per_stream, "requests/stream,",
      c.limits.max_reflection_streams_per_peer, "/peer",
      " tcp=", c.network.max_tcp_connections, "conns,",
      c.network.max_tcp_connections_per_peer, "/peer,",
      c.network.max_tcp_unauthenticated, "unauthenticated,",
      c.network.max_tcp_unauthenticated_per_peer, "/peer-unauthenticated,",
      c.network.max_tcp_health_connections, "health,",
      c.network.max_tcp_health_connections_per_peer, "/peer-health,",
      c.network.tcp_unauthenticated_bytes, "B/",
      c.network.tcp_unauthenticated_ms, "ms-unauthenticated,",
      c.network.tcp_memory_bytes, "B", " host=", or_dash(c.hostname),
      " pod=", or_dash(c.pod_name), " node=", or_dash(c.node_name));
}

}  // namespace rankd
