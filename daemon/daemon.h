// Daemon: one running rankd process's parts wired together: the deadline
// timer, the Coordinator (when this daemon coordinates), the link to the
// coordinator, the NodeAgent, two gRPC servers (each with the Rank, Peer,
// Admin, reflection and grpc.health.v1 services, its own memory quota,
// completion queues and threads): one for the public TCP listener, whose
// connections TcpGate (tcp_gate.h) accepts and bounds, one for the Unix
// socket's ranks; and on the coordinator the round link server
// (round_link_server.h) when TLS is off. docs/operations.md ("Listeners")
// says how they are kept apart.
//
// Health: service "" is SERVING while the process runs (liveness);
// service "readiness" is SERVING once the node is registered with the
// coordinator and until shutdown or job failure.
//
// Metrics: with --metrics_listen, a Prometheus endpoint (daemon/metrics.h)
// serves /metrics over HTTP. Depends on everything in daemon/.
#ifndef RANKD_DAEMON_DAEMON_H_
#define RANKD_DAEMON_DAEMON_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/deadline_timer.h"
#include "daemon/metrics.h"
#include "daemon/node/coordinator_link.h"
#include "daemon/node/node_agent.h"
#include "daemon/transport/local_socket.h"
#include "daemon/transport/reflection_service.h"
#include "daemon/transport/round_link_server.h"
#include "daemon/transport/services.h"
#include "daemon/transport/tcp_gate.h"
#include "grpcpp/grpcpp.h"

namespace rankd {

class Daemon {
 public:
  // Starts the listeners and begins registration with the coordinator.
  // Fails when a listener cannot be bound, credentials cannot be read, or
  // the Unix socket path is held by a live daemon.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(DaemonConfig config);
  ~Daemon();

  // Blocks until registration finished; returns its outcome (a daemon
  // whose registration failed should exit non-zero).
  absl::Status WaitRegistered(absl::Duration timeout);

  // Drains: tells the coordinator this node leaves, fails pending waits,
  // closes streams, stops the server (bounded by `grace`). Idempotent.
  void Shutdown(const std::string& reason, absl::Duration grace);

  // TCP port actually bound (useful with --listen=HOST:0).
  int tcp_port() const { return tcp_port_; }
  // Port of the coordinator's round link; 0 when it serves none.
  int round_link_port() const {
    return round_link_server_ == nullptr ? 0 : round_link_server_->port();
  }
  // Port of the metrics endpoint; 0 when --metrics_listen is off.
  int metrics_port() const {
    return metrics_ == nullptr ? 0 : metrics_->port();
  }
  const DaemonConfig& config() const { return config_; }
  // Why the coordinator fenced this node daemon (--recovery=on; see
  // NodeAgent::fenced()), or empty. Once set, the daemon has failed its
  // ranks and main() ends it with kExitDaemonFenced (common/exit_codes.h).
  std::string fenced() const;

 private:
  explicit Daemon(DaemonConfig config);
  // Starts everything, in the order of the steps below; on error the
  // daemon is destroyed with whatever started.
  absl::Status Init();
  // The Authenticator (tokens, the credentials folder); warns when running
  // without authentication.
  absl::Status LoadCredentials();
  // The metrics model, when --metrics_listen is set (not yet served).
  void CreateMetrics();
  // The coordinator (on node 0) or the link to it, and the node agent.
  absl::Status CreateJobState();
  // With a --socket: the round-slots folder and server (the local fast
  // path; without them rounds stay on gRPC) and the Unix socket.
  absl::Status OpenLocalEndpoints();
  // The Rank, Peer and Admin services and both reflection services.
  void CreateServices();
  // The public TCP listener, bounded by its TcpGate.
  absl::Status ListenTcp();
  // The metrics endpoint, when configured.
  absl::Status ServeMetrics();
  // The TCP listener's gRPC server, with its own memory quota and limits.
  absl::Status ServeTcp(
      const std::shared_ptr<grpc::ServerCredentials>& credentials);
  // The Unix socket's gRPC server, with its own memory quota.
  absl::Status ServeUnixSocket();
  void OnRegistered(absl::Status status);
  // On the coordinator without TLS, unless --round_link_port=off.
  absl::Status StartRoundLink();
  void WatchJobHealth(const v1::JobEvent& event);
  // What both gRPC servers share: message, stream and metadata limits,
  // keepalive.
  void AddCommonArguments(grpc::ServerBuilder& builder) const;
  // The Rank, Peer and Admin services, `reflection` (the server's own),
  // and the metrics interceptor on `builder`; `gate`: the TCP server's,
  // told of every call (nullptr for the Unix socket's server).
  void RegisterServices(grpc::ServerBuilder& builder,
                        ReflectionService* reflection, TcpGate* gate);
  DaemonMetrics::HttpOptions MetricsOptions() const;
  // Sets a grpc.health.v1 service's status on both servers.
  void SetHealth(const std::string& service, bool serving);
  // The readiness service: MarkReady once registered; EndReadiness when
  // the job failed or the daemon shuts down, after which it stays down.
  void MarkReady();
  void EndReadiness();
  // The job as the metrics endpoint reports it.
  JobSnapshot Snapshot() const;

  const DaemonConfig config_;
  // Set by Init before any service exists; the services point at it.
  std::optional<Authenticator> auth_;
  std::unique_ptr<DeadlineTimer> timer_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorLink> link_;
  std::unique_ptr<NodeAgent> agent_;
  // Null without a Unix socket. After agent_: its watchers call the agent.
  std::unique_ptr<RoundSlotServer> round_slots_;
  // The key-value channel's socket (null without a Unix socket, or when
  // its path would be too long). After agent_, whose methods it calls.
  std::unique_ptr<KvSocket> kv_socket_;
  std::unique_ptr<RankService> rank_service_;
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<AdminService> admin_service_;
  // Server reflection of the TCP server, and of the Unix socket's (null
  // without a socket): each its own budget of streams.
  std::unique_ptr<ReflectionService> reflection_service_;
  std::unique_ptr<ReflectionService> local_reflection_service_;
  // Accepts and bounds server_'s TCP connections. Declared before the
  // server, so it outlives it: the server's interceptor tells it of every
  // call, up to the call's end.
  std::unique_ptr<TcpGate> tcp_gate_;
  // The public TCP listener's server.
  std::unique_ptr<grpc::Server> server_;
  // The Unix socket's server (null without a socket).
  std::unique_ptr<grpc::Server> local_server_;
  // The Unix socket (null without one): accepted here, served by
  // local_server_.
  std::unique_ptr<LocalSocket> local_socket_;
  // The coordinator's round link (nullptr: none offered).
  std::unique_ptr<RoundLinkServer> round_link_server_;
  int tcp_port_ = 0;
  EventLog::SubscriptionId log_subscription_ = 0;
  // The readiness service: serving once registered, until the job fails or
  // the daemon shuts down, for good (MarkReady after that does nothing).
  absl::Mutex readiness_mu_;
  bool readiness_ended_ ABSL_GUARDED_BY(readiness_mu_) = false;
  // Whether WatchJobHealth saw an event yet (it runs one event at a time).
  std::atomic<bool> saw_event_{false};

  absl::Mutex mu_;
  bool registration_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status registration_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;

  // Declared last: destroyed first, so no scrape outlives what it reads.
  std::unique_ptr<DaemonMetrics> metrics_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_DAEMON_H_
