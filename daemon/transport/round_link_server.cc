#include "daemon/transport/round_link_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "daemon/log.h"
#include "daemon/transport/round_link_protocol.h"
#include "daemon/transport/tcp_peer.h"

namespace rankd {
namespace {

// What one recv takes at most (into the server's one read buffer).
constexpr size_t kReadChunkBytes = 64 << 10;
// iovecs per sendmsg: up to this many queued frames go out in one call.
constexpr size_t kMaxFramesPerWrite = 64;

// The Peer call a forwarded key-value call stands for (for metrics).
std::string KvLinkMethod(const v1::KvLinkRequest& request) {
  switch (request.call_case()) {
    case v1::KvLinkRequest::kKvSet:
      return "/rankd.v1.Peer/KvSet";
    case v1::KvLinkRequest::kKvGet:
      return "/rankd.v1.Peer/KvGet";
    case v1::KvLinkRequest::kKvAdd:
      return "/rankd.v1.Peer/KvAdd";
    case v1::KvLinkRequest::kKvDelete:
      return "/rankd.v1.Peer/KvDelete";
    case v1::KvLinkRequest::kKvCount:
      return "/rankd.v1.Peer/KvCount";
    case v1::KvLinkRequest::CALL_NOT_SET:
      break;
  }
  return "/rankd.v1.Peer/Kv";
}

}  // namespace

// One node's connection. The server's thread owns the reading side and
// closes the socket; any thread may deliver outcomes. The socket is
// non-blocking.
class RoundLinkServer::Connection {
 public:
  Connection(int fd, int epoll_fd) : fd_(fd), epoll_fd_(epoll_fd) {}

  int fd() const { return fd_; }

  // Queues an outcome for the contribution tagged `tag` and writes what the
  // socket takes. Any thread; dropped once the connection is closed.
  void Deliver(std::shared_ptr<const WordRounds::Outcome> outcome,
               uint64_t tag) {
    const std::string& body = outcome->LinkEncoded();
    std::string tail = WordRounds::Outcome::TagSuffix(tag);
    Out out{RoundLinkTypedFrameHeader(RoundLinkFrameType::kOutcome,
                                      body.size() + tail.size()),
            std::move(outcome), std::move(tail)};
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    if (out_.size() >= kMaxQueuedOutcomes) {
      // The node stopped reading: end the link (the server's thread sees
      // the shutdown and closes it).
      NoteEndLocked(absl::StrCat(
          "RESOURCE_EXHAUSTED: its node stopped reading; ", kMaxQueuedOutcomes,
          " outcomes queued (kMaxQueuedOutcomes)"));
      closed_ = true;
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
    out_.push_back(std::move(out));
    if (out_.size() == 1) FlushLocked();
  }

  // Queues a whole `frame` (handshake, last words) and writes what the
  // socket takes.
  void SendFrame(std::string frame) {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    out_.push_back(Out{std::move(frame), nullptr, ""});
    if (out_.size() == 1) FlushLocked();
  }

  // Queues the coordinator's last words before it closes the link: an
  // outcome with tag 0 carrying `why`.
  void SendLastWords(const absl::Status& why) {
    {
      absl::MutexLock lock(&mu_);
      NoteEndLocked(why.ToString());
    }
    v1::RoundOutcome last;
    last.set_code(static_cast<int>(why.code()));
    last.set_message(std::string(why.message()));
    SendFrame(RoundLinkTypedFrame(RoundLinkFrameType::kOutcome,
                                  last.SerializeAsString()));
  }

  // Records key-value call `id` as in flight with its `cancellation`.
  // InvalidArgument when a call with that id is in flight already,
  // ResourceExhausted when kMaxKvCallsPerRoundLink are.
  absl::Status StartKv(uint64_t id, CancellationRef cancellation) {
    absl::MutexLock lock(&mu_);
    if (kv_calls_.contains(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a kv request with id ", id, ", which a call in flight has"));
    }
    if (kv_calls_.size() >= kMaxKvCallsPerRoundLink) {
      return absl::ResourceExhaustedError(
          absl::StrCat("more than ", kMaxKvCallsPerRoundLink,
                       " key-value calls in flight on one round link "
                       "(kMaxKvCallsPerRoundLink)"));
    }
    kv_calls_.emplace(id, std::move(cancellation));
    return absl::OkStatus();
  }

  // Sends call `reply.id()`'s reply (any thread); dropped once the
  // connection is closed. Replies queued beyond
  // kMaxRoundLinkQueuedKvReplyBytes (a node that does not read) end the
  // link.
  void FinishKv(const v1::KvLinkReply& reply) {
    std::string frame = RoundLinkTypedFrame(RoundLinkFrameType::kKvReply,
                                            reply.SerializeAsString());
    absl::MutexLock lock(&mu_);
    kv_calls_.erase(reply.id());
    if (closed_) return;
    if (queued_kv_bytes_ + frame.size() > kMaxRoundLinkQueuedKvReplyBytes) {
      NoteEndLocked(absl::StrCat(
          "RESOURCE_EXHAUSTED: its node stopped reading; more than ",
          kMaxRoundLinkQueuedKvReplyBytes,
          " bytes of key-value replies queued"));
      closed_ = true;  // the server's thread sees the shutdown and closes
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
    queued_kv_bytes_ += frame.size();
    const size_t size = frame.size();
    out_.push_back(Out{std::move(frame), nullptr, "", size});
    if (out_.size() == 1) FlushLocked();
  }

  // Releases call `id`'s wait, if it is in flight (server thread).
  void CancelKv(uint64_t id) {
    CancellationRef cancellation;
    {
      absl::MutexLock lock(&mu_);
      auto it = kv_calls_.find(id);
      if (it == kv_calls_.end()) return;  // its reply crossed the cancel
      cancellation = it->second;
    }
    cancellation->Cancel();  // may answer at once: not under mu_
  }

  // The socket has room again (server thread).
  void OnWritable() {
    absl::MutexLock lock(&mu_);
    if (!closed_) FlushLocked();
  }

  // Drops what is queued, closes the socket and releases the waits of the
  // key-value calls in flight (server thread, once).
  // Why the link ends, the first reason noted (any thread).
  void NoteEnd(std::string why) {
    absl::MutexLock lock(&mu_);
    NoteEndLocked(std::move(why));
  }
  std::string end_reason() const {
    absl::MutexLock lock(&mu_);
    return end_reason_;
  }

  void Close() {
    std::map<uint64_t, CancellationRef> in_flight;
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
      out_.clear();
      queued_kv_bytes_ = 0;
      in_flight.swap(kv_calls_);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
      ::close(fd_);
    }
    for (auto& [id, cancellation] : in_flight) cancellation->Cancel();
  }

  // Reading side: only the server's thread touches these.
  enum class Phase { kHello, kOpen };
  Phase phase = Phase::kHello;
  std::string in;
  std::string coordinator_nonce;
  absl::Time handshake_deadline;
  std::string group;  // the peer's address group (TcpPeer::group)
  // Its entry in the server's handshakes_ while in its handshake.
  std::list<std::weak_ptr<Connection>>::iterator handshake_entry;
  std::optional<uint32_t> node;
  bool admitted = false;  // counted in open_links_

 private:
  struct Out {
    std::string head;  // frame header, or a whole small frame
    std::shared_ptr<const WordRounds::Outcome> outcome;  // may be null
    std::string tail;
    size_t kv_bytes = 0;  // of a key-value reply: counted in queued_kv_bytes_
  };

  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!out_.empty()) {
      iovec parts[kMaxFramesPerWrite * 3];
      size_t count = 0;
      size_t skip = written_;
      for (size_t i = 0; i < out_.size() && i < kMaxFramesPerWrite; ++i) {
        const Out& o = out_[i];
        absl::string_view pieces[3] = {
            o.head,
            o.outcome ? absl::string_view(o.outcome->LinkEncoded())
                      : absl::string_view(),
            o.tail};
        for (absl::string_view p : pieces) {
          if (skip >= p.size()) {
            skip -= p.size();
            continue;
          }
          parts[count++] =
              iovec{const_cast<char*>(p.data()) + skip, p.size() - skip};
          skip = 0;
        }
      }
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = count;
      ssize_t n = ::sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          WatchWritable(true);
          return;
        }
        NoteEndLocked(
            absl::StrCat("a write to its node failed: ", std::strerror(errno)));
        closed_ = true;  // broken: the server's thread sees it and closes
        ::shutdown(fd_, SHUT_RDWR);
        out_.clear();
        queued_kv_bytes_ = 0;
        return;
      }
      // Retire the frames the write finished.
      size_t done = written_ + static_cast<size_t>(n);
      while (!out_.empty()) {
        const Out& o = out_.front();
        size_t size = o.head.size() + o.tail.size() +
                      (o.outcome ? o.outcome->LinkEncoded().size() : 0);
        if (done < size) break;
        done -= size;
        queued_kv_bytes_ -= o.kv_bytes;
        out_.pop_front();
      }
      written_ = done;
    }
    WatchWritable(false);
  }

  void WatchWritable(bool on) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (on == watching_writable_) return;
    watching_writable_ = on;
    epoll_event e{};
    e.events = EPOLLIN | (on ? EPOLLOUT : 0);
    e.data.fd = fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd_, &e);
  }

  void NoteEndLocked(std::string why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (end_reason_.empty()) end_reason_ = std::move(why);
  }

  const int fd_;
  const int epoll_fd_;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string end_reason_ ABSL_GUARDED_BY(mu_);
  std::deque<Out> out_ ABSL_GUARDED_BY(mu_);
  size_t written_ ABSL_GUARDED_BY(mu_) = 0;  // of out_.front()
  size_t queued_kv_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Key-value calls in flight, by the node's id.
  std::map<uint64_t, CancellationRef> kv_calls_ ABSL_GUARDED_BY(mu_);
  bool watching_writable_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<RoundLinkServer>> RoundLinkServer::Start(
    const std::string& host, int port, Handlers handlers, Limits limits) {
  const std::string where = absl::StrCat(host, ":", port);
  if (limits.max_handshakes == 0 || limits.max_handshakes > kMaxHandshakes ||
      limits.max_handshakes_per_address == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "round link: max_handshakes ", limits.max_handshakes, " (1 to ",
        kMaxHandshakes, ") and max_handshakes_per_address ",
        limits.max_handshakes_per_address, " (at least 1)"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(),
                             service.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "round link: cannot resolve ", where, ": ", ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(
      found, &::freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family,
                      a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    int bound_port =
        bound.ss_family == AF_INET6
            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    auto server = std::unique_ptr<RoundLinkServer>(
        new RoundLinkServer(fd, bound_port, std::move(handlers), limits));
    if (server->epoll_fd_ < 0 || server->wake_fd_ < 0) {
      return absl::UnavailableError(
          absl::StrCat("round link: epoll/eventfd: ", std::strerror(errno)));
    }
    server->thread_ = std::thread([s = server.get()] { s->Run(); });
    return server;
  }
  return absl::UnavailableError(
      absl::StrCat("round link: cannot listen on ", where, ": ", last_error));
}

RoundLinkServer::RoundLinkServer(int listen_fd, int port, Handlers handlers,
                                 Limits limits)
    : listen_fd_(listen_fd),
      port_(port),
      handlers_(std::move(handlers)),
      limits_(limits) {
  read_buffer_ = std::make_unique<char[]>(kReadChunkBytes);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  for (int fd : {listen_fd_, wake_fd_}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    if (epoll_fd_ >= 0 && fd >= 0) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
    }
  }
}

RoundLinkServer::~RoundLinkServer() {
  Stop();
  ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

size_t RoundLinkServer::open_links() const {
  absl::MutexLock lock(&mu_);
  return open_links_;
}

void RoundLinkServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void RoundLinkServer::Run() {
  epoll_event events[64];
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) break;
    }
    // Wakes at least every second to expire slow handshakes.
    int n = ::epoll_wait(epoll_fd_, events, 64, 1000);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) continue;
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      std::shared_ptr<Connection> c = it->second;
      if (events[i].events & EPOLLOUT) c->OnWritable();
      if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) &&
          !OnReadable(c)) {
        Close(fd);
      }
    }
    ExpireHandshakes();
  }
  std::vector<int> fds;
  for (auto& [fd, c] : connections_) fds.push_back(fd);
  for (int fd : fds) Close(fd);
}

bool RoundLinkServer::CloseOldestHandshake(
    absl::FunctionRef<bool(const Connection&)> which) {
  for (const std::weak_ptr<Connection>& entry : handshakes_) {
    std::shared_ptr<Connection> c = entry.lock();
    if (c == nullptr || !which(*c)) continue;
    Close(c->fd());  // ends its handshake: its entry goes
    return true;
  }
  return false;
}

void RoundLinkServer::EndHandshake(Connection& c) {
  --handshaking_;
  handshakes_.erase(c.handshake_entry);
  auto it = handshakes_of_group_.find(c.group);
  if (it != handshakes_of_group_.end() && --it->second == 0) {
    handshakes_of_group_.erase(it);
  }
}

void RoundLinkServer::Accept() {
  // Takes the connections waiting, so none waits behind silent ones; at
  // most a batch per wake (the listener stays readable for the rest), so
  // handshakes under way are read in between.
  for (size_t accepted = 0; accepted < kMaxAcceptsPerWake; ++accepted) {
    int fd =
        ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      // Out of descriptors: free the oldest handshake's and try again; with
      // none to free, pause rather than spin (the listener stays readable).
      // EAGAIN: every pending connection taken.
      if (errno == EMFILE || errno == ENFILE) {
        if (CloseOldestHandshake([](const Connection&) { return true; })) {
          continue;
        }
        absl::SleepFor(absl::Milliseconds(10));
      }
      return;
    }
    if (connections_.size() >= kMaxLinks) {
      ::close(fd);
      continue;
    }
    absl::StatusOr<TcpPeer> peer = TcpPeerOfSocket(fd);
    std::string group = peer.ok() ? peer->group : "";  // "": not named
    if (auto it = handshakes_of_group_.find(group);
        it != handshakes_of_group_.end() &&
        it->second >= limits_.max_handshakes_per_address) {
      CloseOldestHandshake(
          [&](const Connection& c) { return c.group == group; });
    } else if (handshaking_ >= limits_.max_handshakes) {
      // The oldest among the groups holding the most: a tie (many groups
      // of one each) closes the oldest handshake, never a node's newest.
      size_t most = 0;
      for (const auto& [g, count] : handshakes_of_group_) {
        most = std::max(most, count);
      }
      CloseOldestHandshake([&](const Connection& c) {
        auto held = handshakes_of_group_.find(c.group);
        return held != handshakes_of_group_.end() && held->second == most;
      });
    }
    // A node whose host went away is noticed (its link closed).
    SetRoundLinkSocketOptions(fd);
    auto c = std::make_shared<Connection>(fd, epoll_fd_);
    c->handshake_deadline = MonotonicNow() + kRoundLinkHandshakeTimeout;
    if (!NewRoundLinkNonce(&c->coordinator_nonce).ok()) {
      ::close(fd);
      continue;
    }
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(fd);
      continue;
    }
    c->group = std::move(group);
    connections_[fd] = c;
    ++handshaking_;
    ++handshakes_of_group_[c->group];
    c->handshake_entry = handshakes_.insert(handshakes_.end(), c);
    c->SendFrame(RoundLinkFrame(RoundLinkGreeting(c->coordinator_nonce)));
  }
}

bool RoundLinkServer::OnReadable(const std::shared_ptr<Connection>& c) {
  // Reads what is there, then handles every whole frame; at most
  // kMaxReadBytesPerWake, then the other connections' turn.
  for (size_t read = 0; read < kMaxReadBytesPerWake;) {
    ssize_t n = ::recv(c->fd(), read_buffer_.get(), kReadChunkBytes, 0);
    if (n == 0) {
      c->NoteEnd("its node closed it");
      return false;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      c->NoteEnd(
          absl::StrCat("a read from its node failed: ", std::strerror(errno)));
      return false;
    }
    read += static_cast<size_t>(n);
    c->in.append(read_buffer_.get(), static_cast<size_t>(n));
    // Handle frames as they complete, so a node cannot make us buffer
    // more than one frame's worth.
    size_t start = 0;
    while (c->in.size() - start >= kRoundLinkHeaderBytes) {
      const size_t available = c->in.size() - start;
      const uint32_t length = RoundLinkFrameLength(c->in.data() + start);
      if (c->phase == Connection::Phase::kHello) {
        if (length > kMaxRoundLinkHandshakeBytes) {
          c->SendLastWords(absl::ResourceExhaustedError(
              absl::StrCat("a round link frame of ", length, " bytes (at most ",
                           kMaxRoundLinkHandshakeBytes, ")")));
          return false;
        }
      } else if (length == 0 || available >= kRoundLinkTypedHeaderBytes) {
        // Its type's limit as soon as the type byte is here.
        if (absl::Status s = CheckRoundLinkFrameStart(c->in.data() + start,
                                                      "node", kNodeFrameTypes);
            !s.ok()) {
          c->SendLastWords(s);
          return false;
        }
      } else if (length > static_cast<size_t>(kMaxGrpcMessageBytes)) {
        // Too large for any type, before its type byte.
        c->SendLastWords(absl::ResourceExhaustedError(
            absl::StrCat("a round link frame of ", length, " bytes (at most ",
                         kMaxGrpcMessageBytes, ")")));
        return false;
      } else {
        break;  // the type byte is still to come
      }
      if (available < kRoundLinkHeaderBytes + length) break;
      absl::string_view frame(c->in.data() + start + kRoundLinkHeaderBytes,
                              length);
      start += kRoundLinkHeaderBytes + length;
      const bool keep = c->phase == Connection::Phase::kHello
                            ? OnHello(c, frame)
                            : OnFrame(c, frame);
      if (!keep) return false;
    }
    c->in.erase(0, start);
  }
  return true;
}

bool RoundLinkServer::OnHello(const std::shared_ptr<Connection>& c,
                              absl::string_view frame) {
  v1::RoundLinkWelcome welcome;
  v1::RoundLinkHello hello;
  absl::StatusOr<Admission> admission;
  if (!hello.ParseFromArray(frame.data(), static_cast<int>(frame.size())) ||
      hello.nonce().size() != kRoundLinkNonceBytes) {
    admission = absl::InvalidArgumentError(
        "the round link's first frame must be a RoundLinkHello with a "
        "32-byte nonce");
  } else {
    admission = handlers_.admit(
        hello,
        NodeTranscript(c->coordinator_nonce, hello.nonce(), hello.node()),
        CoordinatorTranscript(c->coordinator_nonce, hello.nonce(),
                              hello.node()));
  }
  EndHandshake(*c);
  if (!admission.ok()) {
    welcome.set_code(static_cast<int>(admission.status().code()));
    welcome.set_message(std::string(admission.status().message()));
    c->SendFrame(RoundLinkFrame(welcome.SerializeAsString()));
    c->phase = Connection::Phase::kOpen;  // no longer counted as handshaking
    return false;
  }
  c->phase = Connection::Phase::kOpen;
  c->node = admission->node;
  if (c->node.has_value()) {
    // One link per node: the newer one wins (a restarted daemon).
    auto [it, inserted] = link_of_node_.emplace(*c->node, c->fd());
    if (!inserted) {
      const int older = it->second;
      it->second = c->fd();
      auto old = connections_.find(older);
      if (old != connections_.end()) {
        old->second->SendLastWords(absl::AbortedError(
            "replaced by a newer round link from the same node"));
        Close(older);
      }
    }
  }
  c->admitted = true;
  {
    absl::MutexLock lock(&mu_);
    ++open_links_;
  }
  welcome.set_proof(admission->proof);
  c->SendFrame(RoundLinkFrame(welcome.SerializeAsString()));
  return true;
}

bool RoundLinkServer::OnFrame(const std::shared_ptr<Connection>& c,
                              absl::string_view frame) {
  RoundLinkFrameType type;
  absl::string_view message;
  if (absl::Status s =
          ParseRoundLinkFrame(frame, "node", kNodeFrameTypes, &type, &message);
      !s.ok()) {
    c->SendLastWords(s);
    return false;
  }
  switch (type) {
    case RoundLinkFrameType::kKvRequest:
      return OnKvRequest(c, message);
    case RoundLinkFrameType::kKvCancel:
      return OnKvCancel(c, message);
    default:
      return OnContribution(c, message);
  }
}

bool RoundLinkServer::OnKvRequest(const std::shared_ptr<Connection>& c,
                                  absl::string_view frame) {
  v1::KvLinkRequest request;
  if (!request.ParseFromArray(frame.data(), static_cast<int>(frame.size())) ||
      request.id() == 0 ||
      request.call_case() == v1::KvLinkRequest::CALL_NOT_SET) {
    c->SendLastWords(absl::InvalidArgumentError(
        "a round link kv request frame that is not a KvLinkRequest with an "
        "id and a call"));
    return false;
  }
  if (!handlers_.kv) {
    c->SendLastWords(
        absl::UnimplementedError("this round link serves no key-value calls"));
    return false;
  }
  auto cancellation = std::make_shared<CallCancellation>();
  if (absl::Status s = c->StartKv(request.id(), cancellation); !s.ok()) {
    c->SendLastWords(s);
    return false;
  }
  // The reply may come after the link is gone: it then finds the
  // connection closed (or already freed) and is dropped.
  std::weak_ptr<Connection> link = c;
  const uint64_t id = request.id();
  const absl::Time received = MonotonicNow();
  handlers_.kv(c->node, request, cancellation,
               [link, id, received, method = KvLinkMethod(request),
                observe = handlers_.observe](v1::KvLinkReply reply) {
                 if (observe) {
                   observe(method, static_cast<absl::StatusCode>(reply.code()),
                           MonotonicNow() - received);
                 }
                 reply.set_id(id);
                 if (auto c = link.lock()) c->FinishKv(reply);
               });
  return true;
}

bool RoundLinkServer::OnKvCancel(const std::shared_ptr<Connection>& c,
                                 absl::string_view frame) {
  v1::KvLinkCancel cancel;
  if (!cancel.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    c->SendLastWords(absl::InvalidArgumentError(
        "a round link kv cancel frame that is not a KvLinkCancel"));
    return false;
  }
  c->CancelKv(cancel.id());
  return true;
}

bool RoundLinkServer::OnContribution(const std::shared_ptr<Connection>& c,
                                     absl::string_view frame) {
  v1::ContributeWordsRequest request;
  absl::Status allowed;
  if (!request.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    allowed = absl::InvalidArgumentError(
        "a round link frame that is not a ContributeWordsRequest");
  } else {
    allowed = handlers_.authorize(c->node, request);
  }
  if (!allowed.ok()) {
    c->SendLastWords(allowed);
    return false;
  }
  // The outcome may come after the link is gone: it then finds the
  // connection closed (or already freed) and is dropped.
  std::weak_ptr<Connection> link = c;
  const uint64_t tag = request.tag();
  handlers_.contribute(
      request, [link, tag](std::shared_ptr<const WordRounds::Outcome> outcome) {
        if (auto c = link.lock()) c->Deliver(std::move(outcome), tag);
      });
  return true;
}

void RoundLinkServer::Close(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  std::shared_ptr<Connection> c = std::move(it->second);
  connections_.erase(it);
  if (c->phase == Connection::Phase::kHello) EndHandshake(*c);
  if (c->admitted) {
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      --open_links_;
      stopping = stopped_;
    }
    // Admitted links only (a node, at most one each): handshakes that end
    // are not logged, so unauthenticated connections cannot flood the log.
    if (!stopping) {
      const std::string why = c->end_reason();
      Log(absl::StrCat("round link of ",
                       c->node.has_value() ? absl::StrCat("node ", *c->node)
                                           : std::string("a node"),
                       " closed: ", why.empty() ? "by the coordinator" : why));
    }
  }
  if (c->node.has_value()) {
    auto link = link_of_node_.find(*c->node);
    if (link != link_of_node_.end() && link->second == fd) {
      link_of_node_.erase(link);
    }
  }
  c->Close();
}

void RoundLinkServer::ExpireHandshakes() {
  // Oldest first: stop at the first handshake still within its deadline.
  const absl::Time now = MonotonicNow();
  while (!handshakes_.empty()) {
    std::shared_ptr<Connection> c = handshakes_.front().lock();
    if (c != nullptr && c->handshake_deadline >= now) return;
    if (c != nullptr) Close(c->fd());  // ends its handshake: its entry goes
    // Never expected (an entry goes with its handshake), but never a loop.
    if (!handshakes_.empty() && handshakes_.front().lock() == c) {
      handshakes_.pop_front();
    }
  }
}

}  // namespace rankd
