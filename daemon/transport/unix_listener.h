// ListenOnUnixSocket and AcceptUnixPeer: the listening Unix socket the
// daemon's own accept loops serve (local_socket.h for gRPC, kv_socket.h
// for the key-value channel), bound with owner and group access only from
// the start (no moment at which others could connect), non-blocking,
// close-on-exec, with an eventfd that wakes the accept loop when it is
// stopped; and one step of such a loop. Depends on daemon/log.h, absl and
// POSIX.
#ifndef RANKD_DAEMON_TRANSPORT_UNIX_LISTENER_H_
#define RANKD_DAEMON_TRANSPORT_UNIX_LISTENER_H_

#include <sys/socket.h>

#include <functional>
#include <optional>
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

// A connection accepted on a UnixListener, and who is behind it.
struct UnixPeer {
  int fd = -1;  // non-blocking, close-on-exec; the caller owns it
  ucred credentials{};
};

// Waits for the next connection on `listener` and returns it with its
// peer's credentials (SO_PEERCRED); a connection whose credentials cannot
// be read is closed (it could not be bound to anyone). nullopt once
// `listener.wake` is signalled (the loop is stopping), or when polling
// itself failed (logged, naming `name`: "the Unix socket /run/rankd.sock").
// Out of descriptors or memory, it logs, waits 100 ms and tries again
// rather than spin on a listening socket that stays readable.
std::optional<UnixPeer> AcceptUnixPeer(const UnixListener& listener,
                                       absl::string_view name);

}  // namespace rankd

#endif  // RANKD_DAEMON_TRANSPORT_UNIX_LISTENER_H_
