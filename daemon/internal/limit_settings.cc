// daemon/internal/limit_settings.cc: see limit_settings.h.
#include "daemon/internal/limit_settings.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/limits.h"

namespace rankd::internal {
namespace {

absl::Status ResolveSharedPrefixes(const RawConfig& flags,
                                   const SettingLookup& lookup,
                                   std::vector<std::string>* shared_prefixes) {
  const Setting s =
      lookup.GivenOr(flags.kv_shared_prefixes, "kv_shared_prefixes", "");
  for (absl::string_view prefix :
       absl::StrSplit(s.value, ',', absl::SkipWhitespace())) {
    prefix = absl::StripAsciiWhitespace(prefix);
    if (prefix.size() > 512) {
      return Invalid(absl::StrCat(
          s.source, ": a shared prefix is longer than a key (512 bytes)"));
    }
    // "r<digits>/" keys belong to that rank (daemon/coordinator/kv_store.h).
    if (prefix.size() >= 2 && prefix[0] == 'r' &&
        absl::ascii_isdigit(prefix[1])) {
      return Invalid(absl::StrCat(
          s.Assignment(), ": '", prefix,
          "' starts like a rank's own keys (r<rank>/...), which are never "
          "shared"));
    }
    shared_prefixes->emplace_back(prefix);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveCallerLimits(const RawConfig& flags,
                                 const SettingLookup& lookup,
                                 uint32_t world_size, CallerLimits* limits,
                                 std::vector<std::string>* shared_prefixes) {
  struct Field {
    const std::optional<std::string>& flag;
    const char* name;
    uint32_t* value;
  };
  CallerLimits& l = *limits;
  for (const Field& f : {
           Field{flags.kv_max_bytes, "kv_max_bytes", &l.kv_max_bytes},
           Field{flags.kv_max_keys, "kv_max_keys", &l.kv_max_keys},
           Field{flags.kv_max_keys_per_rank, "kv_max_keys_per_rank",
                 &l.kv_max_keys_per_rank},
           Field{flags.max_waiting_gets_per_rank, "max_waiting_gets_per_rank",
                 &l.max_waiting_gets_per_rank},
           Field{flags.max_streams_per_caller, "max_streams_per_caller",
                 &l.max_streams_per_caller},
           Field{flags.max_operator_streams, "max_operator_streams",
                 &l.max_operator_streams},
           Field{flags.max_round_bytes_per_rank, "max_round_bytes_per_rank",
                 &l.max_round_bytes_per_rank},
           Field{flags.max_reflection_streams, "max_reflection_streams",
                 &l.max_reflection_streams},
           Field{flags.max_reflection_requests_per_stream,
                 "max_reflection_requests_per_stream",
                 &l.max_reflection_requests_per_stream},
           Field{flags.max_reflection_streams_per_peer,
                 "max_reflection_streams_per_peer",
                 &l.max_reflection_streams_per_peer},
       }) {
    const Setting s = lookup.GivenOr(f.flag, f.name, absl::StrCat(*f.value));
    absl::StatusOr<uint32_t> v = ParseUint32(s);
    if (!v.ok()) return v.status();
    if (auto positive = RequirePositive(s, *v); !positive.ok()) {
      return positive;
    }
    *f.value = *v;
  }
  // Every rank's share fits the broker together by default, so no rank
  // can take room another one is owed.
  l.kv_max_bytes_per_rank =
      std::max<uint32_t>(1, l.kv_max_bytes / std::max(world_size, 1u));
  const Setting per_rank =
      lookup.GivenOr(flags.kv_max_bytes_per_rank, "kv_max_bytes_per_rank",
                     absl::StrCat(l.kv_max_bytes_per_rank));
  absl::StatusOr<uint32_t> v = ParseUint32(per_rank);
  if (!v.ok()) return v.status();
  if (auto positive = RequirePositive(per_rank, *v); !positive.ok()) {
    return positive;
  }
  l.kv_max_bytes_per_rank = *v;
  return ResolveSharedPrefixes(flags, lookup, shared_prefixes);
}

absl::Status ResolveNetworkLimits(const RawConfig& flags,
                                  const SettingLookup& lookup, uint32_t nnodes,
                                  NetworkLimits* network) {
  struct Field {
    const std::optional<std::string>& flag;
    const char* name;
    uint32_t* value;
    bool zero_ok;
    // Values handed on as an int (gRPC's arguments, poll's timeout) stop
    // at INT32_MAX, which is refused above.
    uint32_t most = UINT32_MAX;
  };
  // A flag, or its environment variable, or the default in *f.value.
  auto parse = [&](const Field& f) -> absl::Status {
    const Setting s = lookup.GivenOr(f.flag, f.name, absl::StrCat(*f.value));
    absl::StatusOr<uint32_t> v = ParseUint32(s);
    if (!v.ok()) return v.status();
    if (!f.zero_ok) {
      if (auto positive = RequirePositive(s, *v); !positive.ok()) {
        return positive;
      }
    }
    if (*v > f.most) {
      return Invalid(absl::StrCat(s.Assignment(), " is above ", f.most,
                                  ", the most it may be"));
    }
    *f.value = *v;
    return absl::OkStatus();
  };
  constexpr uint32_t kIntMost = INT32_MAX;
  NetworkLimits& n = *network;
  n.max_tcp_connections =
      std::max<uint32_t>(256, 2 * static_cast<uint32_t>(nnodes) + 64);
  for (const Field& f : {
           Field{flags.max_tcp_connections, "max_tcp_connections",
                 &n.max_tcp_connections, false},
           Field{flags.max_tcp_connections_per_peer,
                 "max_tcp_connections_per_peer",
                 &n.max_tcp_connections_per_peer, false},
           Field{flags.max_tcp_unauthenticated_per_peer,
                 "max_tcp_unauthenticated_per_peer",
                 &n.max_tcp_unauthenticated_per_peer, false},
           Field{flags.tcp_unauthenticated_bytes, "tcp_unauthenticated_bytes",
                 &n.tcp_unauthenticated_bytes, false},
           Field{flags.tcp_unauthenticated_ms, "tcp_unauthenticated_ms",
                 &n.tcp_unauthenticated_ms, false},
           Field{flags.tcp_max_connection_idle_ms, "tcp_max_connection_idle_ms",
                 &n.tcp_max_connection_idle_ms, true, kIntMost},
           Field{flags.tcp_max_connection_age_ms, "tcp_max_connection_age_ms",
                 &n.tcp_max_connection_age_ms, true, kIntMost},
           Field{flags.tcp_memory_bytes, "tcp_memory_bytes",
                 &n.tcp_memory_bytes, false},
           Field{flags.tcp_max_threads, "tcp_max_threads", &n.tcp_max_threads,
                 false, kIntMost},
           Field{flags.local_memory_bytes, "local_memory_bytes",
                 &n.local_memory_bytes, false},
           Field{flags.metrics_request_timeout_ms, "metrics_request_timeout_ms",
                 &n.metrics_request_timeout_ms, false, kIntMost},
           Field{flags.metrics_max_connections, "metrics_max_connections",
                 &n.metrics_max_connections, false},
           Field{flags.metrics_max_connections_per_address,
                 "metrics_max_connections_per_address",
                 &n.metrics_max_connections_per_address, false},
       }) {
    if (auto st = parse(f); !st.ok()) return st;
  }
  // Unauthenticated and health connections: defaults derived from the
  // total, and below it, so that there is always room for nodes.
  const Setting total =
      lookup.GivenOr(flags.max_tcp_connections, "max_tcp_connections",
                     absl::StrCat(n.max_tcp_connections));
  if (n.max_tcp_connections < 2) {
    return Invalid(
        absl::StrCat(total.Assignment(),
                     " must be >= 2 (room for a node beside an unauthenticated "
                     "connection)"));
  }
  n.max_tcp_unauthenticated = std::max<uint32_t>(1, n.max_tcp_connections / 2);
  n.max_tcp_health_connections =
      std::min<uint32_t>(kMaxTcpHealthConnections, n.max_tcp_connections / 4);
  for (const Field& f : {
           Field{flags.max_tcp_unauthenticated, "max_tcp_unauthenticated",
                 &n.max_tcp_unauthenticated, false},
           Field{flags.max_tcp_health_connections, "max_tcp_health_connections",
                 &n.max_tcp_health_connections, true},
           Field{flags.max_tcp_health_connections_per_peer,
                 "max_tcp_health_connections_per_peer",
                 &n.max_tcp_health_connections_per_peer, true},
       }) {
    const Setting s = lookup.GivenOr(f.flag, f.name, absl::StrCat(*f.value));
    if (auto st = parse(f); !st.ok()) return st;
    if (f.value != &n.max_tcp_health_connections_per_peer &&
        *f.value >= n.max_tcp_connections) {
      return Invalid(absl::StrCat(
          s.Assignment(), " must be below ", Ref(total, n.max_tcp_connections),
          ", so that nodes always find room on the listener"));
    }
  }
  // A per-address bound above its total bounds nothing: one address could
  // take every connection. A given one is refused; a default is lowered to
  // the total.
  struct Share {
    const std::optional<std::string>& flag;
    const char* name;
    uint32_t* value;
    const std::optional<std::string>& total_flag;
    const char* total_name;
    uint32_t total;
  };
  for (const Share& share : {
           Share{flags.max_tcp_connections_per_peer,
                 "max_tcp_connections_per_peer",
                 &n.max_tcp_connections_per_peer, flags.max_tcp_connections,
                 "max_tcp_connections", n.max_tcp_connections},
           Share{flags.max_tcp_unauthenticated_per_peer,
                 "max_tcp_unauthenticated_per_peer",
                 &n.max_tcp_unauthenticated_per_peer,
                 flags.max_tcp_unauthenticated, "max_tcp_unauthenticated",
                 n.max_tcp_unauthenticated},
           Share{flags.metrics_max_connections_per_address,
                 "metrics_max_connections_per_address",
                 &n.metrics_max_connections_per_address,
                 flags.metrics_max_connections, "metrics_max_connections",
                 n.metrics_max_connections},
           // (0 health connections is none, whatever the bound per address.)
           Share{flags.max_tcp_health_connections_per_peer,
                 "max_tcp_health_connections_per_peer",
                 &n.max_tcp_health_connections_per_peer,
                 flags.max_tcp_health_connections, "max_tcp_health_connections",
                 n.max_tcp_health_connections},
       }) {
    if (*share.value <= share.total) continue;
    if (share.total == 0 &&
        share.value == &n.max_tcp_health_connections_per_peer) {
      continue;
    }
    const std::optional<Setting> given = lookup.Given(share.flag, share.name);
    if (!given.has_value()) {
      *share.value = share.total;
      continue;
    }
    const Setting total = lookup.GivenOr(share.total_flag, share.total_name,
                                         absl::StrCat(share.total));
    return Invalid(absl::StrCat(given->Assignment(), " must be at most ",
                                Ref(total, share.total),
                                ": one address may not hold more than all"));
  }
  return absl::OkStatus();
}

}  // namespace rankd::internal
