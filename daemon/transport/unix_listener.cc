#include "daemon/transport/unix_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/log.h"

namespace rankd {

absl::StatusOr<UnixListener> ListenOnUnixSocket(
    const std::string& path,
    const std::function<absl::Status(absl::string_view what)>& failed) {
  sockaddr_un addr{};
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return failed("create");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  // Owner and group only from the start: no moment at which others could
  // connect (listen comes after the chmod anyway).
  mode_t old_umask = ::umask(0117);
  int bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::umask(old_umask);
  if (bound != 0) {
    absl::Status s = failed("bind");
    ::close(fd);
    return s;
  }
  if (::chmod(path.c_str(), 0660) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    absl::Status s = failed("listen on");
    ::close(fd);
    ::unlink(path.c_str());
    return s;
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    absl::Status s = failed("make the wake-up descriptor for");
    ::close(fd);
    ::unlink(path.c_str());
    return s;
  }
  return UnixListener{fd, wake};
}

std::optional<UnixPeer> AcceptUnixPeer(const UnixListener& listener,
                                       absl::string_view name) {
  pollfd fds[2] = {{listener.fd, POLLIN, 0}, {listener.wake, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Log(absl::StrCat(
          name, " stops accepting: poll failed: ", std::strerror(errno)));
      return std::nullopt;
    }
    if (fds[1].revents != 0) return std::nullopt;
    if (fds[0].revents == 0) continue;
    int fd =
        ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        Log(absl::StrCat(name, " cannot accept now: ", std::strerror(errno)));
        ::poll(nullptr, 0, 100);
      }
      continue;
    }
    UnixPeer peer;
    peer.fd = fd;
    socklen_t len = sizeof(peer.credentials);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer.credentials, &len) !=
        0) {
      ::close(fd);
      continue;
    }
    return peer;
  }
}

}  // namespace rankd
