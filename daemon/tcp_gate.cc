#include "daemon/tcp_gate.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "daemon/config.h"
#include "daemon/log.h"

namespace rankd {
namespace {

// How often unauthenticated connections' bytes and age are looked at: what
// one may send beyond its budget is what it gets through in this time.
constexpr absl::Duration kSweepInterval = absl::Milliseconds(20);
// How often connections are looked at when every one is authenticated.
constexpr absl::Duration kIdleSweepInterval = absl::Seconds(1);
// At most one line a second about refused connections.
constexpr absl::Duration kLogInterval = absl::Seconds(1);
// Connections that end before the gate gives freed memory back (one it
// shut down counts for all).
constexpr uint64_t kTrimAfterEnded = 16;
// Connections accepted per turn of the loop: a stream of new connections
// must not keep it from sweeping (the budgets are enforced there).
constexpr int kMaxAcceptsPerTurn = 64;

// The peer of `fd` as gRPC names it: the address (IPv4-mapped IPv6 as IPv4)
// and port. False when it has none.
bool PeerOf(int fd, std::string* host, uint16_t* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return false;
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    *port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      ::inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof(text));
    } else {
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    }
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *host = text;
  return true;
}

ino_t InodeOf(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  return st.st_ino;
}

// Bytes the kernel received on `fd` so far; 0 when unknown.
uint64_t BytesReceived(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  if (len < offsetof(tcp_info, tcpi_bytes_received) +
                sizeof(info.tcpi_bytes_received)) {
    return 0;
  }
  return info.tcpi_bytes_received;
}

// A listening socket on `host`:`port`; -1 with errno set on failure.
int BindListen(const std::string& host, uint16_t port) {
  auto listen_on = [](const sockaddr* addr, socklen_t len, bool dual) {
    int fd = ::socket(addr->sa_family,
                      SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->sa_family == AF_INET6) {
      int v6only = dual ? 0 : 1;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    }
    if (::bind(fd, addr, len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      int saved = errno;
      ::close(fd);
      errno = saved;
      return -1;
    }
    return fd;
  };
  if (IsWildcardHost(host)) {
    // Every address, as gRPC's own listener binds a wildcard: IPv6 with
    // IPv4 mapped in, else IPv4 alone.
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(port);
    int fd = listen_on(reinterpret_cast<sockaddr*>(&any6), sizeof(any6), true);
    if (fd >= 0 || host == "::") return fd;
    sockaddr_in any4{};
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    any4.sin_port = htons(port);
    return listen_on(reinterpret_cast<sockaddr*>(&any4), sizeof(any4), false);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* result = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints,
                             &result);
      rc != 0) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  int fd = -1;
  // IPv4 first (a name with both, such as localhost, is reached so by most
  // clients), then whatever else the name has.
  for (int pass = 0; pass < 2 && fd < 0; ++pass) {
    for (addrinfo* a = result; a != nullptr && fd < 0; a = a->ai_next) {
      if ((pass == 0) != (a->ai_family == AF_INET)) continue;
      fd = listen_on(a->ai_addr, a->ai_addrlen, false);
    }
  }
  ::freeaddrinfo(result);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return 0;
  }
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpGate>> TcpGate::Listen(
    const std::string& address, Options options) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on --listen=", address, ": ", hp.status().message()));
  }
  int fd = BindListen(hp->host, hp->port);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen=", address, ": ",
                     std::strerror(errno), " (address in use or not local?)"));
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen=", address,
                     ": eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<TcpGate>(
      new TcpGate(fd, wake, BoundPort(fd), options));
}

TcpGate::TcpGate(int listen_fd, int wake_fd, int port, Options options)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      options_(options) {}

TcpGate::~TcpGate() {
  Stop();
  ::close(wake_fd_);
}

void TcpGate::Serve(
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  acceptor_ = std::move(acceptor);
  thread_ = std::thread([this] { Loop(); });
}

void TcpGate::Stop() {
  if (stopped_) return;
  stopped_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

void TcpGate::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  absl::Time next_sweep = absl::Now();
  bool watching = false;  // some connection is still unauthenticated
  absl::Time last_log = absl::InfinitePast();
  Stats logged;
  while (true) {
    const absl::Duration wait =
        std::max(absl::ZeroDuration(), next_sweep - absl::Now());
    int n = ::poll(fds, 2, static_cast<int>(absl::ToInt64Milliseconds(wait)));
    if (n < 0 && errno != EINTR) {
      Log(absl::StrCat("the TCP listener stops accepting: poll failed: ",
                       std::strerror(errno)));
      return;
    }
    if (n > 0 && fds[1].revents != 0) return;
    if (n > 0 && fds[0].revents != 0) AcceptAll();
    const absl::Time now = absl::Now();
    if (now >= next_sweep || n > 0) {
      watching = Sweep();
      next_sweep =
          absl::Now() + (watching ? kSweepInterval : kIdleSweepInterval);
    }
    // Freed memory back to the system once many connections ended (a
    // flood shed or gone) and things are quiet: what gRPC freed stays in
    // malloc's arenas otherwise. Twice: gRPC frees a closed connection's
    // calls a moment after it noticed the close.
    if (ended_since_trim_ >= kTrimAfterEnded) {
      if (trims_due_ == 0) trims_due_ = 2;
      ended_since_trim_ = 0;
    }
    if (trims_due_ > 0 &&
        now - last_end_ >
            (trims_due_ == 2 ? absl::Milliseconds(500) : absl::Seconds(3))) {
      --trims_due_;
      ::malloc_trim(0);
    }
    if (now - last_log >= kLogInterval) {
      const Stats s = stats();
      if (s.refused_full != logged.refused_full ||
          s.refused_peer != logged.refused_peer ||
          s.shut_bytes != logged.shut_bytes ||
          s.shut_time != logged.shut_time ||
          s.shut_evicted != logged.shut_evicted) {
        Log(absl::StrCat(
            "TCP listener: ", s.refused_full - logged.refused_full,
            " connections refused (--max_tcp_connections=",
            options_.max_connections, "), ",
            s.refused_peer - logged.refused_peer,
            " refused (--max_tcp_connections_per_peer=",
            options_.max_connections_per_peer,
            " or --max_tcp_unauthenticated_per_peer=",
            options_.max_unauthenticated_per_peer, "), ",
            s.shut_bytes - logged.shut_bytes,
            " closed unauthenticated past --tcp_unauthenticated_bytes=",
            options_.unauthenticated_bytes, ", ",
            s.shut_time - logged.shut_time, " past --tcp_unauthenticated_ms=",
            absl::ToInt64Milliseconds(options_.unauthenticated_time), ", ",
            s.shut_evicted - logged.shut_evicted,
            " for newer unauthenticated ones from their address; ", s.open,
            " open"));
        logged = s;
        last_log = now;
      }
    }
  }
}

void TcpGate::AcceptAll() {
  for (int accepted = 0; accepted < kMaxAcceptsPerTurn; ++accepted) {
    int fd =
        ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors or memory: the backlog waits for the next
        // sweep rather than spinning on a listening socket that stays
        // readable.
        ::poll(nullptr, 0, 20);
      }
      return;
    }
    Connection c;
    c.inode = InodeOf(fd);
    c.accepted = absl::Now();
    c.authenticated = !options_.require_authentication;
    if (c.inode == 0 || !PeerOf(fd, &c.host, &c.port)) {
      ::close(fd);
      continue;
    }
    bool full = false, peer_full = false;
    {
      absl::MutexLock lock(&mu_);
      Count(c.host, &full, &peer_full);
      if (full || peer_full) {
        PruneClosed();
        Count(c.host, &full, &peer_full);
      }
      // Held by unauthenticated connections of this address: the oldest
      // gives way (an honest caller sharing the address is not locked out).
      if (!full && peer_full && EvictOldestUnauthenticated(c.host)) {
        Count(c.host, &full, &peer_full);
      }
      if (full) {
        ++stats_.refused_full;
      } else if (peer_full) {
        ++stats_.refused_peer;
      } else {
        ++stats_.accepted;
        // gRPC closed the connection this descriptor named before (the
        // kernel reuses the lowest free number): forget it, peer entry too.
        if (auto old = connections_.find(fd); old != connections_.end()) {
          auto peer = by_peer_.find(
              absl::StrCat(old->second.host, " ", old->second.port));
          if (peer != by_peer_.end() && peer->second == fd) {
            by_peer_.erase(peer);
          }
          connections_.erase(old);
          ++ended_since_trim_;
        }
        by_peer_[absl::StrCat(c.host, " ", c.port)] = fd;
        connections_[fd] = c;
      }
    }
    if (full || peer_full) {
      ::close(fd);  // never handed over: still ours
      continue;
    }
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listen_fd_;
    p.fd = fd;
    // gRPC owns the descriptor from here (and closes it).
    acceptor_->HandleNewConnection(&p);
  }
}

void TcpGate::Count(const std::string& host, bool* full,
                    bool* peer_full) const {
  uint32_t peer = 0, unauthenticated = 0;
  for (const auto& [fd, c] : connections_) {
    if (c.host != host) continue;
    ++peer;
    if (!c.authenticated && !c.shut) ++unauthenticated;
  }
  *full = connections_.size() >= options_.max_connections;
  *peer_full = peer >= options_.max_connections_per_peer ||
               (options_.require_authentication &&
                unauthenticated >= options_.max_unauthenticated_per_peer);
}

bool TcpGate::EvictOldestUnauthenticated(const std::string& host) {
  Connection* oldest = nullptr;
  int oldest_fd = -1;
  for (auto& [fd, c] : connections_) {
    if (c.host != host || c.authenticated || c.shut) continue;
    if (oldest == nullptr || c.accepted < oldest->accepted) {
      oldest = &c;
      oldest_fd = fd;
    }
  }
  if (oldest == nullptr) return false;
  // PruneClosed ran just before: the descriptor still names the connection
  // accepted; gRPC sees it end and closes it.
  ::shutdown(oldest_fd, SHUT_RDWR);
  oldest->shut = true;
  ++stats_.shut_evicted;
  ended_since_trim_ += kTrimAfterEnded;
  last_end_ = absl::Now();
  return true;
}

void TcpGate::PruneClosed() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (InodeOf(it->first) != it->second.inode) {
      auto peer =
          by_peer_.find(absl::StrCat(it->second.host, " ", it->second.port));
      if (peer != by_peer_.end() && peer->second == it->first) {
        by_peer_.erase(peer);
      }
      connections_.erase(it++);
      ++ended_since_trim_;
      last_end_ = absl::Now();
    } else {
      ++it;
    }
  }
}

bool TcpGate::Sweep() {
  const absl::Time now = absl::Now();
  bool watching = false;
  absl::MutexLock lock(&mu_);
  PruneClosed();
  uint32_t unauthenticated = 0;
  for (auto& [fd, c] : connections_) {
    if (c.authenticated || c.shut) continue;
    ++unauthenticated;
    const bool too_long = now - c.accepted > options_.unauthenticated_time;
    const bool too_much = BytesReceived(fd) > options_.unauthenticated_bytes;
    if (!too_long && !too_much) {
      watching = true;
      continue;
    }
    // Checked just above (PruneClosed): the descriptor still names the
    // connection accepted; gRPC sees it end and closes it.
    ::shutdown(fd, SHUT_RDWR);
    c.shut = true;
    ++(too_much ? stats_.shut_bytes : stats_.shut_time);
    // What it held is worth giving back once gRPC freed it.
    ended_since_trim_ += kTrimAfterEnded;
    last_end_ = now;
  }
  stats_.open = static_cast<uint32_t>(connections_.size());
  stats_.unauthenticated = unauthenticated;
  return watching;
}

void TcpGate::MarkAuthenticated(absl::string_view peer) {
  std::string host;
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    host = std::string(peer);
  } else if (absl::ConsumePrefix(&peer, "ipv6:")) {
    host = absl::StrReplaceAll(
        peer,
        {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}, {"%25", "%"}});
  } else {
    return;
  }
  const size_t colon = host.rfind(':');
  if (colon == std::string::npos) return;
  uint32_t port = 0;
  if (!absl::SimpleAtoi(absl::string_view(host).substr(colon + 1), &port)) {
    return;
  }
  host.resize(colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  absl::MutexLock lock(&mu_);
  auto known = by_peer_.find(absl::StrCat(host, " ", port));
  if (known == by_peer_.end()) return;
  auto it = connections_.find(known->second);
  // The descriptor may name a newer connection by now (gRPC closed the
  // caller's; the number was reused): only the caller's own is marked.
  if (it != connections_.end() && !it->second.shut && it->second.host == host &&
      it->second.port == port) {
    it->second.authenticated = true;
  }
}

TcpGate::Stats TcpGate::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace rankd
