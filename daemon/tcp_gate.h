// TcpGate: the daemon's public TCP listener, in front of the gRPC server
// that serves it (docs/operations.md, "Listeners"). It binds and accepts
// the connections itself, then hands each to gRPC through
// grpc::experimental::ExternalConnectionAcceptor (with the server's own
// credentials, TLS or not), so that it decides what gRPC 1.51 cannot:
//   - how many connections the listener holds at once, in all, from one
//     peer address, and from one peer address before they authenticated:
//     one beyond any is closed as it arrives;
//   - what a connection may send before it is known: until one of its calls
//     presents a valid credential (MarkAuthenticated), a connection may send
//     at most `unauthenticated_bytes` (counted by the kernel, TCP_INFO) and
//     stay open at most `unauthenticated_time`; past either it is shut down.
//     gRPC 1.51 buffers a request up to the size its 5-byte prefix declares
//     before any receive limit or handler sees it, and lets a call that
//     never sends its message wait forever, so this is where an
//     unauthenticated caller's requests are bounded.
// A connection gRPC has closed is noticed by its descriptor no longer
// naming the same socket (inode); the gate never closes a descriptor gRPC
// owns, it only shuts the socket down. It freed memory to the system
// (malloc_trim) once many connections ended, so that a flood leaves the daemon
// near its size before. Depends on POSIX sockets, gRPC and absl.
#ifndef RANKD_DAEMON_TCP_GATE_H_
#define RANKD_DAEMON_TCP_GATE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_builder.h"

namespace rankd {

class TcpGate {
 public:
  struct Options {
    // Connections held at once, in all and from one peer address.
    uint32_t max_connections = 256;
    uint32_t max_connections_per_peer = 64;
    // ... of them from one peer address not yet authenticated. One more
    // from that address shuts the oldest of them down (an honest caller
    // authenticates with its first call, within milliseconds), so that a
    // flood from an address cannot lock out an honest caller sharing it.
    uint32_t max_unauthenticated_per_peer = 8;
    // Until a call authenticates: bytes a connection may send, how long it
    // may stay open. Not enforced when `require_authentication` is false
    // (--allow_unauthenticated: no call ever authenticates).
    uint64_t unauthenticated_bytes = 2u << 20;
    absl::Duration unauthenticated_time = absl::Seconds(10);
    bool require_authentication = true;
  };

  // What the gate did so far (logged, and shown by the drills).
  struct Stats {
    uint64_t accepted = 0;
    // Closed on arrival: the listener, or their peer, held its most.
    uint64_t refused_full = 0;
    uint64_t refused_peer = 0;
    // Shut down before authenticating: too many bytes, too long.
    uint64_t shut_bytes = 0;
    uint64_t shut_time = 0;
    // Shut down for a newer unauthenticated connection from its address.
    uint64_t shut_evicted = 0;
    uint32_t open = 0;
    uint32_t unauthenticated = 0;
  };

  // Binds `address` (HOST:PORT as --listen takes it; 0.0.0.0 and :: listen
  // on every address, IPv4 and IPv6) and listens. Unavailable naming the
  // address otherwise.
  static absl::StatusOr<std::unique_ptr<TcpGate>> Listen(
      const std::string& address, Options options);
  // Stops accepting (Stop).
  ~TcpGate();

  TcpGate(const TcpGate&) = delete;
  TcpGate& operator=(const TcpGate&) = delete;

  int port() const { return port_; }

  // Starts the gate's thread: every connection let in goes to `acceptor`
  // (whose server must be started, and outlive Stop).
  void Serve(
      std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);

  // Stops accepting and closes the listening socket. Connections already
  // handed to gRPC stay its own. Idempotent.
  void Stop();

  // A call on the connection gRPC names `peer` ("ipv4:10.0.0.1:51234",
  // "ipv6:%5B::1%5D:51234") presented a valid credential: the connection's
  // unauthenticated bounds no longer apply. Other peers are ignored.
  void MarkAuthenticated(absl::string_view peer);

  Stats stats() const;

 private:
  struct Connection {
    ino_t inode = 0;
    std::string host;  // the peer address, as inet_ntop writes it
    uint16_t port = 0;
    absl::Time accepted;
    bool authenticated = false;
    bool shut = false;  // shut down by the gate; gRPC has yet to close it
  };

  TcpGate(int listen_fd, int wake_fd, int port, Options options);
  void Loop();
  void AcceptAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Drops connections gRPC closed; shuts down unauthenticated ones past
  // their bounds. Returns whether any connection is still unauthenticated.
  bool Sweep() ABSL_LOCKS_EXCLUDED(mu_);
  // Shuts down the oldest unauthenticated connection from `host` that the
  // gate has not shut yet; false when there is none (mu_ held).
  bool EvictOldestUnauthenticated(const std::string& host)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneClosed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the listener (`full`) or `host` (`peer_full`) holds its most.
  void Count(const std::string& host, bool* full, bool* peer_full) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int listen_fd_;
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

  mutable absl::Mutex mu_;
  // By file descriptor (gRPC's from hand-over on).
  absl::flat_hash_map<int, Connection> connections_ ABSL_GUARDED_BY(mu_);
  // "host port" -> descriptor, for MarkAuthenticated.
  absl::flat_hash_map<std::string, int> by_peer_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_TCP_GATE_H_
