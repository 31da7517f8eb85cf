#include "daemon/http_endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "daemon/config.h"

namespace rankd {
namespace {

constexpr size_t kMaxRequestBytes = 8192;

struct Connection {
  int fd = -1;
  enum State { kReading, kWriting, kDraining } state = kReading;
  std::string in;
  std::string out;
  absl::Time deadline;
};

int ListenOn(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* result = nullptr;
  const bool any = IsWildcardHost(host);
  if (::getaddrinfo(any ? nullptr : host.c_str(), absl::StrCat(port).c_str(),
                    &hints, &result) != 0) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  int fd = -1;
  // IPv6 first for a wildcard (dual-stack), IPv4 first for a name.
  for (int pass = 0; pass < 2 && fd < 0; ++pass) {
    for (addrinfo* a = result; a != nullptr && fd < 0; a = a->ai_next) {
      const bool v6 = a->ai_family == AF_INET6;
      if ((pass == 0) != (any ? v6 : !v6)) continue;
      int s =
          ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (s < 0) continue;
      int one = 1;
      ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (v6) {
        int v6only = any ? 0 : 1;
        ::setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
      }
      if (::bind(s, a->ai_addr, a->ai_addrlen) == 0 &&
          ::listen(s, SOMAXCONN) == 0) {
        fd = s;
      } else {
        int saved = errno;
        ::close(s);
        errno = saved;
      }
    }
  }
  ::freeaddrinfo(result);
  return fd;
}

std::string Response(absl::string_view status, absl::string_view type,
                     const std::string& body, bool head) {
  std::string out = absl::StrCat(
      "HTTP/1.1 ", status, "\r\nContent-Type: ", type,
      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head) out += body;
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& address, Options options,
    std::function<std::string()> render) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on --metrics_listen=", address, ": ",
                     hp.status().message()));
  }
  int fd = ListenOn(hp->host, hp->port);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on --metrics_listen=", address, ": ",
                     std::strerror(errno), " (address in use or not local?)"));
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics: eventfd: ", std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  int port = 0;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    port = bound.ss_family == AF_INET
               ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
               : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  auto endpoint = std::unique_ptr<HttpEndpoint>(
      new HttpEndpoint(fd, wake, port, options, std::move(render)));
  endpoint->thread_ = std::thread([e = endpoint.get()] { e->Loop(); });
  return endpoint;
}

HttpEndpoint::HttpEndpoint(int listen_fd, int wake_fd, int port,
                           Options options, std::function<std::string()> render)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      options_(options),
      render_(std::move(render)) {}

HttpEndpoint::~HttpEndpoint() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void HttpEndpoint::Loop() {
  // Oldest first: a new connection beyond the limit closes the oldest one
  // still reading its request.
  std::list<Connection> connections;
  std::vector<pollfd> fds;
  std::vector<std::list<Connection>::iterator> polled;
  char buffer[4096];
  auto close = [&](std::list<Connection>::iterator it) {
    ::close(it->fd);
    return connections.erase(it);
  };
  while (true) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (auto it = connections.begin(); it != connections.end(); ++it) {
      fds.push_back({it->fd,
                     static_cast<short>(
                         it->state == Connection::kWriting ? POLLOUT : POLLIN),
                     0});
      polled.push_back(it);
      next = std::min(next, it->deadline);
    }
    int timeout = -1;
    if (next != absl::InfiniteFuture()) {
      timeout = static_cast<int>(std::max<int64_t>(
          0, absl::ToInt64Milliseconds(next - absl::Now()) + 1));
    }
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) break;
    if (n > 0 && fds[0].revents != 0) break;
    const absl::Time now = absl::Now();
    for (size_t i = 0; n > 0 && i < polled.size(); ++i) {
      auto it = polled[i];
      const short revents = fds[i + 2].revents;
      if (revents == 0) continue;
      if (it->state == Connection::kWriting) {
        ssize_t w =
            ::send(it->fd, it->out.data(), it->out.size(), MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
          close(it);
          continue;
        }
        if (w > 0) it->out.erase(0, static_cast<size_t>(w));
        if (it->out.empty()) {
          // Answered: read what the client still sends until it closes,
          // so that closing does not reset the answer away.
          ::shutdown(it->fd, SHUT_WR);
          it->state = Connection::kDraining;
        }
        continue;
      }
      ssize_t r = ::recv(it->fd, buffer, sizeof(buffer), 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close(it);
        continue;
      }
      if (r < 0 || it->state == Connection::kDraining) continue;
      it->in.append(buffer, static_cast<size_t>(r));
      size_t end = it->in.find("\r\n\r\n");
      if (end == std::string::npos) end = it->in.find("\n\n");
      if (end == std::string::npos) {
        if (it->in.size() >= kMaxRequestBytes) {
          it->out = Response("431 Request Header Fields Too Large",
                             "text/plain", "request too large\n", false);
          it->state = Connection::kWriting;
          it->deadline = now + options_.request_timeout;
        }
        continue;
      }
      const absl::string_view line =
          absl::string_view(it->in).substr(0, it->in.find_first_of("\r\n"));
      std::vector<absl::string_view> parts =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      const absl::string_view method = parts.empty() ? "" : parts[0];
      absl::string_view path = parts.size() > 1 ? parts[1] : "";
      path = path.substr(0, path.find('?'));
      const bool head = method == "HEAD";
      if (method != "GET" && !head) {
        it->out = Response("405 Method Not Allowed", "text/plain",
                           "only GET and HEAD\n", false);
      } else if (path != "/metrics") {
        it->out = Response("404 Not Found", "text/plain",
                           "not found; metrics are at /metrics\n", head);
      } else {
        it->out = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                           render_(), head);
      }
      it->in.clear();
      it->state = Connection::kWriting;
      it->deadline = now + options_.request_timeout;
    }
    // Past their deadlines: closed, whatever they were doing.
    for (auto it = connections.begin(); it != connections.end();) {
      it = it->deadline <= now ? close(it) : std::next(it);
    }
    if (n > 0 && fds[1].revents != 0) {
      while (true) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          break;
        }
        if (connections.size() >= options_.max_connections) {
          auto oldest = std::find_if(connections.begin(), connections.end(),
                                     [](const Connection& c) {
                                       return c.state != Connection::kWriting;
                                     });
          if (oldest == connections.end()) {
            ::close(fd);
            continue;
          }
          close(oldest);
        }
        Connection c;
        c.fd = fd;
        c.deadline = absl::Now() + options_.request_timeout;
        connections.push_back(std::move(c));
      }
    }
  }
  for (Connection& c : connections) ::close(c.fd);
}

}  // namespace rankd
