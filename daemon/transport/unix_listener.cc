#include "daemon/transport/unix_listener.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

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

}  // namespace rankd
