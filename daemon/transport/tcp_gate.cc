#include "daemon/transport/tcp_gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/descriptor_limit.h"
#include "daemon/log.h"
#include "daemon/transport/socket_inode.h"

namespace rankd {
namespace {

// How often unauthenticated connections' bytes and age are looked at: what
// one may send beyond its budget is what it gets through in this time.
constexpr absl::Duration kSweepInterval = absl::Milliseconds(20);
// How often health connections' bytes are looked at when they are the only
// unauthenticated ones (they may stay open for hours).
constexpr absl::Duration kHealthSweepInterval = absl::Milliseconds(250);
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
// The methods of a health connection (grpc.health.v1 Check and Watch).
constexpr absl::string_view kHealthService = "/grpc.health.v1.Health/";
// Calls a health connection may have in flight: a checker's Watch and a
// Check. More and it is one no more: calls that never send their message
// would otherwise wait on it forever.
constexpr uint32_t kMaxHealthCallsPerConnection = 2;

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

int BoundPort(int fd);

// A listening socket on `addr`; -1 with errno set on failure. `dual`: an
// IPv6 socket takes IPv4 (mapped) too.
int ListenOn(const sockaddr* addr, socklen_t len, bool dual) {
  int fd =
      ::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
}

void SetPort(sockaddr_storage* addr, uint16_t port) {
  if (addr->ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(port);
  }
}

// The addresses `host` names, IPv4 first (a name with both is reached so
// by most clients). localhost is 127.0.0.1 and ::1 whatever /etc/hosts
// says, as gRPC takes it. Empty with errno set when there are none.
std::vector<std::pair<sockaddr_storage, socklen_t>> AddressesOf(
    const std::string& host) {
  std::vector<std::pair<sockaddr_storage, socklen_t>> out;
  if (absl::EqualsIgnoreCase(host, "localhost")) {
    sockaddr_storage v4{}, v6{};
    auto* in = reinterpret_cast<sockaddr_in*>(&v4);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&v6);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    out.push_back({v4, sizeof(sockaddr_in)});
    out.push_back({v6, sizeof(sockaddr_in6)});
    return out;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), "0", &hints, &result) != 0) {
    errno = EADDRNOTAVAIL;
    return out;
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
      if ((pass == 0) != (a->ai_family == AF_INET)) continue;
      if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
      sockaddr_storage s{};
      std::memcpy(&s, a->ai_addr, a->ai_addrlen);
      bool seen = false;
      for (const auto& [o, len] : out) {
        seen |= len == a->ai_addrlen && std::memcmp(&o, &s, len) == 0;
      }
      if (!seen) out.push_back({s, a->ai_addrlen});
    }
  }
  ::freeaddrinfo(result);
  if (out.empty()) errno = EADDRNOTAVAIL;
  return out;
}

// Listening sockets on `host`:`port`, one port for all; empty with errno
// set on failure.
std::vector<int> BindListen(const std::string& host, uint16_t port) {
  if (IsWildcardHost(host)) {
    // Every address, as gRPC's own listener binds a wildcard: IPv6 with
    // IPv4 mapped in, else IPv4 alone.
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(port);
    int fd = ListenOn(reinterpret_cast<sockaddr*>(&any6), sizeof(any6), true);
    if (fd < 0 && host != "::") {
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(port);
      fd = ListenOn(reinterpret_cast<sockaddr*>(&any4), sizeof(any4), false);
    }
    if (fd < 0) return {};
    return {fd};
  }
  std::vector<std::pair<sockaddr_storage, socklen_t>> addresses =
      AddressesOf(host);
  if (addresses.empty()) return {};
  // Port 0: the first socket picks a free port, the others take the same;
  // taken there already, start again with another.
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::vector<int> fds;
    uint16_t bound = port;
    int failure = 0;
    for (size_t i = 0; i < addresses.size(); ++i) {
      sockaddr_storage addr = addresses[i].first;
      SetPort(&addr, bound);
      int fd = ListenOn(reinterpret_cast<sockaddr*>(&addr), addresses[i].second,
                        false);
      if (fd < 0) {
        // An address family the host lacks (no IPv6 loopback): the name's
        // other addresses serve.
        if (i > 0 && (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT)) {
          continue;
        }
        failure = errno;
        break;
      }
      if (bound == 0) bound = static_cast<uint16_t>(BoundPort(fd));
      fds.push_back(fd);
    }
    if (failure == 0 && !fds.empty()) return fds;
    for (int fd : fds) ::close(fd);
    if (failure == 0) failure = EADDRNOTAVAIL;
    if (!(port == 0 && failure == EADDRINUSE && !fds.empty())) {
      errno = failure;
      return {};
    }
  }
  errno = EADDRINUSE;
  return {};
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

// The gate's own descriptor of a connection: a duplicate of gRPC's, so that
// the socket's bytes are read and the socket shut down through a number
// that names it until the gate lets go, whatever gRPC closed meanwhile and
// the kernel handed out again. While the gate holds it, the socket stays
// open (its inode unique) even after gRPC closed its number; the gate lets
// go when the connection authenticates, is shut down, or is forgotten.
class TcpGate::OwnDescriptor {
 public:
  // Takes `fd` (owned).
  explicit OwnDescriptor(int fd) : fd_(fd) {}
  ~OwnDescriptor() { ::close(fd_); }
  OwnDescriptor(const OwnDescriptor&) = delete;
  OwnDescriptor& operator=(const OwnDescriptor&) = delete;

  // A close-on-exec duplicate of `fd`; nullptr when the process has no
  // descriptor to spare.
  static std::shared_ptr<const OwnDescriptor> Duplicate(int fd) {
    const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) return nullptr;
    return std::make_shared<const OwnDescriptor>(own);
  }

  int fd() const { return fd_; }

 private:
  const int fd_;
};

absl::StatusOr<std::unique_ptr<TcpGate>> TcpGate::Listen(
    const std::string& address, Options options) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on --listen=", address, ": ", hp.status().message()));
  }
  std::vector<int> fds = BindListen(hp->host, hp->port);
  if (fds.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen=", address, ": ",
                     std::strerror(errno), " (address in use or not local?)"));
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const int saved = errno;
    for (int fd : fds) ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen=", address,
                     ": eventfd: ", std::strerror(saved)));
  }
  const int port = BoundPort(fds[0]);
  return std::unique_ptr<TcpGate>(
      new TcpGate(std::move(fds), wake, port, options));
}

TcpGate::TcpGate(std::vector<int> listen_fds, int wake_fd, int port,
                 Options options)
    : listen_fds_(std::move(listen_fds)),
      wake_fd_(wake_fd),
      port_(port),
      options_(options) {
  absl::MutexLock lock(&call_reports_->mu);
  call_reports_->gate = this;
}

TcpGate::~TcpGate() {
  {
    absl::WriterMutexLock lock(&call_reports_->mu);
    call_reports_->gate = nullptr;
  }
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
  for (int fd : listen_fds_) ::close(fd);
}

void TcpGate::Loop() {
  std::vector<pollfd> fds;
  fds.push_back({wake_fd_, POLLIN, 0});
  for (int fd : listen_fds_) fds.push_back({fd, POLLIN, 0});
  absl::Time next_sweep = absl::Now();
  absl::Time last_log = absl::InfinitePast();
  Stats logged;
  while (true) {
    const absl::Duration wait =
        std::max(absl::ZeroDuration(), next_sweep - absl::Now());
    int n = ::poll(fds.data(), fds.size(),
                   static_cast<int>(absl::ToInt64Milliseconds(wait)));
    if (n < 0 && errno != EINTR) {
      Log(absl::StrCat("the TCP listener stops accepting: poll failed: ",
                       std::strerror(errno)));
      return;
    }
    if (n > 0 && fds[0].revents != 0) return;
    for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
      if (fds[i].revents != 0) AcceptAll(fds[i].fd);
    }
    const absl::Time now = absl::Now();
    if (now >= next_sweep || n > 0) next_sweep = absl::Now() + Sweep();
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
          s.shut_evicted != logged.shut_evicted ||
          s.refused_descriptors != logged.refused_descriptors) {
        Log(absl::StrCat(
            "TCP listener: ", s.refused_full - logged.refused_full,
            " connections refused (--max_tcp_connections=",
            options_.max_connections, " held, none unauthenticated), ",
            s.refused_peer - logged.refused_peer,
            " refused (--max_tcp_connections_per_peer=",
            options_.max_connections_per_peer, " held), ",
            s.shut_bytes - logged.shut_bytes,
            " closed unauthenticated past --tcp_unauthenticated_bytes=",
            options_.unauthenticated_bytes, ", ",
            s.shut_time - logged.shut_time, " past --tcp_unauthenticated_ms=",
            absl::ToInt64Milliseconds(options_.unauthenticated_time), ", ",
            s.shut_evicted - logged.shut_evicted,
            " unauthenticated closed for newer connections "
            "(--max_tcp_unauthenticated=",
            options_.max_unauthenticated,
            ", --max_tcp_unauthenticated_per_peer=",
            options_.max_unauthenticated_per_peer, ", or a full listener), ",
            s.refused_descriptors - logged.refused_descriptors,
            " refused for want of a file descriptor (RLIMIT_NOFILE); ", s.open,
            " open, ", s.unauthenticated, " unauthenticated, ", s.health,
            " health checks"));
        logged = s;
        last_log = now;
      }
    }
  }
}

void TcpGate::AcceptAll(int listen_fd) {
  for (int accepted = 0; accepted < kMaxAcceptsPerTurn; ++accepted) {
    int fd =
        ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
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
    c.inode = SocketInode(fd);
    c.listener = listen_fd;
    c.since = absl::Now();
    c.state = options_.require_authentication ? State::kUnauthenticated
                                              : State::kAuthenticated;
    absl::StatusOr<TcpPeer> peer = TcpPeerOfSocket(fd);
    if (c.inode == 0 || !peer.ok()) {
      ::close(fd);
      continue;
    }
    c.peer = *std::move(peer);
    if (c.state != State::kAuthenticated) {
      c.own = OwnDescriptor::Duplicate(fd);
      if (c.own == nullptr) {
        // Out of descriptors: a connection the gate could not bound is not
        // let in, and the backlog waits, as for accept's EMFILE.
        ::close(fd);
        {
          absl::MutexLock lock(&mu_);
          ++stats_.refused_descriptors;
        }
        ::poll(nullptr, 0, 20);
        return;
      }
    }
    // A limit that refuses first forgets the connections gRPC closed, with
    // no lock held for the system calls that takes.
    Room room = Room::kPruneFirst;
    for (bool pruned = false; room == Room::kPruneFirst; pruned = true) {
      if (pruned) PruneClosed();
      absl::MutexLock lock(&mu_);
      room = MakeRoom(c.peer, pruned);
      if (room == Room::kMade) {
        ++stats_.accepted;
        // gRPC closed the connection this descriptor named before (the
        // kernel reuses the lowest free number): forget it, peer entry too.
        if (auto old = connections_.find(fd); old != connections_.end()) {
          auto known = by_peer_.find(old->second.peer.key());
          if (known != by_peer_.end() && known->second == fd) {
            by_peer_.erase(known);
          }
          SetState(old->second, State::kAuthenticated);  // counts
          connections_.erase(old);
          ++ended_since_trim_;
        }
        by_peer_[c.peer.key()] = fd;
        if (c.state != State::kAuthenticated) pending_connections_.fetch_add(1);
        connections_[fd] = std::move(c);
      }
    }
    if (room != Room::kMade) {
      ::close(fd);  // never handed over: still ours (c.own goes with c)
      continue;
    }
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listen_fd;
    p.fd = fd;
    // gRPC owns the descriptor from here (and closes it).
    acceptor_->HandleNewConnection(&p);
  }
}

TcpGate::Tally TcpGate::Count(const TcpPeer& peer) const {
  Tally t;
  for (const auto& [fd, c] : connections_) {
    ++t.held;
    if (c.shut) continue;
    ++t.open;
    const bool unauthenticated = c.state == State::kUnauthenticated;
    if (unauthenticated) ++t.unauthenticated;
    if (c.peer.address == peer.address) ++t.address;
    if (unauthenticated && c.peer.group == peer.group) {
      ++t.group_unauthenticated;
    }
  }
  return t;
}

TcpGate::Room TcpGate::MakeRoom(const TcpPeer& peer, bool pruned) {
  // Those shut down that gRPC has yet to close included.
  const uint64_t most_held = TcpListenerConnections(options_.max_connections);
  const bool gated = options_.require_authentication;
  Tally t = Count(peer);
  auto over = [&] {
    return t.held >= most_held || t.open >= options_.max_connections ||
           t.address >= options_.max_connections_per_peer ||
           (gated &&
            (t.unauthenticated >= options_.max_unauthenticated ||
             t.group_unauthenticated >= options_.max_unauthenticated_per_peer));
  };
  if (!over()) return Room::kMade;
  // Where a connection might be refused, forget those gRPC closed since
  // the last sweep first (a system call per connection: not for the
  // unauthenticated limits, which make room instead).
  if (!pruned && (t.held >= most_held || t.open >= options_.max_connections ||
                  t.address >= options_.max_connections_per_peer)) {
    return Room::kPruneFirst;
  }
  if (t.held >= most_held) {
    ++stats_.refused_full;
    return Room::kNone;
  }
  // Each limit in turn, from the narrowest: an unauthenticated connection
  // it counts gives way (EvictOldest: silent ones first).
  if (t.address >= options_.max_connections_per_peer) {
    if (!EvictOldest(State::kUnauthenticated, [&](const Connection& c) {
          return c.peer.address == peer.address;
        })) {
      ++stats_.refused_peer;
      return Room::kNone;
    }
    t = Count(peer);
  }
  if (gated &&
      t.group_unauthenticated >= options_.max_unauthenticated_per_peer) {
    EvictOldest(State::kUnauthenticated, [&](const Connection& c) {
      return c.peer.group == peer.group;
    });
    t = Count(peer);
  }
  // Past a listener-wide limit the victim comes from the address group
  // holding the most unauthenticated connections: a flood from many
  // addresses then makes room from its own connections, and a node's
  // reconnect (one connection in its group) gives way last, however fast
  // the flood connects and whatever it sends.
  if (gated && t.unauthenticated >= options_.max_unauthenticated) {
    EvictFromLargestGroup();
    t = Count(peer);
  }
  if (t.open >= options_.max_connections) {
    auto any = [](const Connection&) { return true; };
    if (!EvictFromLargestGroup() && !EvictOldest(State::kHealth, any)) {
      ++stats_.refused_full;
      return Room::kNone;
    }
  }
  return Room::kMade;
}

bool TcpGate::EvictFromLargestGroup() {
  absl::flat_hash_map<std::string, uint32_t> held;
  uint32_t most = 0;
  for (const auto& [fd, c] : connections_) {
    if (c.state != State::kUnauthenticated || c.shut) continue;
    most = std::max(most, ++held[c.peer.group]);
  }
  if (most == 0) return false;
  // Among the largest groups (all of them, when every address holds one),
  // EvictOldest's order.
  return EvictOldest(State::kUnauthenticated, [&](const Connection& c) {
    auto it = held.find(c.peer.group);
    return it != held.end() && it->second == most;
  });
}

template <typename Matches>
bool TcpGate::EvictOldest(State state, Matches matches) {
  // Silent connections (nothing sent yet, as last seen) first, the oldest
  // of them: an honest caller sends its first bytes (TLS or HTTP/2
  // preface) as it connects, a flood of idle connections never does.
  auto before = [](const Connection& a, const Connection& b) {
    const bool a_silent = a.received == 0, b_silent = b.received == 0;
    if (a_silent != b_silent) return a_silent;
    return a.since < b.since;
  };
  while (true) {
    auto victim = connections_.end();
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      const Connection& c = it->second;
      if (c.state != state || c.shut || c.own == nullptr || !matches(c)) {
        continue;
      }
      if (victim == connections_.end() || before(c, victim->second)) {
        victim = it;
      }
    }
    if (victim == connections_.end()) return false;
    // gRPC may have closed it since the last sweep: forgotten, it makes no
    // room (its descriptor is gone already).
    if (SocketInode(victim->first) != victim->second.inode) {
      Forget(victim);
      continue;
    }
    // Silent when last seen: still so? (Each connection is looked at once:
    // one that sent something is silent no more.)
    if (victim->second.received == 0) {
      victim->second.received = BytesReceived(victim->second.own->fd());
      if (victim->second.received > 0) continue;
    }
    ShutDown(victim->second);
    ++stats_.shut_evicted;
    return true;
  }
}

void TcpGate::ShutDown(Connection& c) {
  // Through the gate's own descriptor: the connection accepted, whatever
  // gRPC's number names now. gRPC sees it end and closes its own. (Every
  // connection the gate may shut down holds one: Connection::own.)
  if (c.own != nullptr) ::shutdown(c.own->fd(), SHUT_RDWR);
  c.shut = true;
  c.own.reset();
  // What it held is worth giving back once gRPC freed it.
  ended_since_trim_ += kTrimAfterEnded;
  last_end_ = absl::Now();
}

void TcpGate::Forget(absl::flat_hash_map<int, Connection>::iterator it) {
  auto known = by_peer_.find(it->second.peer.key());
  if (known != by_peer_.end() && known->second == it->first) {
    by_peer_.erase(known);
  }
  SetState(it->second, State::kAuthenticated);  // counts
  connections_.erase(it);
  ++ended_since_trim_;
  last_end_ = absl::Now();
}

std::vector<TcpGate::Look> TcpGate::ReadSockets(bool bytes) {
  std::vector<Look> looks;
  {
    absl::MutexLock lock(&mu_);
    looks.reserve(connections_.size());
    for (const auto& [fd, c] : connections_) {
      looks.push_back({fd, c.inode, bytes ? c.own : nullptr});
    }
  }
  // No lock from here: a look may be out of date when it is acted on, and
  // the caller checks what changed. `own` stays open while the look holds
  // it, whoever lets go of it meanwhile.
  for (Look& l : looks) {
    l.open = SocketInode(l.fd) == l.inode;
    if (l.open && l.own != nullptr) l.received = BytesReceived(l.own->fd());
  }
  return looks;
}

void TcpGate::PruneClosed() {
  const std::vector<Look> looks = ReadSockets(/*bytes=*/false);
  // Closed after the lock is released: the gate may hold the last
  // descriptor of a socket gRPC closed, and closing it closes the socket.
  std::vector<std::shared_ptr<const OwnDescriptor>> released;
  absl::MutexLock lock(&mu_);
  for (const Look& l : looks) {
    if (l.open) continue;
    auto it = connections_.find(l.fd);
    if (it == connections_.end() || it->second.inode != l.inode) continue;
    released.push_back(std::move(it->second.own));
    Forget(it);
  }
}

absl::Duration TcpGate::Sweep() {
  // Declared before the lock: the descriptors the looks held are let go
  // (closed, where the gate was their last holder) after it is released.
  const std::vector<Look> looks = ReadSockets(/*bytes=*/true);
  if (options_.after_reading_sockets) options_.after_reading_sockets();
  const absl::Time now = absl::Now();
  std::vector<std::shared_ptr<const OwnDescriptor>> released;  // as above
  absl::MutexLock lock(&mu_);
  for (const Look& l : looks) {
    auto it = connections_.find(l.fd);
    // Forgotten meanwhile (the gate's own thread alone adds entries, so
    // the same descriptor and inode are the same connection).
    if (it == connections_.end() || it->second.inode != l.inode) continue;
    if (!l.open) {
      released.push_back(std::move(it->second.own));
      Forget(it);
      continue;
    }
    Connection& c = it->second;
    // Authenticated or shut down since it was read: nothing to bound.
    if (c.state == State::kAuthenticated || c.shut || l.own == nullptr) {
      continue;
    }
    // Bytes only grow: an eviction may have read a newer count meanwhile.
    c.received = std::max(c.received, l.received);
    const bool too_long = c.state != State::kHealth &&
                          now - c.since > options_.unauthenticated_time;
    const bool too_much = c.received > options_.unauthenticated_bytes;
    if (!too_long && !too_much) continue;
    ShutDown(c);
    ++(too_much ? stats_.shut_bytes : stats_.shut_time);
  }
  uint32_t unauthenticated = 0, health = 0;
  for (const auto& [fd, c] : connections_) {
    if (c.shut) continue;
    if (c.state == State::kUnauthenticated) ++unauthenticated;
    if (c.state == State::kHealth) ++health;
  }
  stats_.open = static_cast<uint32_t>(connections_.size());
  stats_.unauthenticated = unauthenticated;
  stats_.health = health;
  return unauthenticated > 0 ? kSweepInterval
         : health > 0        ? kHealthSweepInterval
                             : kIdleSweepInterval;
}

void TcpGate::SetState(Connection& c, State state) {
  if (c.state != State::kAuthenticated) pending_connections_.fetch_sub(1);
  if (state != State::kAuthenticated) pending_connections_.fetch_add(1);
  c.state = state;
  // The gate never acts on an authenticated connection again.
  if (state == State::kAuthenticated) c.own.reset();
}

TcpGate::Connection* TcpGate::Find(absl::string_view peer) {
  absl::StatusOr<TcpPeer> p = ParseGrpcPeer(peer);
  if (!p.ok()) return nullptr;
  auto known = by_peer_.find(p->key());
  if (known == by_peer_.end()) return nullptr;
  auto it = connections_.find(known->second);
  // The descriptor may name a newer connection by now (gRPC closed the
  // caller's; the number was reused): only the caller's own counts.
  if (it == connections_.end() || it->second.shut ||
      it->second.peer.key() != p->key()) {
    return nullptr;
  }
  return &it->second;
}

void TcpGate::MarkAuthenticated(absl::string_view peer) {
  // Every authenticated call comes here: with every connection
  // authenticated already there is nothing to mark.
  if (pending_connections_.load(std::memory_order_acquire) == 0) return;
  absl::MutexLock lock(&mu_);
  if (Connection* c = Find(peer)) SetState(*c, State::kAuthenticated);
}

bool TcpGate::NoteCall(absl::string_view peer, absl::string_view method) {
  if (!options_.require_authentication) return false;
  // Every call on the TCP server comes here (a node's rounds too): with
  // every connection authenticated there is nothing to note.
  if (pending_connections_.load(std::memory_order_acquire) == 0) return false;
  const bool health = absl::StartsWith(method, kHealthService);
  absl::MutexLock lock(&mu_);
  Connection* c = Find(peer);
  if (c == nullptr || c->state == State::kAuthenticated) return false;
  ++c->calls;
  // Another method, or more health calls at once than a checker makes: a
  // health connection no more, for good, with the unauthenticated time
  // from now (its calls could otherwise wait forever).
  if (!health || c->calls > kMaxHealthCallsPerConnection) {
    c->ever_other_call = true;
    if (c->state == State::kHealth) {
      SetState(*c, State::kUnauthenticated);
      c->since = absl::Now();
    }
    return true;
  }
  if (c->state != State::kUnauthenticated || c->ever_other_call) return true;
  uint32_t in_all = 0, in_group = 0;
  for (const auto& [fd, other] : connections_) {
    if (other.state != State::kHealth || other.shut) continue;
    ++in_all;
    if (other.peer.group == c->peer.group) ++in_group;
  }
  if (in_group >= options_.max_health_per_peer) return true;  // no room
  if (in_all >= options_.max_health && !MakeHealthRoom(in_group)) {
    return true;  // no room: it keeps the unauthenticated bounds
  }
  SetState(*c, State::kHealth);
  return true;
}

bool TcpGate::MakeHealthRoom(uint32_t in_group) {
  // The budget is full. A share for each group: one holding more health
  // connections than the newcomer's would after it gives its oldest up,
  // so whoever took the budget first (a flood from a few addresses)
  // cannot keep a load balancer's Watch out for good.
  absl::flat_hash_map<std::string, uint32_t> held;
  uint32_t most = 0;
  for (const auto& [fd, other] : connections_) {
    if (other.state != State::kHealth || other.shut) continue;
    most = std::max(most, ++held[other.peer.group]);
  }
  if (most <= in_group + 1) return false;
  return EvictOldest(State::kHealth, [&](const Connection& other) {
    auto it = held.find(other.peer.group);
    return it != held.end() && it->second == most;
  });
}

void TcpGate::CallEnded(absl::string_view peer) {
  absl::MutexLock lock(&mu_);
  if (Connection* c = Find(peer); c != nullptr && c->calls > 0) --c->calls;
}

namespace {

// Tells the gate when a call it noted ends (the interceptor lives as long
// as the call).
class CallEnd : public grpc::experimental::Interceptor {
 public:
  CallEnd(std::shared_ptr<TcpGate::CallReports> reports, std::string peer)
      : reports_(std::move(reports)), peer_(std::move(peer)) {}
  ~CallEnd() override {
    absl::ReaderMutexLock lock(&reports_->mu);
    if (reports_->gate != nullptr) reports_->gate->CallEnded(peer_);
  }
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  const std::shared_ptr<TcpGate::CallReports> reports_;
  const std::string peer_;
};

// Reports every call's method and peer to the gate, as the call starts
// (its headers are in; its message may not be), and the end of those it
// counts.
class CallNoter : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CallNoter(std::shared_ptr<TcpGate::CallReports> reports)
      : reports_(std::move(reports)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    grpc::ServerContextBase* context = info->server_context();
    if (method == nullptr || context == nullptr) return nullptr;
    std::string peer = context->peer();
    {
      absl::ReaderMutexLock lock(&reports_->mu);
      if (reports_->gate == nullptr ||
          !reports_->gate->NoteCall(peer, method)) {
        return nullptr;
      }
    }
    return new CallEnd(reports_, std::move(peer));  // gRPC owns it
  }

 private:
  const std::shared_ptr<TcpGate::CallReports> reports_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
TcpGate::MakeInterceptorFactory() {
  return std::make_unique<CallNoter>(call_reports_);
}

TcpGate::Stats TcpGate::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace rankd
