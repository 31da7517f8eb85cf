#include "daemon/transport/testing/closed_within.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>

#include "absl/time/clock.h"

namespace rankd::testing {

bool ClosedWithin(int fd, absl::Duration timeout) {
  timeval tv{};
  tv.tv_usec = 50'000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[4096];
  while (absl::Now() < deadline) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return true;
    }
  }
  return false;
}

}  // namespace rankd::testing
