// daemon/config.cc: ResolveConfig (daemon/config.h): the stages that
// resolve a daemon's identity, shape, addresses, heartbeat, recovery and
// security from its settings; the limits' stages are in
// daemon/internal/limit_settings.cc, the settings' parsing in
// daemon/internal/setting.cc.
#include "daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "daemon/internal/limit_settings.h"
#include "daemon/internal/setting.h"

namespace rankd {
namespace {

using internal::Default;
using internal::Invalid;
using internal::Number;
using internal::ParseAddress;
using internal::ParseBool;
using internal::ParseOptional;
using internal::ParseUint32;
using internal::Ref;
using internal::RequirePositive;
using internal::ResolveAgreeing;
using internal::Setting;
using internal::Show;

// Kubernetes variables (see config.h).
constexpr char kLwsLeaderAddress[] = "LWS_LEADER_ADDRESS";
constexpr char kLwsGroupSize[] = "LWS_GROUP_SIZE";
constexpr char kLwsWorkerIndex[] = "LWS_WORKER_INDEX";
constexpr char kJobCompletionIndex[] = "JOB_COMPLETION_INDEX";
constexpr char kPodIp[] = "POD_IP";
constexpr char kPodName[] = "POD_NAME";
constexpr char kNodeName[] = "NODE_NAME";
constexpr char kHostname[] = "HOSTNAME";

absl::Status ValidateJobId(const Setting& s) {
  if (!IsJobId(s.value)) {
    return Invalid(absl::StrCat(
        s.Assignment(), " is not a job id: use 1 to 128 of A-Z a-z 0-9 . _ -"));
  }
  return absl::OkStatus();
}

bool IsHost(std::string_view host) {
  return host.find(':') != std::string_view::npos ? IsIpv6Literal(host)
                                                  : IsHostName(host);
}

std::string FirstLabel(std::string_view host) {
  return std::string(host.substr(0, host.find('.')));
}

// Dotted digits, e.g. an IPv4 address; its first label is not a host name.
bool IsNumericHost(std::string_view host) {
  for (char c : host) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.') {
      return false;
    }
  }
  return true;
}

std::string OsHostname() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "";
  return buffer;
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

// Resolves one DaemonConfig in stages, each filling part of `c_` and
// keeping what later stages name in their errors.
class Resolver {
 public:
  Resolver(const RawConfig& flags, const EnvLookup& env)
      : flags_(flags), lookup_(env) {}

  absl::StatusOr<DaemonConfig> Run() {
    for (absl::Status (Resolver::*stage)() :
         {&Resolver::Identity, &Resolver::Sizes, &Resolver::Topology,
          &Resolver::Addresses, &Resolver::Coordinator, &Resolver::Socket,
          &Resolver::Heartbeat, &Resolver::Recovery, &Resolver::Security,
          &Resolver::Limits, &Resolver::Metrics, &Resolver::RoundLink,
          &Resolver::Network}) {
      if (absl::Status s = (this->*stage)(); !s.ok()) return s;
    }
    return c_;
  }

 private:
  std::optional<Setting> Given(const std::optional<std::string>& flag,
                               std::string_view name) const {
    return lookup_.Given(flag, name);
  }
  std::optional<Setting> Kube(std::string_view name) const {
    return lookup_.Kube(name);
  }
  Setting GivenOr(const std::optional<std::string>& flag, std::string_view name,
                  std::string fallback) const {
    return lookup_.GivenOr(flag, name, std::move(fallback));
  }

  // Job id; host, pod and node names.
  absl::Status Identity() {
    std::optional<Setting> hostname = Kube(kHostname);
    c_.hostname = hostname.has_value() ? hostname->value : OsHostname();
    if (std::optional<Setting> s = Kube(kPodName)) c_.pod_name = s->value;
    if (std::optional<Setting> s = Kube(kNodeName)) c_.node_name = s->value;

    const Setting job_id = GivenOr(flags_.job_id, "job_id", kDefaultJobId);
    if (absl::Status s = ValidateJobId(job_id); !s.ok()) return s;
    c_.job_id = job_id.value;
    return absl::OkStatus();
  }

  // nnodes, node_index, world_size, nproc_per_node.
  absl::Status Sizes() {
    absl::StatusOr<Number> nnodes = ResolveAgreeing(
        Given(flags_.nnodes, "nnodes"), {Kube(kLwsGroupSize)}, "nnodes", 1);
    if (!nnodes.ok()) return nnodes.status();
    if (absl::Status s = RequirePositive(nnodes->setting, nnodes->value);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<Number> node_index = ResolveAgreeing(
        Given(flags_.node_index, "node_index"),
        {Kube(kLwsWorkerIndex), Kube(kJobCompletionIndex)}, "node_index", 0);
    if (!node_index.ok()) return node_index.status();
    if (node_index->value >= nnodes->value) {
      return Invalid(absl::StrCat(node_index->setting.Assignment(),
                                  " must be below ", nnodes->Ref()));
    }
    nnodes_ = *nnodes;
    c_.nnodes = nnodes->value;
    c_.node_index = node_index->value;

    absl::StatusOr<std::optional<Number>> world =
        ParseOptional(Given(flags_.world_size, "world_size"));
    if (!world.ok()) return world.status();
    absl::StatusOr<std::optional<Number>> nproc =
        ParseOptional(Given(flags_.nproc_per_node, "nproc_per_node"));
    if (!nproc.ok()) return nproc.status();
    for (const std::optional<Number>* n : {&*world, &*nproc}) {
      if (!n->has_value()) continue;
      if (absl::Status s = RequirePositive((*n)->setting, (*n)->value);
          !s.ok()) {
        return s;
      }
    }
    if (world->has_value() && nproc->has_value()) {
      if (uint64_t{c_.nnodes} * (*nproc)->value != (*world)->value) {
        return Invalid(absl::StrCat((*world)->setting.Assignment(), " is not ",
                                    nnodes_.Ref(), " * ", (*nproc)->Ref()));
      }
    } else if (world->has_value()) {
      if ((*world)->value % c_.nnodes != 0) {
        return Invalid(absl::StrCat((*world)->setting.Assignment(),
                                    " is not divisible by ", nnodes_.Ref(),
                                    "; set --nproc_per_node or fix the sizes"));
      }
      *nproc =
          Number{(*world)->value / c_.nnodes, Default("nproc_per_node", "")};
    } else if (nproc->has_value()) {
      const uint64_t w = uint64_t{c_.nnodes} * (*nproc)->value;
      if (w > kMaxWorldSize) {
        return Invalid(absl::StrCat(nnodes_.Ref(), " * ", (*nproc)->Ref(),
                                    " exceeds the largest world size ",
                                    kMaxWorldSize));
      }
      *world = Number{static_cast<uint32_t>(w), Default("world_size", "")};
    } else {
      return Invalid(
          "set --world_size or --nproc_per_node (or RANKD_WORLD_SIZE / "
          "RANKD_NPROC_PER_NODE)");
    }
    if ((*world)->value > kMaxWorldSize) {
      return Invalid(absl::StrCat((*world)->setting.Assignment(),
                                  " exceeds the largest world size ",
                                  kMaxWorldSize));
    }
    world_ = **world;
    c_.world_size = (*world)->value;
    c_.nproc_per_node = (*nproc)->value;
    return absl::OkStatus();
  }

  // tensor/pipeline/expert degrees; data parallel is the rest.
  absl::Status Topology() {
    const std::pair<const std::optional<std::string>*, const char*> kDegrees[] =
        {{&flags_.tensor_parallel, "tensor_parallel"},
         {&flags_.pipeline_parallel, "pipeline_parallel"},
         {&flags_.expert_parallel, "expert_parallel"}};
    std::vector<Number> degrees;
    for (const auto& [flag, name] : kDegrees) {
      const Setting s = GivenOr(*flag, name, "1");
      absl::StatusOr<uint32_t> v = ParseUint32(s);
      if (!v.ok()) return v.status();
      if (absl::Status st = RequirePositive(s, *v); !st.ok()) return st;
      degrees.push_back(Number{*v, s});
    }
    absl::StatusOr<ParallelTopology> t = TopologyFromDegrees(
        c_.world_size, degrees[0].value, degrees[1].value, degrees[2].value);
    if (!t.ok()) {
      return Invalid(absl::StrCat(degrees[0].Ref(), " * ", degrees[1].Ref(),
                                  " * ", degrees[2].Ref(), " does not divide ",
                                  world_.Ref(),
                                  " (data parallel is the quotient)"));
    }
    c_.topology = *t;
    return absl::OkStatus();
  }

  // Listen and advertise addresses.
  absl::Status Addresses() {
    listen_ = GivenOr(flags_.listen, "listen", kDefaultListenAddress);
    absl::StatusOr<HostPort> listen = ParseAddress(listen_);
    if (!listen.ok()) return listen.status();
    if (listen->port == 0 && c_.nnodes > 1) {
      return Invalid(absl::StrCat(
          listen_.Assignment(),
          " picks a random port, which peers cannot find; use a fixed port "
          "when ",
          nnodes_.Ref(), " > 1"));
    }
    listen_hp_ = *listen;
    c_.listen_address = listen_.value;

    if (std::optional<Setting> s =
            Given(flags_.advertise_address, "advertise_address")) {
      if (absl::Status st = RequireReachable(*s); !st.ok()) return st;
      c_.advertise_address = s->value;
    } else if (!IsWildcardHost(listen_hp_.host)) {
      c_.advertise_address = listen_.value;
    } else if (std::optional<Setting> pod_ip = Kube(kPodIp)) {
      if (!IsHost(pod_ip->value) || IsWildcardHost(pod_ip->value)) {
        return Invalid(absl::StrCat(pod_ip->Assignment(),
                                    " is not an IP address; fix it or set "
                                    "--advertise_address"));
      }
      c_.advertise_address = JoinHostPort(pod_ip->value, listen_hp_.port);
    } else if (IsHostName(c_.hostname)) {
      c_.advertise_address = JoinHostPort(c_.hostname, listen_hp_.port);
    } else {
      return Invalid(
          absl::StrCat("cannot tell peers how to reach this daemon: host name ",
                       Show(c_.hostname),
                       " is unusable and POD_IP is not set; set "
                       "--advertise_address=HOST:PORT"));
    }
    absl::StatusOr<HostPort> advertise = ParseHostPort(c_.advertise_address);
    if (!advertise.ok()) return advertise.status();  // Cannot happen.
    advertise_hp_ = *advertise;
    return absl::OkStatus();
  }

  // An advertised or coordinator address: parses, names a host peers can
  // reach and a real port.
  static absl::Status RequireReachable(const Setting& s) {
    absl::StatusOr<HostPort> hp = ParseAddress(s);
    if (!hp.ok()) return hp.status();
    if (IsWildcardHost(hp->host) || hp->port == 0) {
      return Invalid(
          absl::StrCat(s.Assignment(),
                       " must name a reachable host and a port in 1..65535"));
    }
    return absl::OkStatus();
  }

  // True when `address` (already validated) names this daemon: same port as
  // its advertise address, and a host equal to its advertise host, POD_IP,
  // host name or pod name, or a DNS name whose first label is its host or pod
  // name ("rankd-0.rankd.ns.svc" names pod "rankd-0").
  bool NamesThisDaemon(const HostPort& address) const {
    if (address.port != advertise_hp_.port) return false;
    std::vector<std::string> names = {advertise_hp_.host, c_.hostname,
                                      c_.pod_name};
    if (std::optional<Setting> pod_ip = Kube(kPodIp)) {
      names.push_back(pod_ip->value);
    }
    for (const std::string& name : names) {
      if (!name.empty() && absl::EqualsIgnoreCase(address.host, name)) {
        return true;
      }
    }
    if (IsIpv6Literal(address.host) || IsNumericHost(address.host)) {
      return false;
    }
    const std::string label = FirstLabel(address.host);
    for (const std::string& name : {c_.hostname, c_.pod_name}) {
      if (!name.empty() && absl::EqualsIgnoreCase(label, FirstLabel(name))) {
        return true;
      }
    }
    return false;
  }

  absl::Status Coordinator() {
    if (std::optional<Setting> s = Given(flags_.coordinator, "coordinator")) {
      if (absl::Status st = RequireReachable(*s); !st.ok()) return st;
      c_.is_coordinator = NamesThisDaemon(*ParseHostPort(s->value));
      c_.coordinator_address =
          c_.is_coordinator ? c_.advertise_address : s->value;
    } else if (std::optional<Setting> leader = Kube(kLwsLeaderAddress)) {
      if (!IsHostName(leader->value)) {
        return Invalid(absl::StrCat(leader->Assignment(),
                                    " is not a host name; fix it or set "
                                    "--coordinator=HOST:PORT"));
      }
      if (listen_hp_.port == 0) {
        return Invalid(absl::StrCat(listen_.Assignment(),
                                    " has no fixed port to reach the leader ",
                                    leader->Assignment(), " on"));
      }
      // LeaderWorkerSet's leader is worker 0.
      c_.is_coordinator = c_.node_index == 0;
      c_.coordinator_address =
          c_.is_coordinator ? c_.advertise_address
                            : JoinHostPort(leader->value, listen_hp_.port);
    } else if (c_.node_index == 0) {
      c_.is_coordinator = true;
      c_.coordinator_address = c_.advertise_address;
    } else {
      return Invalid(absl::StrCat("node ", c_.node_index,
                                  " needs --coordinator=HOST:PORT (or ",
                                  kLwsLeaderAddress, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status Socket() {
    const Setting s = GivenOr(flags_.socket, "socket", kDefaultSocketPath);
    if (!s.value.empty()) {
      if (!absl::StartsWith(s.value, "/")) {
        return Invalid(absl::StrCat(s.Assignment(),
                                    " must be an absolute path (or empty to "
                                    "disable the socket)"));
      }
      if (s.value.size() > kMaxSocketPathLength ||
          s.value.find('\0') != std::string::npos) {
        return Invalid(absl::StrCat(s.Assignment(), " is longer than ",
                                    kMaxSocketPathLength,
                                    " bytes, the limit for Unix sockets"));
      }
    }
    c_.socket_path = s.value;
    return absl::OkStatus();
  }

  absl::Status Heartbeat() {
    const Setting si =
        GivenOr(flags_.heartbeat_interval_ms, "heartbeat_interval_ms",
                absl::StrCat(kDefaultHeartbeatIntervalMs));
    const Setting st =
        GivenOr(flags_.heartbeat_timeout_ms, "heartbeat_timeout_ms",
                absl::StrCat(kDefaultHeartbeatTimeoutMs));
    absl::StatusOr<uint32_t> interval = ParseUint32(si);
    if (!interval.ok()) return interval.status();
    absl::StatusOr<uint32_t> timeout = ParseUint32(st);
    if (!timeout.ok()) return timeout.status();
    if (*interval < kMinHeartbeatIntervalMs ||
        *interval > kMaxHeartbeatIntervalMs) {
      return Invalid(absl::StrCat(si.Assignment(), " must be in ",
                                  kMinHeartbeatIntervalMs, "..",
                                  kMaxHeartbeatIntervalMs));
    }
    if (uint64_t{*timeout} <= 2 * uint64_t{*interval}) {
      return Invalid(absl::StrCat(st.Assignment(), " must be more than 2 * ",
                                  Ref(si, *interval)));
    }
    if (*timeout > kMaxHeartbeatTimeoutMs) {
      return Invalid(absl::StrCat(st.Assignment(), " must be at most ",
                                  kMaxHeartbeatTimeoutMs));
    }
    c_.heartbeat_interval = absl::Milliseconds(*interval);
    c_.heartbeat_timeout = absl::Milliseconds(*timeout);
    const Setting sr =
        GivenOr(flags_.register_timeout_ms, "register_timeout_ms",
                absl::StrCat(kDefaultRegisterTimeoutMs));
    absl::StatusOr<uint32_t> register_timeout = ParseUint32(sr);
    if (!register_timeout.ok()) return register_timeout.status();
    if (*register_timeout < kMinRegisterTimeoutMs) {
      return Invalid(absl::StrCat(sr.Assignment(), " must be at least ",
                                  kMinRegisterTimeoutMs));
    }
    c_.register_timeout = absl::Milliseconds(*register_timeout);
    return absl::OkStatus();
  }

  // --recovery (on|off) and its deadline.
  absl::Status Recovery() {
    const Setting s = GivenOr(flags_.recovery, "recovery", "off");
    const std::string v = absl::AsciiStrToLower(s.value);
    if (v != "on" && v != "off" && v != "domain") {
      return Invalid(absl::StrCat(s.Assignment(),
                                  " is not \"on\", \"domain\" or \"off\""));
    }
    c_.recovery = v != "off";
    c_.recovery_by_domain = v == "domain";
    const Setting sd =
        GivenOr(flags_.recovery_deadline_ms, "recovery_deadline_ms",
                absl::StrCat(kDefaultRecoveryDeadlineMs));
    absl::StatusOr<uint32_t> deadline = ParseUint32(sd);
    if (!deadline.ok()) return deadline.status();
    if (*deadline < kMinRecoveryDeadlineMs ||
        *deadline > kMaxRecoveryDeadlineMs) {
      return Invalid(absl::StrCat(sd.Assignment(), " must be in ",
                                  kMinRecoveryDeadlineMs, "..",
                                  kMaxRecoveryDeadlineMs));
    }
    c_.recovery_deadline = absl::Milliseconds(*deadline);
    return absl::OkStatus();
  }

  // TLS files and the credentials folder (names only; nothing is read here).
  absl::Status Security() {
    const Setting cert = GivenOr(flags_.tls_cert, "tls_cert", "");
    const Setting key = GivenOr(flags_.tls_key, "tls_key", "");
    const Setting ca = GivenOr(flags_.tls_ca, "tls_ca", "");
    const Setting require = GivenOr(flags_.tls_require_client_cert,
                                    "tls_require_client_cert", "false");
    absl::StatusOr<bool> require_client_cert = ParseBool(require);
    if (!require_client_cert.ok()) return require_client_cert.status();
    if (!cert.value.empty() && key.value.empty()) {
      return Invalid(absl::StrCat(cert.Assignment(),
                                  " needs --tls_key (its private key)"));
    }
    if (!key.value.empty() && cert.value.empty()) {
      return Invalid(absl::StrCat(key.Assignment(),
                                  " needs --tls_cert (its certificate)"));
    }
    if (!ca.value.empty() && cert.value.empty()) {
      return Invalid(absl::StrCat(
          ca.Assignment(),
          " needs --tls_cert and --tls_key: every daemon serves TLS when any "
          "TLS is configured"));
    }
    if (*require_client_cert && ca.value.empty()) {
      return Invalid(absl::StrCat(
          require.Assignment(),
          " needs --tls_ca (the CA that signs client certificates)"));
    }
    c_.tls.cert_file = cert.value;
    c_.tls.key_file = key.value;
    c_.tls.ca_file = ca.value;
    c_.tls.require_client_cert = *require_client_cert;
    const Setting creds =
        GivenOr(flags_.credentials_dir, "credentials_dir", "");
    const Setting open =
        GivenOr(flags_.allow_unauthenticated, "allow_unauthenticated", "false");
    absl::StatusOr<bool> allow_unauthenticated = ParseBool(open);
    if (!allow_unauthenticated.ok()) return allow_unauthenticated.status();
    if (*allow_unauthenticated && !creds.value.empty()) {
      return Invalid(absl::StrCat(open.Assignment(), " contradicts ",
                                  creds.Assignment(),
                                  ": give one or the other"));
    }
    const Setting kv = GivenOr(flags_.admin_kv_read, "admin_kv_read", "false");
    absl::StatusOr<bool> admin_kv_read = ParseBool(kv);
    if (!admin_kv_read.ok()) return admin_kv_read.status();
    const Setting issue =
        GivenOr(flags_.issue_rank_tokens, "issue_rank_tokens", "false");
    absl::StatusOr<bool> issue_rank_tokens = ParseBool(issue);
    if (!issue_rank_tokens.ok()) return issue_rank_tokens.status();
    c_.credentials_dir = creds.value;
    c_.allow_unauthenticated = *allow_unauthenticated;
    c_.admin_kv_read = *admin_kv_read;
    c_.issue_rank_tokens = *issue_rank_tokens;
    return absl::OkStatus();
  }

  absl::Status Limits() {
    return internal::ResolveCallerLimits(flags_, lookup_, c_.world_size,
                                         &c_.limits, &c_.kv_shared_prefixes);
  }

  absl::Status Metrics() {
    const Setting s = GivenOr(flags_.metrics_listen, "metrics_listen", "");
    if (s.value.empty()) return absl::OkStatus();
    absl::StatusOr<HostPort> hp = ParseAddress(s);
    if (!hp.ok()) return hp.status();
    c_.metrics_address = s.value;
    return absl::OkStatus();
  }

  absl::Status RoundLink() {
    const Setting s = GivenOr(flags_.round_link_port, "round_link_port", "0");
    if (absl::AsciiStrToLower(s.value) == "off") {
      c_.round_link_port = -1;
      return absl::OkStatus();
    }
    absl::StatusOr<uint32_t> port = ParseUint32(s);
    if (!port.ok() || *port > 65535) {
      return Invalid(
          absl::StrCat(s.Assignment(), " is not a port (0..65535) or \"off\""));
    }
    c_.round_link_port = static_cast<int>(*port);
    return absl::OkStatus();
  }

  absl::Status Network() {
    return internal::ResolveNetworkLimits(flags_, lookup_, nnodes_.value,
                                          &c_.network);
  }

  const RawConfig& flags_;
  const internal::SettingLookup lookup_;
  DaemonConfig c_;
  // Kept for later stages' checks and error messages.
  Number nnodes_{};
  Number world_{};
  Setting listen_;
  HostPort listen_hp_;
  HostPort advertise_hp_;
};

}  // namespace

absl::StatusOr<DaemonConfig> ResolveConfig(const RawConfig& flags,
                                           const EnvLookup& env) {
  return Resolver(flags, env).Run();
}

}  // namespace rankd
