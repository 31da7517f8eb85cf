// RoundLinkServer: the coordinator's end of the round links
// (round_link_protocol.h). One thread accepts nodes' connections, shakes
// hands and reads contributions and forwarded key-value calls with epoll;
// outcomes and key-value replies are written by whichever thread finishes
// a round or a call, straight to the socket when it has room (most of the
// time), queued for the thread otherwise. A round's one encoding
// (WordRounds::Outcome::Encoded) goes to every node by reference, followed
// by its tag, as on the Rounds stream (round_stream_reactor.h). A
// key-value call is handed to Handlers::kv with a cancellation that the
// node's kKvCancel frame, or the link's end, cancels: a blocked get waits
// in the coordinator, never on the server's thread.
//
// Bounds (what a connection can make the coordinator hold):
//   - every connection is accepted as soon as it arrives and greeted at
//     once; each has kRoundLinkHandshakeTimeout to answer, with frames of
//     at most kMaxRoundLinkHandshakeBytes. At most Limits'
//     max_handshakes connections are in their handshake at once, and
//     max_handshakes_per_address of one address group: one more closes
//     the oldest handshake of its own group, or the oldest of the groups
//     holding the most (running out of file descriptors closes the oldest
//     of all),
//     and at most kMaxAcceptsPerWake are accepted between reads. So
//     connections that never answer (hundreds queued on the port) cannot
//     keep a node's link from opening: a node answers its greeting within
//     a round trip, long before it is the oldest (issue 36 item 11;
//     earlier, connections beyond the bound waited unaccepted in the
//     listen backlog, and a node queued behind 400 silent ones timed out
//     waiting for its greeting).
//   - at most kMaxReadBytesPerWake read from one connection before the
//     thread turns to the others.
//   - one open link per node: a node's newer link closes its older one;
//     at most kMaxLinks links in all.
//   - contribution frames of at most kMaxGrpcMessageBytes (common/limits.h),
//     as on gRPC; at most kMaxQueuedOutcomes outcomes waiting for a node
//     that does not read, then its link is closed (RESOURCE_EXHAUSTED).
//   - key-value request frames of at most kMaxRoundLinkKvRequestBytes,
//     refused on their header; at most kMaxKvCallsPerRoundLink calls of a
//     link in flight (its node refuses more itself, so one more is a
//     misbehaving node: its link is closed, RESOURCE_EXHAUSTED); at most
//     kMaxRoundLinkQueuedKvReplyBytes of replies queued for a node that
//     does not read, then its link is closed.
// A frame that is not what the protocol expects, a contribution refused by
// `authorize`, or a key-value request that reuses an id in flight, closes
// the link after a last outcome saying why. A key-value call the
// coordinator refuses (not the node's rank, not a member) is answered with
// that error, as the Peer service's unary call would be, and the link stays.
//
// Depends on absl, WordRounds (the shared outcome), the round link
// protocol, daemon/call_cancellation, common/limits and the protos. Knows
// nothing of gRPC.
#ifndef RANKD_DAEMON_ROUND_LINK_SERVER_H_
#define RANKD_DAEMON_ROUND_LINK_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/call_cancellation.h"
#include "daemon/coordinator/word_rounds.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

class RoundLinkServer {
 public:
  // The most handshakes at once that Limits may ask for.
  static constexpr size_t kMaxHandshakes = 1024;

  // What unauthenticated connections may hold (the daemon's plan of open
  // files counts them: daemon/descriptor_limit.h).
  struct Limits {
    // Connections in their handshake at once; one more closes the oldest
    // handshake of the address groups holding the most (so connections
    // from a few addresses cannot push out a node's, and from many, only
    // ones older than it). At most
    // kMaxHandshakes. The daemon's: RoundLinkHandshakes, room for every
    // node connecting at the same moment and more.
    size_t max_handshakes = kMaxHandshakes;
    // Of one address group (an IPv4 address, an IPv6 /64: TcpPeer::group)
    // at once; one more closes that group's oldest handshake. A node
    // opens one link at a time.
    size_t max_handshakes_per_address = 8;
  };
  // Bytes read from one connection per wake of the thread, so a node
  // sending without pause cannot keep the thread from the others (epoll is
  // level-triggered: the rest is read at the next wake).
  static constexpr size_t kMaxReadBytesPerWake = 256 << 10;
  // Connections accepted per wake of the thread, so a stream of new
  // connections cannot keep it from reading the ones it has.
  static constexpr size_t kMaxAcceptsPerWake = 64;
  // Links of any kind at once (with nodes named, one per node anyway).
  static constexpr size_t kMaxLinks = 65536;
  static constexpr size_t kMaxQueuedOutcomes = 4096;

  // Who a link acts as once admitted: the node it speaks for (nullopt: any;
  // a node has one link) and the coordinator's proof for the welcome.
  struct Admission {
    std::optional<uint32_t> node;
    std::string proof;
  };

  // Answers a forwarded key-value call: the reply's code, message and
  // response (its id is the server's to set).
  using KvDone = std::function<void(v1::KvLinkReply reply)>;

  struct Handlers {
    // Admits the node that sent `hello` (proof checked against
    // `node_transcript`; the coordinator's own proof made over
    // `coordinator_transcript`), or says why not. Runs on the server's
    // thread.
    std::function<absl::StatusOr<Admission>(
        const v1::RoundLinkHello& hello, absl::string_view node_transcript,
        absl::string_view coordinator_transcript)>
        admit;
    // OK when a link admitted as `node` may send `request`.
    std::function<absl::Status(std::optional<uint32_t> node,
                               const v1::ContributeWordsRequest& request)>
        authorize;
    // Hands a contribution to the coordinator; `done` runs exactly once, on
    // any thread.
    std::function<void(const v1::ContributeWordsRequest& request,
                       WordRounds::SharedDone done)>
        contribute;
    // Runs a key-value call forwarded by a link admitted as `node` (its
    // oneof is set): checks it as the Peer service's unary call for that
    // node would, and answers what that call would. `done` runs exactly
    // once, on any thread; `cancellation` is cancelled when the node
    // cancels the call or its link closes. Must not block (a waiting get
    // waits in the coordinator). Unset: a key-value request closes the
    // link (UNIMPLEMENTED).
    std::function<void(std::optional<uint32_t> node,
                       const v1::KvLinkRequest& request,
                       const CancellationRef& cancellation, KvDone done)>
        kv;
    // Optional: counts each finished key-value call as the Peer call it
    // stands for ("/rankd.v1.Peer/KvSet"), with its code and time from
    // receipt to answer. Any thread.
    std::function<void(absl::string_view method, absl::StatusCode code,
                       absl::Duration elapsed)>
        observe;
  };

  // Listens on `host`:`port` (port 0: any free port) and starts the
  // thread. Unavailable naming the address when it cannot listen;
  // InvalidArgument for limits of zero or above kMaxHandshakes.
  static absl::StatusOr<std::unique_ptr<RoundLinkServer>> Start(
      const std::string& host, int port, Handlers handlers, Limits limits);
  // With the default Limits.
  static absl::StatusOr<std::unique_ptr<RoundLinkServer>> Start(
      const std::string& host, int port, Handlers handlers) {
    return Start(host, port, std::move(handlers), Limits());
  }

  // Stop()s.
  ~RoundLinkServer();
  RoundLinkServer(const RoundLinkServer&) = delete;
  RoundLinkServer& operator=(const RoundLinkServer&) = delete;

  // The port it listens on.
  int port() const { return port_; }

  // Links open now (admitted and not yet closed). For tests and metrics.
  size_t open_links() const;

  // Closes the listener and every link and joins the thread; outcomes of
  // rounds that finish later are dropped. Idempotent.
  void Stop();

 private:
  class Connection;

  RoundLinkServer(int listen_fd, int port, Handlers handlers, Limits limits);
  void Run();
  void Accept();
  // Closes the connection that has been in its handshake longest of those
  // `which` picks; false when none is.
  bool CloseOldestHandshake(absl::FunctionRef<bool(const Connection&)> which);
  // `c`'s handshake ended (admitted, refused or closed).
  void EndHandshake(Connection& c);
  // Reads what `c` sent and handles every whole frame; false when `c` is
  // to be closed.
  bool OnReadable(const std::shared_ptr<Connection>& c);
  bool OnHello(const std::shared_ptr<Connection>& c, absl::string_view frame);
  // A frame after the handshake: checks its type and hands its message on.
  bool OnFrame(const std::shared_ptr<Connection>& c, absl::string_view frame);
  bool OnContribution(const std::shared_ptr<Connection>& c,
                      absl::string_view frame);
  bool OnKvRequest(const std::shared_ptr<Connection>& c,
                   absl::string_view frame);
  bool OnKvCancel(const std::shared_ptr<Connection>& c,
                  absl::string_view frame);
  void Close(int fd);
  void ExpireHandshakes();

  const int listen_fd_;
  const int port_;
  const Handlers handlers_;
  const Limits limits_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: Stop wakes the thread through it
  std::thread thread_;

  // Only the server's thread touches these.
  std::unique_ptr<char[]> read_buffer_;
  std::map<int, std::shared_ptr<Connection>> connections_;
  std::map<uint32_t, int> link_of_node_;  // admitted links with a node
  size_t handshaking_ = 0;
  // Connections in their handshake by address group ("" when unknown).
  std::map<std::string, size_t> handshakes_of_group_;
  // Connections in their handshake, oldest first (so also by deadline).
  // A connection's entry goes when its handshake ends (EndHandshake), so
  // the list holds exactly the handshakes under way, however many were
  // closed to make room.
  std::list<std::weak_ptr<Connection>> handshakes_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  size_t open_links_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_ROUND_LINK_SERVER_H_
