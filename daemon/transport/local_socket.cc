#include "daemon/transport/local_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
#include "daemon/transport/unix_listener.h"
#include "grpcpp/server_posix.h"

namespace rankd {

absl::StatusOr<std::unique_ptr<LocalSocket>> LocalSocket::Listen(
    const std::string& path) {
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
  return std::unique_ptr<LocalSocket>(new LocalSocket(path, fd, wake));
}

LocalSocket::LocalSocket(std::string path, int listen_fd, int wake_fd)
    : path_(std::move(path)), listen_fd_(listen_fd), wake_fd_(wake_fd) {}

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

void LocalSocket::AcceptLoop(grpc::Server* server) {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Log(absl::StrCat(
          "the Unix socket ", path_,
          " stops accepting: poll failed: ", std::strerror(errno)));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    int fd =
        ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors or memory: try again a little later rather
        // than spin on a listening socket that stays readable.
        Log(absl::StrCat("the Unix socket ", path_,
                         " cannot accept now: ", std::strerror(errno)));
        ::poll(nullptr, 0, 100);
      }
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      // Without knowing who connected, the connection cannot be bound.
      ::close(fd);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      peers_[fd] = LocalPeer{next_connection_++, cred.pid, cred.uid, cred.gid};
    }
    // gRPC owns the descriptor from here (and closes it).
    grpc::AddInsecureChannelFromFd(server, fd);
  }
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
  return it->second;
}

}  // namespace rankd
