// TcpGate: the daemon's public TCP listener, in front of the gRPC server
// that serves it (docs/operations.md, "Listeners"). It binds and accepts
// the connections itself, then hands each to gRPC through
// grpc::experimental::ExternalConnectionAcceptor (with the server's own
// credentials, TLS or not), so that it decides what gRPC 1.51 cannot:
//   - how many connections the listener holds at once: in all, from one
//     address, and before they authenticated: in all and from one address
//     group (an IPv4 address, an IPv6 /64; TcpPeer). A new connection
//     never waits on unauthenticated ones: where they hold a limit, the
//     oldest of them is shut down to make room, so that a node (which
//     authenticates with its first call) always gets in;
//   - what a connection may send before it is known: until one of its calls
//     presents a valid credential (MarkAuthenticated), a connection may send
//     at most `unauthenticated_bytes` (counted by the kernel, TCP_INFO) and
//     stay open at most `unauthenticated_time`; past either it is shut down.
//     gRPC 1.51 buffers a request up to the size its 5-byte prefix declares
//     before any receive limit or handler sees it, and lets a call that
//     never sends its message wait forever, so this is where an
//     unauthenticated caller's requests are bounded;
//   - health checks: a connection whose calls are all grpc.health.v1
//     (load balancers and probes carry no credential) may stay open past
//     `unauthenticated_time`, within a small budget of such connections of
//     its own (in all, per address group); its bytes stay bounded.
// The gate never closes or shuts down a descriptor gRPC owns. While it may
// still act on a connection (not authenticated yet), it holds a duplicate
// of gRPC's descriptor and reads and shuts the socket through that, so a
// number gRPC closed and the kernel gave to another socket is never
// touched; a connection gRPC has closed is noticed by gRPC's number no
// longer naming the socket (inode). Its sweeps read every socket with no
// lock held, so that calls noting or authenticating a connection wait for
// walks of its table, not for a sweep's reads of the sockets. It frees memory
// to the system (malloc_trim) once many connections ended, so that a flood
// leaves the daemon near its size before. Depends on POSIX sockets, gRPC, absl
// and TcpPeer.
#ifndef RANKD_DAEMON_TCP_GATE_H_
#define RANKD_DAEMON_TCP_GATE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/transport/tcp_peer.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"

namespace rankd {

class TcpGate {
 public:
  struct Options {
    // Connections held at once, in all and from one peer address.
    uint32_t max_connections = 256;
    uint32_t max_connections_per_peer = 64;
    // ... of them not yet authenticated: in all (below max_connections, so
    // that there is always room for nodes), and from one address group.
    // One more shuts one of them down (in all: any address's; per group:
    // the group's), as does a new connection to a full listener: the
    // oldest that has sent nothing yet, else the oldest. An honest caller
    // sends as it connects and authenticates with its first call, within
    // milliseconds, so a flood cannot lock it out.
    uint32_t max_unauthenticated = 128;
    uint32_t max_unauthenticated_per_peer = 8;
    // ... of them that called only grpc.health.v1 (NoteCall): in all and
    // from one address group. Past either such a connection keeps the
    // unauthenticated bounds. 0: none.
    uint32_t max_health = 32;
    uint32_t max_health_per_peer = 4;
    // Until a call authenticates: bytes a connection may send, how long it
    // may stay open (a health connection: no time limit). Not enforced when
    // `require_authentication` is false (--allow_unauthenticated: no call
    // ever authenticates).
    uint64_t unauthenticated_bytes = 2u << 20;
    absl::Duration unauthenticated_time = absl::Seconds(10);
    bool require_authentication = true;
    // Tests only: called by each sweep after it read the sockets and before
    // it acts on what it read, with no lock of the gate held.
    std::function<void()> after_reading_sockets;
  };

  // What the gate did so far (logged, and shown by the drills).
  struct Stats {
    uint64_t accepted = 0;
    // Closed on arrival: the listener, or their peer address, held its
    // most and none of it was unauthenticated.
    uint64_t refused_full = 0;
    uint64_t refused_peer = 0;
    // Closed on arrival: the process had no descriptor left for the gate's
    // own (Connection::own).
    uint64_t refused_descriptors = 0;
    // Shut down before authenticating: too many bytes, too long.
    uint64_t shut_bytes = 0;
    uint64_t shut_time = 0;
    // Shut down to make room for a newer connection.
    uint64_t shut_evicted = 0;
    uint32_t open = 0;
    uint32_t unauthenticated = 0;  // health connections not included
    uint32_t health = 0;
  };

  // Binds `address` (HOST:PORT as --listen takes it) and listens. 0.0.0.0
  // and :: listen on every address, IPv4 and IPv6; a name listens on every
  // address it resolves to (localhost: 127.0.0.1 and ::1 where the host
  // has IPv6 loopback), on one port. Unavailable naming the address
  // otherwise.
  static absl::StatusOr<std::unique_ptr<TcpGate>> Listen(
      const std::string& address, Options options);
  // Stops accepting (Stop).
  ~TcpGate();

  TcpGate(const TcpGate&) = delete;
  TcpGate& operator=(const TcpGate&) = delete;

  int port() const { return port_; }
  // How many sockets it listens on (2 for localhost with IPv6 loopback).
  size_t listening_sockets() const { return listen_fds_.size(); }

  // Starts the gate's thread: every connection let in goes to `acceptor`
  // (whose server must be started, and outlive Stop).
  void Serve(
      std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);

  // Stops accepting and closes the listening sockets. Connections already
  // handed to gRPC stay its own. Idempotent.
  void Stop();

  // A call on the connection gRPC names `peer` ("ipv4:10.0.0.1:51234",
  // "ipv6:%5B::1%5D:51234"; ParseGrpcPeer) presented a valid credential:
  // the connection's unauthenticated bounds no longer apply. Other peers
  // are ignored.
  void MarkAuthenticated(absl::string_view peer);

  // A call of `method` ("/grpc.health.v1.Health/Watch") started on the
  // connection gRPC names `peer`. An unauthenticated connection whose
  // calls are all grpc.health.v1, at most 2 at once, becomes a health
  // connection while the health budget has room; one that calls anything
  // else, or more at once, is one no more (for good), and gets
  // `unauthenticated_time` from then on. Returns whether the call was
  // counted (its connection is not authenticated): CallEnded must follow.
  bool NoteCall(absl::string_view peer, absl::string_view method);
  // A call NoteCall counted on `peer` ended.
  void CallEnded(absl::string_view peer);

  // An interceptor for the gRPC server the gate feeds that reports every
  // call to NoteCall, and the end of those it counted to CallEnded. It may
  // outlive the gate (gRPC 1.51 can free a call's context on its own
  // threads after the server is gone): once the gate is destroyed, what it
  // reports goes nowhere.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  MakeInterceptorFactory();

  Stats stats() const;

  // What the interceptor reports through (shared with it; no other use):
  // the gate until its destructor clears it under the writer lock, so no
  // report runs into a gate being destroyed.
  struct CallReports {
    absl::Mutex mu;
    TcpGate* gate ABSL_GUARDED_BY(mu) = nullptr;
  };

 private:
  enum class State { kUnauthenticated, kHealth, kAuthenticated };
  // The gate's own descriptor of a connection (tcp_gate.cc): a duplicate of
  // gRPC's, closed when the last holder lets it go.
  class OwnDescriptor;
  struct Connection {
    ino_t inode = 0;
    // Set exactly while the gate may still shut it down (state not
    // kAuthenticated, not shut; with require_authentication): every read of
    // its bytes and its shutdown go through this, never through gRPC's
    // number. Shared: a sweep reading it outside mu_ keeps it open. While
    // the gate holds it, a socket gRPC closed stays open (and in gRPC's
    // epoll set, which may then see its last events) until the next sweep
    // lets go; the gate lets go at once of a socket it shuts down.
    std::shared_ptr<const OwnDescriptor> own;
    int listener = -1;
    TcpPeer peer;
    // When accepted, or when it stopped being a health connection: its
    // unauthenticated time runs from here.
    absl::Time since;
    State state = State::kUnauthenticated;
    bool ever_other_call = false;  // may not become a health connection
    // Bytes it had sent when last looked at (Sweep, EvictOldest).
    uint64_t received = 0;
    uint32_t calls = 0;  // in flight, counted while unauthenticated
    bool shut = false;   // shut down by the gate; gRPC has yet to close it
  };
  // What the listener holds, as a new connection from `peer` sees it.
  struct Tally {
    uint32_t held = 0;  // every entry, shut ones included
    uint32_t open = 0;  // not shut
    uint32_t unauthenticated = 0;
    uint32_t address = 0;                // open, from the address
    uint32_t group_unauthenticated = 0;  // ... from the address group
  };

  TcpGate(std::vector<int> listen_fds, int wake_fd, int port, Options options);
  void Loop();
  void AcceptAll(int listen_fd) ABSL_LOCKS_EXCLUDED(mu_);
  enum class Room { kMade, kNone, kPruneFirst };
  // Makes room for a connection from `peer`, shutting unauthenticated ones
  // down as the limits say; kNone (and counts why) when there is none.
  // kPruneFirst (nothing done) when a limit that refuses is reached and
  // `pruned` is false: PruneClosed, then ask again.
  Room MakeRoom(const TcpPeer& peer, bool pruned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Tally Count(const TcpPeer& peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops connections gRPC closed; shuts down unauthenticated ones past
  // their bounds. Returns the next sweep's interval.
  absl::Duration Sweep() ABSL_LOCKS_EXCLUDED(mu_);
  // Shuts down a connection in `state` that `matches` and the gate has not
  // shut yet: the oldest that has sent nothing, else the oldest (forgetting
  // those gRPC closed meanwhile); false when there is none.
  // With the health budget full, shuts down the oldest health connection
  // of the groups holding the most, when they hold more than a group of
  // `in_group` would with one more. Whether room was made.
  bool MakeHealthRoom(uint32_t in_group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EvictOldest among the unauthenticated connections of the address
  // groups that hold the most of them. False when there is none.
  bool EvictFromLargestGroup() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename Matches>
  bool EvictOldest(State state, Matches matches)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShutDown(Connection& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the entry of a connection gRPC closed.
  void Forget(absl::flat_hash_map<int, Connection>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a sweep read of one connection, outside mu_.
  struct Look {
    int fd = -1;
    ino_t inode = 0;
    std::shared_ptr<const OwnDescriptor> own;  // null: bytes not read
    bool open = false;  // gRPC's number still names the socket
    uint64_t received = 0;
  };
  // Reads every connection's state (its bytes where `bytes` and the gate
  // may shut it down) with mu_ released between taking the list and
  // returning it.
  std::vector<Look> ReadSockets(bool bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the connections gRPC closed (a system call each, outside mu_).
  void PruneClosed() ABSL_LOCKS_EXCLUDED(mu_);
  // Sets `c`'s state, keeping pending_connections_ (and dropping its own
  // descriptor once authenticated).
  void SetState(Connection& c, State state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The open connection gRPC names `peer`; nullptr when unknown.
  Connection* Find(absl::string_view peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<int> listen_fds_;
  const int wake_fd_;
  const int port_;
  const Options options_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::thread thread_;
  bool stopped_ = false;  // only Stop (one thread) touches it
  // Connections that ended since memory was last given back, when the
  // last one did, and the trims still due (Loop; PruneClosed counts).
  uint64_t ended_since_trim_ = 0;
  absl::Time last_end_ = absl::InfinitePast();
  int trims_due_ = 0;

  const std::shared_ptr<CallReports> call_reports_ =
      std::make_shared<CallReports>();

  mutable absl::Mutex mu_;
  // By file descriptor (gRPC's from hand-over on).
  absl::flat_hash_map<int, Connection> connections_ ABSL_GUARDED_BY(mu_);
  // TcpPeer::key() -> descriptor, for MarkAuthenticated and NoteCall.
  absl::flat_hash_map<std::string, int> by_peer_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Entries not in State::kAuthenticated (written under mu_; read without
  // it by the fast paths of MarkAuthenticated and NoteCall).
  std::atomic<uint32_t> pending_connections_{0};
};

}  // namespace rankd

#endif  // RANKD_DAEMON_TCP_GATE_H_
