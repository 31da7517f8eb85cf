// LocalSocket: the daemon's Unix socket for its node's ranks. It accepts
// the connections itself, rather than letting gRPC listen, so that it knows
// who is at the other end of each: the credentials the kernel recorded when
// the process connected (SO_PEERCRED: pid, uid, gid). Each accepted
// connection is then handed to the gRPC server
// (grpc::AddInsecureChannelFromFd), whose calls name it as peer "fd:<n>";
// PeerOf maps that back to the connection. The Rank service binds a rank to
// the connection it joined on (docs/operations.md, "Credentials"), which
// needs exactly this; so the socket's connections must never be closed
// for age or idleness (a rank's Watch stream keeps its connection busy).
// Instead, connections are bounded as they arrive: at most
// `max_connections` at once, and `max_per_process` from one process (where
// its pid is visible), so that one process in the socket's group cannot take
// the daemon's file descriptors; a connection beyond either is closed at
// once (logged, at most once a second). Depends on gRPC, absl and POSIX
// sockets.
#ifndef RANKD_DAEMON_LOCAL_SOCKET_H_
#define RANKD_DAEMON_LOCAL_SOCKET_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace rankd {

// One accepted connection and the process that opened it.
struct LocalPeer {
  // Unique among the socket's connections over the daemon's life.
  uint64_t connection = 0;
  // As the kernel recorded them at connect(). pid is 0 when the process is
  // not visible in the daemon's pid namespace (a container without a
  // shared process namespace): the connection still identifies it.
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

class LocalSocket {
 public:
  struct Options {
    // Connections open at once, and from one process.
    uint32_t max_connections = 1024;
    uint32_t max_per_process = 64;
  };

  // Binds `path` (which PrepareSocketPath made free), owner and group only
  // (mode 0660: file permissions are the socket's first gate), and
  // listens. FailedPrecondition naming the path and the error otherwise.
  static absl::StatusOr<std::unique_ptr<LocalSocket>> Listen(
      const std::string& path, Options options);
  static absl::StatusOr<std::unique_ptr<LocalSocket>> Listen(
      const std::string& path) {
    return Listen(path, Options());
  }
  // Stops accepting (Stop).
  ~LocalSocket();

  LocalSocket(const LocalSocket&) = delete;
  LocalSocket& operator=(const LocalSocket&) = delete;

  // Starts the accepting thread, which hands every connection to `server`
  // (started, and kept alive until Stop returned).
  void Serve(grpc::Server* server);

  // Stops accepting and closes the listening socket; connections already
  // handed to gRPC stay its own. Idempotent.
  void Stop();

  // The connection behind a call whose grpc::ServerContext::peer() is
  // `grpc_peer`; nullopt for calls that did not come through this socket.
  std::optional<LocalPeer> PeerOf(absl::string_view grpc_peer) const;

  const std::string& path() const { return path_; }

  // Connections refused so far for the bounds above.
  uint64_t refused() const;

 private:
  struct Entry {
    LocalPeer peer;
    ino_t inode = 0;  // the socket accepted: the number may name another
  };
  LocalSocket(std::string path, int listen_fd, int wake_fd, Options options);
  void AcceptLoop(grpc::Server* server);
  // Whether a connection from `pid` fits the bounds, forgetting first the
  // connections gRPC closed when one is reached.
  bool HasRoomLocked(int32_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const int listen_fd_;
  const int wake_fd_;  // eventfd that ends AcceptLoop
  const Options options_;
  std::thread thread_;
  bool stopped_ = false;  // only Stop (one thread) touches it

  mutable absl::Mutex mu_;
  uint64_t next_connection_ ABSL_GUARDED_BY(mu_) = 1;
  // By file descriptor. An entry stays until its number is accepted again:
  // gRPC closes a connection's descriptor only after the last call on it
  // ended, so a call's "fd:<n>" always names the connection it came on.
  absl::flat_hash_map<int, Entry> peers_ ABSL_GUARDED_BY(mu_);
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_LOCAL_SOCKET_H_
