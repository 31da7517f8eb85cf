#include "daemon/transport/local_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/log.h"
#include "daemon/transport/socket_inode.h"
#include "daemon/transport/unix_listener.h"
#include "grpcpp/server_posix.h"

namespace rankd {

absl::StatusOr<std::unique_ptr<LocalSocket>> LocalSocket::Listen(
    const std::string& path, Options options) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket=", path, " is longer than a Unix socket path (",
                     sizeof(addr.sun_path) - 1, " bytes)"));
  }
  auto failed = [&](absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot ", what, " --socket=", path, ": ", std::strerror(errno)));
  };
  absl::StatusOr<UnixListener> listener = ListenOnUnixSocket(path, failed);
  if (!listener.ok()) return listener.status();
  const int fd = listener->fd;
  const int wake = listener->wake;
  return std::unique_ptr<LocalSocket>(new LocalSocket(path, fd, wake, options));
}

LocalSocket::LocalSocket(std::string path, int listen_fd, int wake_fd,
                         Options options)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      options_(options) {}

LocalSocket::~LocalSocket() {
  Stop();
  ::close(wake_fd_);
}

void LocalSocket::Serve(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void LocalSocket::Stop() {
  if (stopped_) return;
  stopped_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

bool LocalSocket::HasRoomLocked(int32_t pid) {
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    uint32_t all = 0, of_pid = 0;
    for (const auto& [fd, e] : peers_) {
      ++all;
      if (pid != 0 && e.peer.pid == pid) ++of_pid;
    }
    return all < options_.max_connections && of_pid < options_.max_per_process;
  };
  if (fits()) return true;
  // Entries stay until their number is accepted again; at a bound, forget
  // those gRPC closed (their number names no socket, or another one).
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (SocketInode(it->first) != it->second.inode) {
      peers_.erase(it++);
    } else {
      ++it;
    }
  }
  return fits();
}

void LocalSocket::AcceptLoop(grpc::Server* server) {
  const std::string name = absl::StrCat("the Unix socket ", path_);
  absl::Time last_log = absl::InfinitePast();
  while (std::optional<UnixPeer> peer =
             AcceptUnixPeer(UnixListener{listen_fd_, wake_fd_}, name)) {
    const int32_t pid = peer->credentials.pid;
    bool admitted = false;
    uint64_t refused = 0;
    {
      absl::MutexLock lock(&mu_);
      // A connection that arrives on a number is a new one: whatever held
      // the number before is gone.
      peers_.erase(peer->fd);
      admitted = HasRoomLocked(pid);
      if (admitted) {
        peers_[peer->fd] =
            Entry{LocalPeer{next_connection_++, pid, peer->credentials.uid,
                            peer->credentials.gid},
                  SocketInode(peer->fd)};
      } else {
        refused = ++refused_;
      }
    }
    if (!admitted) {
      ::close(peer->fd);
      if (absl::Now() - last_log >= absl::Seconds(1)) {
        last_log = absl::Now();
        Log(absl::StrCat("refused a connection on ", name, " from pid ", pid,
                         ": at most ", options_.max_connections,
                         " connections at once, ", options_.max_per_process,
                         " from one process (", refused, " refused so far)"));
      }
      continue;
    }
    // gRPC owns the descriptor from here (and closes it).
    grpc::AddInsecureChannelFromFd(server, peer->fd);
  }
}

uint64_t LocalSocket::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

std::optional<LocalPeer> LocalSocket::PeerOf(
    absl::string_view grpc_peer) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&grpc_peer, "fd:") ||
      !absl::SimpleAtoi(grpc_peer, &fd)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second.peer;
}

}  // namespace rankd
