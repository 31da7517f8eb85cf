// ListenOnUnixSocket: the listening Unix socket the daemon's own accept
// loops serve (local_socket.h for gRPC, kv_socket.h for the key-value
// channel): bound with owner and group access only from the start (no
// moment at which others could connect), non-blocking, close-on-exec,
// with an eventfd that wakes the accept loop when it is stopped. Depends
// on absl and POSIX.
#ifndef RANKD_DAEMON_TRANSPORT_UNIX_LISTENER_H_
#define RANKD_DAEMON_TRANSPORT_UNIX_LISTENER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd {

// Two descriptors the caller owns (closes) from then on.
struct UnixListener {
  int fd = -1;    // listening, non-blocking
  int wake = -1;  // eventfd, non-blocking
};

// Binds `path` (shorter than a Unix socket path, nothing there: the
// caller checked both) with mode 0660 and listens. On failure closes what
// it opened, removes the socket file it created, and returns
// `failed(what)` ("bind", "listen on", ...), which the caller words with
// its socket's name and errno.
absl::StatusOr<UnixListener> ListenOnUnixSocket(
    const std::string& path,
    const std::function<absl::Status(absl::string_view what)>& failed);

}  // namespace rankd

#endif  // RANKD_DAEMON_TRANSPORT_UNIX_LISTENER_H_
