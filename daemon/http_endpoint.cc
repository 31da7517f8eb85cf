#include "daemon/http_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/monotonic_clock.h"
#include "daemon/config.h"

namespace rankd {
namespace {

constexpr size_t kMaxRequestBytes = 8192;

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

// accept() failed for the connection it took, not for want of anything:
// the next one may be accepted at once.
bool ConnectionFailed(int error) {
  switch (error) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
      return true;
    default:
      return false;
  }
}

void Raise(std::atomic<uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

struct HttpEndpoint::Connection {
  enum State { kReading, kWriting, kDraining };
  int fd = -1;
  State state = kReading;
  std::string address;  // AddressGroup
  std::string in;
  // The answer: `head` (status line, headers, and an error's short body),
  // then `body` (a shared rendered body, or null); `sent` bytes of the two
  // together are sent.
  std::string head;
  std::shared_ptr<const std::string> body;
  size_t sent = 0;
  absl::Time deadline;
  absl::Time since;  // when it entered `state`
};

// The event loop: owns every connection; runs on the endpoint's thread.
class HttpEndpoint::Loop {
 public:
  explicit Loop(HttpEndpoint* endpoint) : e_(*endpoint) {}
  ~Loop() {
    for (Connection& c : connections_) ::close(c.fd);
  }

  void Run() {
    std::vector<pollfd> fds;
    std::vector<std::list<Connection>::iterator> polled;
    while (true) {
      fds.clear();
      polled.clear();
      absl::Time now = MonotonicNow();
      const bool listening = now >= backoff_until_;
      fds.push_back({e_.wake_fd_, POLLIN, 0});
      // Left out while backing off: polling it would wake the loop at once.
      fds.push_back({listening ? e_.listen_fd_ : -1, POLLIN, 0});
      absl::Time next = listening ? absl::InfiniteFuture() : backoff_until_;
      for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        fds.push_back(
            {it->fd,
             static_cast<short>(it->state == Connection::kWriting ? POLLOUT
                                                                  : POLLIN),
             0});
        polled.push_back(it);
        next = std::min(next, it->deadline);
      }
      int timeout = -1;
      if (next != absl::InfiniteFuture()) {
        timeout = static_cast<int>(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(next - now) + 1));
      }
      int n = ::poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) {
        // The listener stays open but unserved: say why scrapes now hang.
        // (stderr: daemon/log.h's library depends on this one.)
        std::fprintf(stderr, "rankd: metrics endpoint stops serving: %s\n",
                     std::strerror(errno));
        break;
      }
      if (n > 0 && fds[0].revents != 0) break;
      now = MonotonicNow();
      for (size_t i = 0; n > 0 && i < polled.size(); ++i) {
        if (fds[i + 2].revents != 0) Serve(polled[i], now);
      }
      // Past their deadlines: closed, whatever they were doing.
      for (auto it = connections_.begin(); it != connections_.end();) {
        if (it->deadline <= now) {
          Raise(e_.counters_->timed_out);
          it = Close(it);
        } else {
          ++it;
        }
      }
      if (n > 0 && listening && fds[1].revents != 0) Accept(now);
    }
  }

 private:
  using Iterator = std::list<Connection>::iterator;

  Iterator Close(Iterator it) {
    ::close(it->fd);
    return connections_.erase(it);
  }

  // Reads, or writes, what `it` is ready for.
  void Serve(Iterator it, absl::Time now) {
    if (it->state == Connection::kWriting) {
      Write(it, now);
      return;
    }
    char buffer[4096];
    ssize_t r = ::recv(it->fd, buffer, sizeof(buffer), 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
      Close(it);
      return;
    }
    if (r < 0 || it->state == Connection::kDraining) return;
    it->in.append(buffer, static_cast<size_t>(r));
    size_t end = it->in.find("\r\n\r\n");
    if (end == std::string::npos) end = it->in.find("\n\n");
    if (end == std::string::npos) {
      if (it->in.size() >= kMaxRequestBytes) {
        Answer(it, "431 Request Header Fields Too Large", "request too large\n",
               false, now);
      }
      return;
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
      Answer(it, "405 Method Not Allowed", "only GET and HEAD\n", false, now);
    } else if (path != "/metrics") {
      Answer(it, "404 Not Found", "not found; metrics are at /metrics\n", head,
             now);
    } else {
      it->head = absl::StrCat(
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
          "charset=utf-8\r\nContent-Length: ",
          Body(now)->size(), "\r\nConnection: close\r\n\r\n");
      if (!head) it->body = body_;
      StartWriting(it, now);
    }
  }

  // An error answer, its short body in the head.
  void Answer(Iterator it, absl::string_view status, absl::string_view text,
              bool head, absl::Time now) {
    it->head = absl::StrCat(
        "HTTP/1.1 ", status,
        "\r\nContent-Type: text/plain\r\nContent-Length: ", text.size(),
        "\r\nConnection: close\r\n\r\n", head ? "" : text);
    StartWriting(it, now);
  }

  void StartWriting(Iterator it, absl::Time now) {
    it->in.clear();
    it->in.shrink_to_fit();
    it->sent = 0;
    it->state = Connection::kWriting;
    it->since = now;
    // As long to read the answer as it had to send the request.
    it->deadline = now + e_.options_.request_timeout;
    Write(it, now);
  }

  void Write(Iterator it, absl::Time now) {
    const std::string empty;
    const std::string& body = it->body != nullptr ? *it->body : empty;
    const size_t total = it->head.size() + body.size();
    while (it->sent < total) {
      iovec parts[2];
      int count = 0;
      if (it->sent < it->head.size()) {
        parts[count++] = {const_cast<char*>(it->head.data()) + it->sent,
                          it->head.size() - it->sent};
      }
      const size_t body_sent =
          it->sent > it->head.size() ? it->sent - it->head.size() : 0;
      if (body_sent < body.size()) {
        parts[count++] = {const_cast<char*>(body.data()) + body_sent,
                          body.size() - body_sent};
      }
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = static_cast<size_t>(count);
      ssize_t w = ::sendmsg(it->fd, &message, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) return;
      if (w <= 0) {
        Close(it);
        return;
      }
      it->sent += static_cast<size_t>(w);
    }
    // Answered: read what the client still sends until it closes, so that
    // closing does not reset the answer away.
    it->head.clear();
    it->head.shrink_to_fit();
    it->body.reset();
    ::shutdown(it->fd, SHUT_WR);
    it->state = Connection::kDraining;
    it->since = now;
  }

  // The body of /metrics answers: rendered at most once per body_ttl.
  const std::shared_ptr<const std::string>& Body(absl::Time now) {
    if (body_ == nullptr || now - rendered_at_ >= e_.options_.body_ttl) {
      body_ = std::make_shared<const std::string>(e_.render_());
      rendered_at_ = now;
      Raise(e_.counters_->renders);
    }
    return body_;
  }

  // Accepts what is waiting, at most kMaxAcceptsPerTurn.
  void Accept(absl::Time now) {
    uint64_t accepted = 0;
    for (int i = 0; i < kMaxAcceptsPerTurn; ++i) {
      sockaddr_storage peer{};
      socklen_t length = sizeof(peer);
      int fd = ::accept4(e_.listen_fd_, reinterpret_cast<sockaddr*>(&peer),
                         &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (ConnectionFailed(errno)) continue;  // that one only
        // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM),
        // or worse: the connection stays queued, and polling the listener
        // again now would only find it again.
        backoff_until_ = now + e_.options_.accept_backoff;
        Raise(e_.counters_->accept_backoffs);
        break;
      }
      ++accepted;
      Admit(fd, HttpEndpoint::AddressGroup(peer), now);
      // After Admit, released: whoever sees `accepted` sees its displacement.
      e_.counters_->accepted.fetch_add(1, std::memory_order_release);
    }
    auto& most = e_.counters_->most_accepted_in_one_turn;
    if (accepted > most.load(std::memory_order_relaxed)) {
      most.store(accepted, std::memory_order_relaxed);
    }
  }

  // Makes room for a new connection from `address`, and holds it.
  void Admit(int fd, std::string address, absl::Time now) {
    // Of those `in` selects, the one to close: an answered one (it lost
    // nothing), else the one longest in its state, sending its request or
    // not reading its answer (a scrape does either in moments).
    auto first = [&](auto in) {
      Iterator chosen = connections_.end();
      for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        if (!in(*it)) continue;
        if (chosen == connections_.end()) {
          chosen = it;
          continue;
        }
        const bool answered = it->state == Connection::kDraining;
        const bool chosen_answered = chosen->state == Connection::kDraining;
        if (answered != chosen_answered ? answered
                                        : it->since < chosen->since) {
          chosen = it;
        }
      }
      return chosen;
    };
    size_t same = 0;
    for (const Connection& c : connections_) same += c.address == address;
    Iterator victim = connections_.end();
    if (same >= e_.options_.max_connections_per_address) {
      victim = first([&](const Connection& c) { return c.address == address; });
    } else if (connections_.size() >= e_.options_.max_connections) {
      victim = first([](const Connection&) { return true; });
    }
    if (victim != connections_.end()) {
      Raise(e_.counters_->displaced);
      Close(victim);
    }
    Connection c;
    c.fd = fd;
    c.address = std::move(address);
    c.since = now;
    c.deadline = now + e_.options_.request_timeout;
    connections_.push_back(std::move(c));
  }

  HttpEndpoint& e_;
  std::list<Connection> connections_;
  absl::Time backoff_until_ = absl::InfinitePast();
  std::shared_ptr<const std::string> body_;
  absl::Time rendered_at_ = absl::InfinitePast();
};

std::string HttpEndpoint::AddressGroup(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    return std::string(reinterpret_cast<const char*>(&v4.sin_addr), 4);
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    const auto* bytes = reinterpret_cast<const char*>(v6.sin6_addr.s6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) return std::string(bytes + 12, 4);
    return std::string(bytes, 8);  // the /64
  }
  return "";
}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& address, Options options,
    std::function<std::string()> render, Counters* counters) {
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
  options.max_connections = std::max<uint32_t>(options.max_connections, 1);
  options.max_connections_per_address =
      std::max<uint32_t>(options.max_connections_per_address, 1);
  auto endpoint = std::unique_ptr<HttpEndpoint>(
      new HttpEndpoint(fd, wake, port, options, std::move(render), counters));
  endpoint->thread_ = std::thread([e = endpoint.get()] { Loop(e).Run(); });
  // Named, so that its CPU time can be told apart (/proc/PID/task).
  ::pthread_setname_np(endpoint->thread_.native_handle(), "rankd-metrics");
  return endpoint;
}

HttpEndpoint::HttpEndpoint(int listen_fd, int wake_fd, int port,
                           Options options, std::function<std::string()> render,
                           Counters* counters)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      options_(options),
      render_(std::move(render)),
      counters_(counters != nullptr ? counters : &own_counters_) {}

HttpEndpoint::~HttpEndpoint() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

}  // namespace rankd
