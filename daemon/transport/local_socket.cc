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
  const std::string name = absl::StrCat("the Unix socket ", path_);
  while (std::optional<UnixPeer> peer =
             AcceptUnixPeer(UnixListener{listen_fd_, wake_fd_}, name)) {
    {
      absl::MutexLock lock(&mu_);
      peers_[peer->fd] =
          LocalPeer{next_connection_++, peer->credentials.pid,
                    peer->credentials.uid, peer->credentials.gid};
    }
    // gRPC owns the descriptor from here (and closes it).
    grpc::AddInsecureChannelFromFd(server, peer->fd);
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
