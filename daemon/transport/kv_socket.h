// KvSocket: the daemon's key-value channel, a second Unix socket on which
// a joined rank sends its key-value calls (KvSet, KvGet, KvAdd, KvDelete,
// KvCount) as frames (common/kv_frame.h) instead of one gRPC unary call
// each: a call costs a write and a read on each side rather than an HTTP/2
// stream, protobuf-wrapped status and the completion-queue hops.
//
// Who may use it is exactly who may make the same calls on the Rank
// service: a rank asks Rank.OpenKvChannel on the connection it joined on
// (that call passes the service's checks: its own rank token, the
// connection it is bound to, a joined member) and gets a one-time ticket.
// It then connects here and presents the ticket in its first frame; the
// connecting process must be the one behind that gRPC connection
// (SO_PEERCRED). From then on each request passes the same two checks as a
// Rank call (CheckTokenRank with the ticket's token rank, and
// NodeAgent::CheckCaller with the connection the ticket was asked on, so a
// rank that left and joined elsewhere loses its channel) before it reaches
// the same NodeAgent method; replies carry the agent's status unchanged.
// A connection that has not presented a valid ticket gets nothing but the
// refusal, and is closed.
//
// Bounds: connections at once (and of those, ones still to present their
// ticket, each for at most the handshake timeout, with a hello of at most
// kMaxKvTicketBytes), frames of at most kMaxKvFramePayloadBytes, one ticket
// and one open channel per rank (a rank's new channel closes its old one),
// and per connection requests in flight and replies the rank has not read:
// the socket is not read while a connection has its fill of either (back-
// pressure, not an error), so a rank that stops reading its replies stops
// having its requests read, and holds at most about
// max_queued_reply_bytes plus a reply per request in flight. A blocked
// get's deadline is the request's own (bounded by the agent), and a
// connection that closes cancels its waits at once.
//
// Depends on NodeAgent, daemon/transport/security, common/kv_frame, the
// protos, absl and POSIX sockets.
#ifndef RANKD_DAEMON_TRANSPORT_KV_SOCKET_H_
#define RANKD_DAEMON_TRANSPORT_KV_SOCKET_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/kv_frame.h"
#include "daemon/node/node_agent.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {

class KvConnection;

class KvSocket {
 public:
  struct Options {
    // Connections held at once; more are closed as they arrive.
    uint32_t max_connections = 1024;
    // Of those, connections that have not presented a ticket yet.
    uint32_t max_handshakes = 32;
    // How long a connection has to present its ticket, and how long a
    // ticket stays valid.
    absl::Duration handshake_timeout = absl::Seconds(5);
    // Requests one connection may have in flight (its blocked gets
    // included).
    uint32_t max_requests_in_flight = 32;
    // Replies one connection has not taken from its socket yet, in bytes,
    // beyond which its requests are not read.
    size_t max_queued_reply_bytes = 4 << 20;
    // Called once per request with the Rank method it stands for
    // ("/rankd.v1.Rank/KvSet"), its outcome and how long it took, as the
    // gRPC path's metrics interceptor sees a call (DaemonMetrics::
    // ObserveRpc); may be empty. Runs on the channel's threads.
    std::function<void(absl::string_view method, absl::StatusCode code,
                       absl::Duration elapsed)>
        observe;
  };

  // Binds `path` (mode 0660; a stale socket file there is replaced,
  // anything else is FailedPrecondition naming it) and listens. `agent`
  // must outlive the socket.
  static absl::StatusOr<std::unique_ptr<KvSocket>> Listen(
      const std::string& path, NodeAgent* agent, Options options);
  static absl::StatusOr<std::unique_ptr<KvSocket>> Listen(
      const std::string& path, NodeAgent* agent) {
    return Listen(path, agent, Options());
  }
  // Stop.
  ~KvSocket();
  KvSocket(const KvSocket&) = delete;
  KvSocket& operator=(const KvSocket&) = delete;

  // Starts accepting (one thread, and one per connection).
  void Serve();
  // Stops accepting, closes every connection (cancelling its blocked gets:
  // call after the agent answered what it could), joins the threads and
  // removes the socket file. Idempotent.
  void Stop();

  // Rank.OpenKvChannel, for a call that passed the Rank service's checks
  // for `rank`: its token named `token_rank` (nullopt: authentication is
  // off) and it came on `caller`'s connection. A fresh ticket, replacing
  // any earlier one of `rank`; Internal when the random generator fails.
  // `error_reasons`: the rank's library reads an error's reason
  // (OpenKvChannelRequest.error_reasons); the channel's replies carry none
  // otherwise.
  absl::StatusOr<v1::OpenKvChannelResponse> Open(
      uint32_t rank, std::optional<uint32_t> token_rank,
      const RankCaller& caller, bool error_reasons);

  const std::string& path() const { return path_; }

 private:
  // What a ticket grants: the identity of the Rank call that asked for it.
  struct Binding {
    uint32_t rank = 0;
    std::optional<uint32_t> token_rank;
    RankCaller caller;
    bool error_reasons = false;
  };
  struct Ticket {
    Binding binding;
    absl::Time expires;
  };
  struct Peer {
    int32_t pid = 0;
    uint32_t uid = 0;
  };
  struct Served {
    std::shared_ptr<KvConnection> connection;
    std::thread thread;
  };

  KvSocket(std::string path, int listen_fd, int wake_fd, NodeAgent* agent,
           Options options);
  void AcceptLoop();
  // Forgets connections that closed; returns their threads, for the
  // caller to join without the lock (a closed connection's thread may
  // still be finishing a call, which must not hold up Open and Redeem).
  std::vector<std::thread> ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One connection's life: the ticket, then its requests.
  void ServeConnection(const std::shared_ptr<KvConnection>& connection,
                       Peer peer);
  // The binding the ticket in a hello grants to `peer`, or why not (the
  // ticket is used up either way).
  absl::StatusOr<Binding> Redeem(absl::string_view ticket, Peer peer);
  // Records `connection` as `rank`'s channel; closes the rank's earlier
  // one, if still open.
  void AdoptChannel(uint32_t rank,
                    const std::shared_ptr<KvConnection>& connection);
  // Checks and runs one request, answering on `connection`.
  void Dispatch(const std::shared_ptr<KvConnection>& connection,
                const Binding& binding, KvFrameKind kind, uint64_t id,
                const std::string& payload);

  const std::string path_;
  const int listen_fd_;
  const int wake_fd_;  // eventfd that ends AcceptLoop
  NodeAgent* const agent_;
  const Options options_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;  // only Stop (one thread) touches it
  std::atomic<uint32_t> handshakes_{0};

  absl::Mutex mu_;
  uint64_t next_connection_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Served> served_ ABSL_GUARDED_BY(mu_);
  // By ticket, and each rank's current ticket.
  absl::flat_hash_map<std::string, Ticket> tickets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::string> ticket_of_rank_
      ABSL_GUARDED_BY(mu_);
  // Each rank's open channel.
  absl::flat_hash_map<uint32_t, std::weak_ptr<KvConnection>> channel_of_rank_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_TRANSPORT_KV_SOCKET_H_
