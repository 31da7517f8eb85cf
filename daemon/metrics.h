// DaemonMetrics: the daemon's Prometheus metrics (prometheus-cpp), served
// over HTTP at http://<--metrics_listen>/metrics by an event-loop endpoint
// of the daemon's own (http_endpoint.h), which idle or half-sent
// connections cannot hold.
//
// Two kinds of series:
//   - read at scrape time from the daemon's view of the job (JobSnapshot):
//     job state, world size, members and nodes by state, rounds completed,
//     heartbeat ages, readiness;
//   - counted as things happen: all_gather_words calls and their latency,
//     key-value operations and their latency, heartbeats sent and received,
//     lost ranks and nodes, job events.
// Every name and label is listed in docs/kubernetes.md ("Metrics").
//
// Counting hooks are cheap and thread-safe. The scrape callback runs on the
// endpoint's thread; it must be thread-safe and must stay valid until the
// DaemonMetrics is destroyed. Depends on prometheus-cpp, gRPC (for the
// server interceptor), abseil and the protos.
#ifndef RANKD_DAEMON_METRICS_H_
#define RANKD_DAEMON_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/http_endpoint.h"
#include "grpcpp/support/server_interceptor.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

// The daemon's view of its job, read at every scrape.
struct JobSnapshot {
  v1::JobStatus job;
  v1::MemberList members;
  // True when the readiness health service is SERVING.
  bool ready = false;
};

class DaemonMetrics {
 public:
  // Who this daemon is; exported as labels of rankd_info.
  struct Identity {
    std::string job_id;
    uint32_t node_index = 0;
    bool coordinator = false;
  };

  // Metrics without an HTTP endpoint (Render() gives the exposition text).
  DaemonMetrics(Identity identity, std::function<JobSnapshot()> snapshot);
  ~DaemonMetrics();
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // How the endpoint treats connections (--metrics_request_timeout_ms,
  // --metrics_max_connections, --metrics_max_connections_per_address).
  using HttpOptions = HttpEndpoint::Options;

  // Starts serving /metrics on `address` (HOST:PORT, port 0 picks one).
  // Returns Unavailable naming --metrics_listen when it cannot bind.
  absl::Status Serve(const std::string& address,
                     HttpOptions options = HttpOptions());
  // Port the endpoint listens on; 0 before Serve().
  int port() const { return port_; }

  // The Prometheus text exposition of every series, as /metrics serves it.
  std::string Render() const;

  // --- Counting hooks ---

  // One finished RPC of the Rank or Peer service. `method` is the full
  // gRPC method name ("/rankd.v1.Rank/AllGatherWords").
  void ObserveRpc(absl::string_view method, absl::StatusCode code,
                  absl::Duration elapsed);
  // One all_gather_words round a local rank ran through its round slots
  // (rounds over gRPC are counted by ObserveRpc).
  void ObserveRound(absl::StatusCode code, absl::Duration elapsed);
  // One heartbeat this daemon sent to its coordinator, with its outcome.
  void ObserveHeartbeatSent(absl::StatusCode code);
  // One job event from the daemon's event log (each event once).
  void ObserveEvent(const v1::JobEvent& event);

  // A gRPC server interceptor factory feeding ObserveRpc; add it to the
  // ServerBuilder. This object must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  MakeInterceptorFactory();

 private:
  class Instruments;
  class SnapshotCollector;

  std::shared_ptr<Instruments> instruments_;
  std::shared_ptr<SnapshotCollector> collector_;
  // What the endpoint counts of its connections (rendered with the rest).
  // Before endpoint_: the endpoint writes it until it is destroyed.
  HttpEndpoint::Counters http_counters_;
  std::unique_ptr<HttpEndpoint> endpoint_;
  int port_ = 0;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_METRICS_H_
