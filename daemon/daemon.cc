#include "daemon/daemon.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "common/grpc_deadline.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "common/round_slots.h"
#include "daemon/coordinator/event_log.h"
#include "daemon/descriptor_limit.h"
#include "daemon/log.h"
#include "daemon/node/remote_coordinator.h"
#include "daemon/transport/security.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"

namespace rankd {
namespace {

constexpr char kReadinessService[] = "readiness";

std::string ReadBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

// True when something accepts connections on the Unix socket at `path`.
bool SocketIsLive(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool live =
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return live;
}

// Makes the socket's folder and removes a stale socket file left by a
// daemon that died. Refuses to take over a socket a live daemon serves.
absl::Status PrepareSocketPath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create the folder of --socket=", path, ": ", ec.message()));
    }
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket=", path,
                     " exists and is not a socket; refusing to remove it"));
  }
  if (SocketIsLive(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--socket=", path,
        " is served by another live process (another rankd?); choose another "
        "path"));
  }
  ::unlink(path.c_str());
  return absl::OkStatus();
}

JobSpec SpecFromConfig(const DaemonConfig& config) {
  JobSpec spec;
  spec.job_id = config.job_id;
  spec.world_size = config.world_size;
  spec.nnodes = config.nnodes;
  spec.nproc_per_node = config.nproc_per_node;
  spec.topology = config.topology;
  spec.heartbeat_interval = config.heartbeat_interval;
  spec.heartbeat_timeout = config.heartbeat_timeout;
  spec.recovery = config.recovery;
  spec.recovery_by_domain = config.recovery_by_domain;
  spec.recovery_deadline = config.recovery_deadline;
  spec.limits = config.limits;
  spec.kv_shared_prefixes = config.kv_shared_prefixes;
  return spec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonConfig config) {
  auto daemon = std::unique_ptr<Daemon>(new Daemon(std::move(config)));
  if (auto s = daemon->Init(); !s.ok()) return s;
  return daemon;
}

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {}

Daemon::~Daemon() { Shutdown("daemon destroyed", absl::Seconds(2)); }

absl::Status Daemon::Init() {
  // Who may call, first: every service and listener below checks callers.
  if (auto s = LoadCredentials(); !s.ok()) return s;
  auto server_credentials = MakeServerCredentials(config_.tls);
  if (!server_credentials.ok()) return server_credentials.status();
  timer_ = std::make_unique<DeadlineTimer>();
  CreateMetrics();
  // The job's state (coordinator or link to it, node agent) before anything
  // that serves it.
  if (auto s = CreateJobState(); !s.ok()) return s;
  // The local fast path and the Unix socket before the Rank service that
  // hands them to ranks.
  if (auto s = OpenLocalEndpoints(); !s.ok()) return s;
  CreateServices();
  // The round link before the TCP listener: a node learns its port when it
  // registers, so a node registering as soon as the coordinator serves
  // must find it offered (else its rounds and key-value calls would stay
  // on gRPC for good).
  if (auto s = StartRoundLink(); !s.ok()) return s;
  // Listeners last: nothing is served before everything a call reaches
  // exists.
  if (auto s = ListenTcp(); !s.ok()) return s;
  if (auto s = ServeMetrics(); !s.ok()) return s;
  if (auto s = ServeTcp(*server_credentials); !s.ok()) return s;
  if (auto s = ServeUnixSocket(); !s.ok()) return s;
  // Then healthy but not ready, and registration with the coordinator.
  SetHealth("", true);
  SetHealth(kReadinessService, false);

  log_subscription_ = agent_->events().Subscribe(
      0, [this](const v1::JobEvent& e) { WatchJobHealth(e); });
  agent_->Start(MonotonicNow() + config_.register_timeout,
                [this](absl::Status s) { OnRegistered(std::move(s)); });
  return absl::OkStatus();
}

absl::Status Daemon::LoadCredentials() {
  auto auth = Authenticator::Load(config_);
  if (!auth.ok()) return auth.status();
  auth_ = *std::move(auth);
  if (!auth_->enabled()) {
    Log("WARNING: running WITHOUT AUTHENTICATION (--allow_unauthenticated): "
        "anyone who can reach the TCP listener can change or fail this job");
  }
  if (auth_->legacy_rank_token_ignored()) {
    Log(absl::StrCat("note: ", config_.credentials_dir, "/", kRankTokenFile,
                     " is ignored: each rank presents a token of its own "
                     "(docs/operations.md, \"Credentials\")"));
  }
  return absl::OkStatus();
}

void Daemon::CreateMetrics() {
  if (!config_.metrics_address.empty()) {
    metrics_ = std::make_unique<DaemonMetrics>(
        DaemonMetrics::Identity{config_.job_id, config_.node_index,
                                config_.is_coordinator},
        [this] { return Snapshot(); });
  }
}

absl::Status Daemon::CreateJobState() {
  JobSpec spec = SpecFromConfig(config_);
  if (config_.is_coordinator) {
    auto coordinator = Coordinator::Create(spec, timer_.get());
    if (!coordinator.ok()) return coordinator.status();
    coordinator_ = *std::move(coordinator);
    link_ = std::make_unique<LocalCoordinatorLink>(
        coordinator_.get(), timer_.get(), config_.advertise_address);
  } else {
    auto channel_credentials = MakeChannelCredentials(config_.tls);
    if (!channel_credentials.ok()) return channel_credentials.status();
    auto remote = std::make_unique<RemoteCoordinatorLink>(
        config_.coordinator_address, *channel_credentials, auth_->node_token(),
        config_.heartbeat_interval, config_.heartbeat_timeout, timer_.get());
    if (metrics_ != nullptr) {
      remote->set_heartbeat_observer(
          [metrics = metrics_.get()](absl::StatusCode code) {
            metrics->ObserveHeartbeatSent(code);
          });
    }
    link_ = std::move(remote);
  }

  v1::NodeInfo node;
  node.set_node_index(config_.node_index);
  node.set_hostname(config_.hostname);
  node.set_address(config_.advertise_address);
  node.set_boot_id(ReadBootId());
  node.set_local_ranks(config_.nproc_per_node);
  node.set_daemon_incarnation(NewIncarnation());
  node.set_pod_name(config_.pod_name);
  auto agent = NodeAgent::Create(spec, node, link_.get(), timer_.get());
  if (!agent.ok()) return agent.status();
  agent_ = *std::move(agent);
  return absl::OkStatus();
}

namespace {

// The folder of the round-slots files and the key-value channel's socket:
// made if missing, and then it must be this daemon's own directory (not a
// link, not one another user made first in a shared folder such as /tmp),
// made owner-and-group only, enter but not list for the group.
absl::Status PrepareRoundsFolder(const std::string& folder) {
  if (::mkdir(folder.c_str(), 0710) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make ", folder, ": ", strerror(errno)));
  }
  const int fd =
      ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open ", folder, " as a directory: ", strerror(errno)));
  }
  struct stat st;
  absl::Status status;
  if (::fstat(fd, &st) != 0) {
    status = absl::FailedPreconditionError(
        absl::StrCat("cannot stat ", folder, ": ", strerror(errno)));
  } else if (st.st_uid != ::geteuid()) {
    status = absl::PermissionDeniedError(
        absl::StrCat(folder, " belongs to uid ", st.st_uid,
                     ", not to this daemon's (uid ", ::geteuid(), ")"));
  } else if (::fchmod(fd, 0710) != 0) {
    status = absl::FailedPreconditionError(
        absl::StrCat("cannot chmod ", folder, ": ", strerror(errno)));
  }
  ::close(fd);
  return status;
}

}  // namespace

absl::Status Daemon::OpenLocalEndpoints() {
  // The socket's folder first (it may not exist yet after a reboot: /run is
  // a tmpfs), then the rounds' folder in it.
  if (!config_.socket_path.empty()) {
    if (auto s = PrepareSocketPath(config_.socket_path); !s.ok()) return s;
  }
  if (!config_.socket_path.empty()) {
    // The socket is made owner-and-group only (LocalSocket); so are
    // the round-slots files, in a folder next to it that the group may
    // enter but not list: a file's name is known only to whoever opened it.
    const std::string folder = absl::StrCat(
        std::filesystem::path(config_.socket_path).parent_path().string(),
        "/.rankd-rounds");
    if (absl::Status prepared = PrepareRoundsFolder(folder); !prepared.ok()) {
      Log(absl::StrCat(prepared.message(),
                       "; ranks' rounds and key-value "
                       "calls stay on gRPC"));
    } else {
      if (const size_t stale = RoundSlotServer::RemoveStaleFiles(folder);
          stale > 0) {
        Log(absl::StrCat("removed ", stale, " round-slots file(s) in ", folder,
                         " that a killed daemon left behind"));
      }
      round_slots_ = std::make_unique<RoundSlotServer>(
          agent_.get(), folder, 0660,
          [this](absl::StatusCode code, absl::Duration elapsed) {
            if (metrics_ != nullptr) metrics_->ObserveRound(code, elapsed);
          },
          // Polling only where rounds finish on this node: between nodes
          // the next request cannot come sooner than a network round trip,
          // and the poller would take CPU from the round link's thread.
          RoundSlotServer::Options{
              .spin = config_.nnodes == 1
                          ? DefaultRoundSpin(config_.nproc_per_node)
                          : absl::ZeroDuration()});
    }
  }
  if (!config_.socket_path.empty()) {
    // Accepted by LocalSocket, not gRPC, so that every connection's process
    // is known and a rank can be bound to the connection it joined on.
    // Within the open files the daemon planned for its ranks' connections
    // (4 each) and part of its slack (daemon/descriptor_limit.h).
    LocalSocket::Options local_options;
    local_options.max_connections = 4 * config_.nproc_per_node + 128;
    local_options.max_per_process = 64;
    auto local = LocalSocket::Listen(config_.socket_path, local_options);
    if (!local.ok()) return local.status();
    local_socket_ = *std::move(local);
  }
  if (round_slots_ != nullptr) {
    // The key-value channel's socket, in the same folder that the group
    // may enter but not list, named after the daemon's socket so daemons
    // sharing a folder do not collide. Without it, ranks' key-value calls
    // stay on gRPC.
    const std::filesystem::path socket(config_.socket_path);
    const std::string path =
        absl::StrCat(socket.parent_path().string(), "/.rankd-rounds/",
                     socket.filename().string(), ".kv");
    KvSocket::Options options;
    if (metrics_ != nullptr) {
      // The channel's calls count as the Rank calls they stand for.
      options.observe = [metrics = metrics_.get()](absl::string_view method,
                                                   absl::StatusCode code,
                                                   absl::Duration elapsed) {
        metrics->ObserveRpc(method, code, elapsed);
      };
    }
    auto kv = KvSocket::Listen(path, agent_.get(), std::move(options));
    if (kv.ok()) {
      kv_socket_ = *std::move(kv);
    } else {
      Log(absl::StrCat(kv.status().message(),
                       "; ranks' key-value calls stay on gRPC"));
    }
  }
  return absl::OkStatus();
}

void Daemon::CreateServices() {
  rank_service_ = std::make_unique<RankService>(
      agent_.get(), &*auth_, round_slots_.get(), local_socket_.get(),
      config_.issue_rank_tokens);
  rank_service_->set_kv_socket(kv_socket_.get());
  peer_service_ = std::make_unique<PeerService>(
      coordinator_.get(), config_.coordinator_address, config_.node_index,
      &*auth_, timer_.get());
  admin_service_ =
      std::make_unique<AdminService>(agent_.get(), coordinator_.get(), &*auth_,
                                     config_.limits.max_operator_streams);

  grpc::EnableDefaultHealthCheckService(true);
  // gRPC serves grpc.health.v1 without a protobuf descriptor; naming ours
  // links it in, so reflection (grpcurl) can describe the service too.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  // One reflection service per gRPC server, each with its own budget of
  // streams, so that peers on the TCP port cannot use up the local
  // operator's; on the Unix socket a peer is a process.
  const std::vector<std::string> described = {
      v1::Rank::service_full_name(), v1::Peer::service_full_name(),
      v1::Admin::service_full_name(), "grpc.health.v1.Health"};
  const ReflectionService::Limits reflection_limits{
      config_.limits.max_reflection_streams,
      config_.limits.max_reflection_requests_per_stream,
      config_.limits.max_reflection_streams_per_peer};
  reflection_service_ =
      std::make_unique<ReflectionService>(described, reflection_limits);
  if (local_socket_ != nullptr) {
    local_reflection_service_ = std::make_unique<ReflectionService>(
        described, reflection_limits, nullptr,
        [socket = local_socket_.get()](const std::string& grpc_peer) {
          std::optional<LocalPeer> peer = socket->PeerOf(grpc_peer);
          if (!peer.has_value()) return grpc_peer;
          // A process not visible here is told apart by its connection.
          return peer->pid != 0 ? absl::StrCat("pid:", peer->pid)
                                : absl::StrCat("connection:", peer->connection);
        });
  }
}

absl::Status Daemon::ListenTcp() {
  // Two gRPC servers, each with its own memory quota, completion queues and
  // threads (docs/operations.md, "Listeners"): the public TCP listener's,
  // and the Unix socket's for this node's ranks, so that nothing sent to
  // the TCP port can take what the local ranks' calls need.
  const NetworkLimits& net = config_.network;
  TcpGate::Options gate;
  gate.max_connections = net.max_tcp_connections;
  gate.max_connections_per_peer = net.max_tcp_connections_per_peer;
  gate.max_unauthenticated = net.max_tcp_unauthenticated;
  gate.max_unauthenticated_per_peer = net.max_tcp_unauthenticated_per_peer;
  gate.max_health = net.max_tcp_health_connections;
  gate.max_health_per_peer = net.max_tcp_health_connections_per_peer;
  gate.unauthenticated_bytes = net.tcp_unauthenticated_bytes;
  gate.unauthenticated_time = absl::Milliseconds(net.tcp_unauthenticated_ms);
  gate.require_authentication = auth_->enabled();
  auto tcp_gate = TcpGate::Listen(config_.listen_address, gate);
  if (!tcp_gate.ok()) return tcp_gate.status();
  tcp_gate_ = *std::move(tcp_gate);
  tcp_port_ = tcp_gate_->port();
  auth_->set_authenticated_observer(
      [gate = tcp_gate_.get()](const std::string& peer) {
        gate->MarkAuthenticated(peer);
      });
  return absl::OkStatus();
}

absl::Status Daemon::ServeMetrics() {
  if (metrics_ != nullptr) {
    if (auto s = metrics_->Serve(config_.metrics_address, MetricsOptions());
        !s.ok()) {
      return s;
    }
    Log(absl::StrCat("metrics on http://", config_.metrics_address,
                     "/metrics (port ", metrics_->port(), ")"));
  }
  return absl::OkStatus();
}

absl::Status Daemon::ServeTcp(
    const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  const NetworkLimits& net = config_.network;
  grpc::ServerBuilder builder;
  AddCommonArguments(builder);
  // The 64 MiB messages the Peer service's rounds need; a connection none
  // of whose calls has authenticated gets no more than
  // --tcp_unauthenticated_bytes in all (TcpGate).
  grpc::ResourceQuota tcp_quota("rankd-tcp");
  tcp_quota.Resize(net.tcp_memory_bytes);
  tcp_quota.SetMaxThreads(static_cast<int>(net.tcp_max_threads));
  builder.SetResourceQuota(tcp_quota);
  if (net.tcp_max_connection_idle_ms > 0) {
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_IDLE_MS,
        static_cast<int>(net.tcp_max_connection_idle_ms));
  }
  if (net.tcp_max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(net.tcp_max_connection_age_ms));
  }
  // A connection that has not finished its handshake (TLS, HTTP/2
  // settings) is dropped, after TcpGate's own limit (twice it, and a
  // second): the gate shuts an unauthenticated connection down while gRPC
  // still holds its descriptor, never one gRPC may have closed and the
  // kernel given to another socket.
  builder.AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(std::min<uint64_t>(
          2 * uint64_t{net.tcp_unauthenticated_ms} + 1000, INT32_MAX)));
  auto acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
      credentials);
  RegisterServices(builder, reflection_service_.get(), tcp_gate_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve --listen=", config_.listen_address));
  }
  tcp_gate_->Serve(std::move(acceptor));
  return absl::OkStatus();
}

absl::Status Daemon::ServeUnixSocket() {
  if (local_socket_ == nullptr) return absl::OkStatus();
  grpc::ServerBuilder local;
  AddCommonArguments(local);
  grpc::ResourceQuota local_quota("rankd-local");
  local_quota.Resize(config_.network.local_memory_bytes);
  local.SetResourceQuota(local_quota);
  RegisterServices(local, local_reflection_service_.get(),
                   /*gate=*/nullptr);
  local_server_ = local.BuildAndStart();
  if (local_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve the Unix socket --socket=", config_.socket_path));
  }
  local_socket_->Serve(local_server_.get());
  if (kv_socket_ != nullptr) kv_socket_->Serve();
  return absl::OkStatus();
}

void Daemon::AddCommonArguments(grpc::ServerBuilder& builder) const {
  // What one caller can make a server hold (docs/operations.md, "Limits").
  builder.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONCURRENT_STREAMS,
      MaxCallsPerConnection(config_.nproc_per_node, config_.limits));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  // Let clients ping every second (they use keepalive to notice a dead
  // daemon) and ping them too, so a vanished client is noticed. A ping may
  // take as long as a heartbeat to be answered: a coordinator busy with a
  // thousand nodes must not drop healthy ones sooner than a silent node
  // would be declared lost.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             KeepaliveTimeoutMs(config_.heartbeat_timeout));
}

void Daemon::RegisterServices(grpc::ServerBuilder& builder,
                              ReflectionService* reflection, TcpGate* gate) {
  builder.RegisterService(rank_service_.get());
  builder.RegisterService(peer_service_.get());
  builder.RegisterService(admin_service_.get());
  builder.RegisterService(reflection);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  // The gate learns which connections call only grpc.health.v1.
  if (gate != nullptr) interceptors.push_back(gate->MakeInterceptorFactory());
  if (metrics_ != nullptr) {
    interceptors.push_back(metrics_->MakeInterceptorFactory());
  }
  if (!interceptors.empty()) {
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
}

DaemonMetrics::HttpOptions Daemon::MetricsOptions() const {
  DaemonMetrics::HttpOptions options;
  options.request_timeout =
      absl::Milliseconds(config_.network.metrics_request_timeout_ms);
  options.max_connections = config_.network.metrics_max_connections;
  options.max_connections_per_address =
      config_.network.metrics_max_connections_per_address;
  return options;
}

void Daemon::SetHealth(const std::string& service, bool serving) {
  for (grpc::Server* server : {server_.get(), local_server_.get()}) {
    if (server != nullptr) {
      server->GetHealthCheckService()->SetServingStatus(service, serving);
    }
  }
}

void Daemon::MarkReady() {
  absl::MutexLock lock(&readiness_mu_);
  // A failure or shutdown seen first (the registration's answer can come
  // after the job's failure event) is not undone.
  if (readiness_ended_) return;
  SetHealth(kReadinessService, true);
}

void Daemon::EndReadiness() {
  absl::MutexLock lock(&readiness_mu_);
  readiness_ended_ = true;
  SetHealth(kReadinessService, false);
}

absl::Status Daemon::StartRoundLink() {
  if (coordinator_ == nullptr || config_.round_link_port < 0) {
    return absl::OkStatus();
  }
  if (config_.tls.enabled()) {
    // The link has no TLS of its own; rounds stay on the Rounds stream.
    Log("round link off: TLS is on, so nodes' rounds use the TLS-protected "
        "Rounds stream");
    return absl::OkStatus();
  }
  auto listen = ParseHostPort(config_.listen_address);
  if (!listen.ok()) return listen.status();
  RoundLinkServer::Handlers handlers = peer_service_->RoundLinkHandlers();
  if (metrics_ != nullptr) {
    // Forwarded key-value calls count as the Peer calls they stand for.
    handlers.observe = [metrics = metrics_.get()](absl::string_view method,
                                                  absl::StatusCode code,
                                                  absl::Duration elapsed) {
      metrics->ObserveRpc(method, code, elapsed);
    };
  }
  RoundLinkServer::Limits limits;
  limits.max_handshakes = std::min<size_t>(RoundLinkHandshakes(config_),
                                           RoundLinkServer::kMaxHandshakes);
  auto server = RoundLinkServer::Start(listen->host, config_.round_link_port,
                                       std::move(handlers), limits);
  if (!server.ok()) {
    return absl::UnavailableError(absl::StrCat(
        server.status().message(), " (--round_link_port=off serves none)"));
  }
  round_link_server_ = *std::move(server);
  peer_service_->set_round_link_port(round_link_server_->port());
  Log(absl::StrCat("round link on port ", round_link_server_->port()));
  return absl::OkStatus();
}

void Daemon::WatchJobHealth(const v1::JobEvent& event) {
  if (!saw_event_.exchange(true) && event.sequence() > 1) {
    // This daemon registered after the coordinator's log dropped the job's
    // first events: its mirror, and what it answers from it, lacks them.
    Log(absl::StrCat(
        "this daemon's view of the job starts at event #", event.sequence(),
        ": the coordinator no longer keeps events 1-", event.sequence() - 1,
        " (it keeps the last ", EventLog::kDefaultCapacity,
        "), so status, members and topology answered here may lack nodes "
        "and ranks those events named; the coordinator's node answers in "
        "full"));
  }
  Log(DescribeEvent(event));
  if (metrics_ != nullptr) metrics_->ObserveEvent(event);
  if (event.kind() == v1::EVENT_KIND_JOB_FAILED) EndReadiness();
}

JobSnapshot Daemon::Snapshot() const {
  JobSnapshot snapshot;
  if (agent_ == nullptr) return snapshot;
  snapshot.job = agent_->LocalJob();
  if (coordinator_ != nullptr) {
    // The coordinator's answers are authoritative (as in Admin/GetJob).
    v1::JobStatus local = snapshot.job;
    snapshot.job = coordinator_->GetJob();
    snapshot.job.set_served_by_node(local.served_by_node());
    snapshot.job.set_served_by_coordinator(true);
    snapshot.job.set_coordinator_address(local.coordinator_address());
    snapshot.members = coordinator_->ListMembers();
  } else {
    snapshot.members = agent_->LocalMembers();
  }
  snapshot.ready =
      agent_->registered() && snapshot.job.state() != v1::JOB_STATE_FAILED;
  return snapshot;
}

std::string Daemon::fenced() const { return agent_->fenced(); }

void Daemon::OnRegistered(absl::Status status) {
  if (status.ok()) {
    Log(absl::StrCat("node ", config_.node_index, " (daemon incarnation ",
                     absl::Hex(agent_->daemon_incarnation()),
                     ") registered with the coordinator at ",
                     link_->coordinator_address()));
    MarkReady();
  } else {
    Log(absl::StrCat("registration failed: ", status.ToString()));
  }
  absl::MutexLock lock(&mu_);
  registration_done_ = true;
  registration_ = std::move(status);
}

absl::Status Daemon::WaitRegistered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&registration_done_), timeout)) {
    return absl::DeadlineExceededError("registration still in progress");
  }
  return registration_;
}

void Daemon::Shutdown(const std::string& reason, absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  EndReadiness();
  // No new local connections while draining; those open keep being served.
  if (local_socket_ != nullptr) local_socket_->Stop();
  if (agent_ != nullptr) {
    Log(absl::StrCat("shutting down: ", reason));
    agent_->Shutdown(reason, grace / 2);
    agent_->events().Unsubscribe(log_subscription_);
  }
  // After the agent answered every pending round: ranks waiting on their
  // slots find their answers, then see the files closed.
  if (round_slots_ != nullptr) round_slots_->Stop();
  // Likewise: blocked gets were answered; the channels close.
  if (kv_socket_ != nullptr) kv_socket_->Stop();
  if (coordinator_ != nullptr) coordinator_->BeginShutdown();
  // After the coordinator answered what waits, so nodes hear why.
  if (round_link_server_ != nullptr) round_link_server_->Stop();
  // No new TCP connections from here; those open finish their calls.
  if (tcp_gate_ != nullptr) tcp_gate_->Stop();
  {
    const gpr_timespec deadline = GrpcDeadlineAfter(grace / 2);
    for (grpc::Server* server : {server_.get(), local_server_.get()}) {
      if (server != nullptr) server->Shutdown(deadline);
    }
    for (grpc::Server* server : {server_.get(), local_server_.get()}) {
      if (server != nullptr) server->Wait();
    }
  }
  // Stop the timer before the objects its callbacks reference go away.
  timer_.reset();
  if (!config_.socket_path.empty()) ::unlink(config_.socket_path.c_str());
}

}  // namespace rankd
