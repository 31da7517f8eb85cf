#include "daemon/transport/kv_socket.h"

#include <openssl/rand.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/monotonic_clock.h"
#include "daemon/call_cancellation.h"
#include "daemon/log.h"
#include "daemon/transport/security.h"
#include "daemon/transport/unix_listener.h"

namespace rankd {

inline constexpr size_t kTicketBytes = 32;

// One accepted connection. Its thread reads and parses requests while the
// connection has room (HasRoom); replies may be written by any thread (the
// agent answers from its own), never blocking one: what the socket does
// not take at once waits in `out_` for the connection's thread, which polls
// for room. Closing cancels the connection's waits; replies that come later
// are dropped.
class KvConnection {
 public:
  KvConnection(int fd, int wake_fd, size_t max_in_flight,
               size_t max_queued_bytes)
      : fd_(fd),
        wake_fd_(wake_fd),
        max_in_flight_(max_in_flight),
        max_queued_bytes_(max_queued_bytes) {}
  ~KvConnection() {
    if (fd_ >= 0) ::close(fd_);
    ::close(wake_fd_);
  }
  KvConnection(const KvConnection&) = delete;
  KvConnection& operator=(const KvConnection&) = delete;

  int fd() const { return fd_; }
  int wake_fd() const { return wake_fd_; }

  // Wakes the connection's thread.
  void Wake() const {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }

  // Registers request `id` as in flight with `cancellation` (may be null);
  // false when a request of that id is in flight already.
  bool Begin(uint64_t id, CancellationRef cancellation) {
    absl::MutexLock lock(&mu_);
    return in_flight_.emplace(id, std::move(cancellation)).second;
  }

  // Ends request `id` with `reply` (a reply payload).
  void Finish(uint64_t id, const std::string& reply) {
    absl::MutexLock lock(&mu_);
    const bool was_full = in_flight_.size() >= max_in_flight_;
    in_flight_.erase(id);
    SendLocked(EncodeKvFrame(KvFrameKind::kReply, id, reply));
    // The thread stopped reading at its fill and polls for nothing but
    // output: it must look again now that a request ended.
    if (was_full) Wake();
  }

  // Answers a frame that was never in flight.
  void Answer(uint64_t id, const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    SendLocked(
        EncodeKvFrame(KvFrameKind::kReply, id, EncodeKvReply(status, "")));
  }

  // Whether the thread may read and start more requests: fewer than its
  // fill in flight, and fewer than max_queued_bytes of replies unread.
  bool HasRoom() {
    absl::MutexLock lock(&mu_);
    return in_flight_.size() < max_in_flight_ &&
           out_.size() < max_queued_bytes_;
  }
  bool has_output() {
    absl::MutexLock lock(&mu_);
    return !out_.empty();
  }
  bool closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

  // Writes what the socket takes now.
  void Flush() {
    absl::MutexLock lock(&mu_);
    FlushLocked();
  }

  // Closes the connection: later replies are dropped, waits cancelled.
  void Close() {
    std::vector<CancellationRef> waits;
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      out_.clear();
      for (auto& [id, cancellation] : in_flight_) {
        if (cancellation != nullptr) waits.push_back(cancellation);
      }
      ::shutdown(fd_, SHUT_RDWR);
    }
    for (const CancellationRef& wait : waits) wait->Cancel();
  }

 private:
  void SendLocked(std::string frame) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_) return;
    const bool was_empty = out_.empty();
    out_.append(frame);
    FlushLocked();
    // The thread polls for room only when it knows there is output.
    if (was_empty && !out_.empty()) Wake();
  }

  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t sent = 0;
    while (!closed_ && sent < out_.size()) {
      ssize_t n = ::send(fd_, out_.data() + sent, out_.size() - sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      // The rank is gone: its thread sees the socket fail and closes.
      out_.clear();
      sent = 0;
      Wake();
      break;
    }
    out_.erase(0, sent);
  }

  const int fd_;
  const int wake_fd_;
  const size_t max_in_flight_;
  const size_t max_queued_bytes_;
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string out_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, CancellationRef> in_flight_
      ABSL_GUARDED_BY(mu_);
};

namespace {

// `status` as a channel whose library does (`error_reasons`) or does not
// read an error's reason may get it: an older library's decoder refuses
// the reason's byte (OpenKvChannelRequest.error_reasons).
absl::Status ForTheChannel(absl::Status status, bool error_reasons) {
  return error_reasons
             ? status
             : WithReason(std::move(status), ErrorReason::kUnspecified);
}

// A reply callback for request `id` of `connection`: the agent's answer,
// serialized, or its status, unchanged but for a reason the channel does not
// read (ForTheChannel); `done` hears its outcome.
template <typename Response>
Reply<Response> ReplyTo(std::shared_ptr<KvConnection> connection, uint64_t id,
                        std::function<void(absl::StatusCode)> done,
                        bool error_reasons) {
  return [connection = std::move(connection), id, done = std::move(done),
          error_reasons](absl::StatusOr<Response> result) {
    done(result.status().code());
    connection->Finish(
        id,
        result.ok()
            ? EncodeKvReply(absl::OkStatus(), result->SerializeAsString())
            : EncodeKvReply(ForTheChannel(result.status(), error_reasons), ""));
  };
}

// The Rank method a request frame stands for, as metrics name it.
const char* RankMethodOf(KvFrameKind kind) {
  switch (kind) {
    case KvFrameKind::kSet:
      return "/rankd.v1.Rank/KvSet";
    case KvFrameKind::kGet:
      return "/rankd.v1.Rank/KvGet";
    case KvFrameKind::kAdd:
      return "/rankd.v1.Rank/KvAdd";
    case KvFrameKind::kDelete:
      return "/rankd.v1.Rank/KvDelete";
    case KvFrameKind::kCount:
      return "/rankd.v1.Rank/KvCount";
    case KvFrameKind::kHello:
    case KvFrameKind::kReply:
      break;
  }
  return "/rankd.v1.Rank/unknown";
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvSocket>> KvSocket::Listen(
    const std::string& path, NodeAgent* agent, Options options) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the key-value socket ", path, " is longer than a Unix socket path (",
        sizeof(addr.sun_path) - 1, " bytes)"));
  }
  auto failed = [&](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot ", what, " the key-value socket ", path, ": ",
                     std::strerror(errno)));
  };
  // The daemon's own socket path was free (PrepareSocketPath), so a socket
  // file here is a stale one of an earlier daemon on that path.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the key-value socket path ", path, " holds something else"));
    }
    if (::unlink(path.c_str()) != 0) return failed("replace the stale");
  }
  absl::StatusOr<UnixListener> listener = ListenOnUnixSocket(path, failed);
  if (!listener.ok()) return listener.status();
  const int fd = listener->fd;
  const int wake = listener->wake;
  return std::unique_ptr<KvSocket>(
      new KvSocket(path, fd, wake, agent, options));
}

KvSocket::KvSocket(std::string path, int listen_fd, int wake_fd,
                   NodeAgent* agent, Options options)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      agent_(agent),
      options_(options) {}

KvSocket::~KvSocket() {
  Stop();
  ::close(wake_fd_);
}

void KvSocket::Serve() {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

void KvSocket::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true);
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (accept_thread_.joinable()) accept_thread_.join();
  ::close(listen_fd_);
  ::unlink(path_.c_str());
  absl::flat_hash_map<uint64_t, Served> served;
  {
    absl::MutexLock lock(&mu_);
    served.swap(served_);
  }
  for (auto& [id, one_served] : served) one_served.connection->Wake();
  for (auto& [id, one_served] : served) {
    if (one_served.thread.joinable()) one_served.thread.join();
  }
}

std::vector<std::thread> KvSocket::ReapLocked() {
  std::vector<std::thread> threads;
  for (auto it = served_.begin(); it != served_.end();) {
    if (!it->second.connection->closed()) {
      ++it;
      continue;
    }
    // Closed is the thread's last act but one; joining waits for it.
    if (it->second.thread.joinable()) {
      threads.push_back(std::move(it->second.thread));
    }
    served_.erase(it++);
  }
  return threads;
}

void KvSocket::AcceptLoop() {
  const std::string name = absl::StrCat("the key-value socket ", path_);
  while (!stopping_.load()) {
    std::optional<UnixPeer> peer =
        AcceptUnixPeer(UnixListener{listen_fd_, wake_fd_}, name);
    if (!peer.has_value()) return;
    const int fd = peer->fd;
    const ucred cred = peer->credentials;
    int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0) {
      ::close(fd);
      continue;
    }
    auto connection = std::make_shared<KvConnection>(
        fd, wake, options_.max_requests_in_flight,
        options_.max_queued_reply_bytes);
    std::vector<std::thread> ended;
    {
      absl::MutexLock lock(&mu_);
      ended = ReapLocked();
      if (served_.size() < options_.max_connections &&
          handshakes_.load() < options_.max_handshakes) {
        handshakes_.fetch_add(1);
        Served& served = served_[next_connection_++];
        served.connection = connection;
        served.thread = std::thread([this, connection, cred] {
          ServeConnection(connection, Peer{cred.pid, cred.uid});
        });
      }  // else `connection` closes the socket
    }
    for (std::thread& thread : ended) thread.join();
  }
}

absl::StatusOr<v1::OpenKvChannelResponse> KvSocket::Open(
    uint32_t rank, std::optional<uint32_t> token_rank, const RankCaller& caller,
    bool error_reasons) {
  unsigned char bytes[kTicketBytes];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("the random generator failed (RAND_bytes)");
  }
  std::string ticket(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  const absl::Time now = MonotonicNow();
  absl::MutexLock lock(&mu_);
  // Expired tickets go; at most one per rank stays.
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    if (it->second.expires <= now) {
      ticket_of_rank_.erase(it->second.binding.rank);
      tickets_.erase(it++);
    } else {
      ++it;
    }
  }
  if (auto old = ticket_of_rank_.find(rank); old != ticket_of_rank_.end()) {
    tickets_.erase(old->second);
  }
  ticket_of_rank_[rank] = ticket;
  tickets_[ticket] = Ticket{Binding{rank, token_rank, caller, error_reasons},
                            now + options_.handshake_timeout};
  v1::OpenKvChannelResponse response;
  response.set_path(path_);
  response.set_ticket(std::move(ticket));
  return response;
}

absl::StatusOr<KvSocket::Binding> KvSocket::Redeem(absl::string_view ticket,
                                                   Peer peer) {
  absl::MutexLock lock(&mu_);
  auto it =
      ticket.size() == kTicketBytes ? tickets_.find(ticket) : tickets_.end();
  if (it == tickets_.end() || it->second.expires <= MonotonicNow()) {
    if (it != tickets_.end()) {
      ticket_of_rank_.erase(it->second.binding.rank);
      tickets_.erase(it);
    }
    return absl::UnauthenticatedError(
        "the key-value channel needs a ticket from Rank.OpenKvChannel, asked "
        "for on the connection the rank joined on and presented within "
        "seconds; this one is not (or no longer) valid");
  }
  Binding binding = it->second.binding;
  ticket_of_rank_.erase(binding.rank);
  tickets_.erase(it);
  const RankCaller& caller = binding.caller;
  if ((caller.pid != 0 && peer.pid != caller.pid) ||
      (caller.uid.has_value() && peer.uid != *caller.uid)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the key-value channel ticket of rank ", binding.rank,
                     " was issued to ", caller.Describe(), ", not to pid ",
                     peer.pid, " (uid ", peer.uid, ")"));
  }
  return binding;
}

void KvSocket::AdoptChannel(uint32_t rank,
                            const std::shared_ptr<KvConnection>& connection) {
  std::shared_ptr<KvConnection> earlier;
  {
    absl::MutexLock lock(&mu_);
    std::weak_ptr<KvConnection>& held = channel_of_rank_[rank];
    earlier = held.lock();
    held = connection;
    // Forget ranks whose channel ended, so the map stays within the ranks
    // that have one.
    for (auto it = channel_of_rank_.begin(); it != channel_of_rank_.end();) {
      if (it->second.expired()) {
        channel_of_rank_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  // A process has one channel per rank (it joined once): an earlier one is
  // a stale process's, or one the library replaced. Its waits end now.
  if (earlier != nullptr && earlier != connection) earlier->Close();
}

void KvSocket::ServeConnection(const std::shared_ptr<KvConnection>& connection,
                               Peer peer) {
  const absl::Time handshake_deadline =
      MonotonicNow() + options_.handshake_timeout;
  std::optional<Binding> binding;
  KvFrameReader reader;
  // Nothing longer than a ticket before the ticket.
  reader.LimitPayload(kMaxKvTicketBytes);
  std::vector<char> buffer(64 << 10);
  auto end_handshake = [&] {
    if (!binding.has_value()) handshakes_.fetch_sub(1);
  };
  // Takes the frames read so far, one at a time while the connection has
  // room (the rest wait in `reader` for room); false when it must close.
  auto take_frames = [&]() -> bool {
    while (connection->HasRoom()) {
      absl::StatusOr<std::optional<KvFrame>> frame = reader.Next();
      if (!frame.ok()) {
        connection->Answer(0, frame.status());
        return false;
      }
      if (!frame->has_value()) return true;
      KvFrame& next = **frame;
      if (!binding.has_value()) {
        absl::StatusOr<Binding> granted =
            next.kind == KvFrameKind::kHello
                ? Redeem(next.payload, peer)
                : absl::UnauthenticatedError(absl::StrCat(
                      "the key-value channel's first frame must be its "
                      "hello with a ticket, not ",
                      KvFrameKindName(next.kind)));
        if (!granted.ok()) {
          connection->Answer(next.id, granted.status());
          return false;
        }
        handshakes_.fetch_sub(1);
        binding = *std::move(granted);
        reader.LimitPayload(kMaxKvFramePayloadBytes);
        AdoptChannel(binding->rank, connection);
        connection->Answer(next.id, absl::OkStatus());
        continue;
      }
      if (next.kind == KvFrameKind::kHello ||
          next.kind == KvFrameKind::kReply) {
        connection->Answer(next.id,
                           absl::InvalidArgumentError(absl::StrCat(
                               "a ", KvFrameKindName(next.kind),
                               " frame is not a request on an open key-value "
                               "channel")));
        return false;
      }
      Dispatch(connection, *binding, next.kind, next.id, next.payload);
    }
    return true;
  };
  while (!stopping_.load() && !connection->closed()) {
    if (!take_frames()) {
      connection->Flush();
      break;
    }
    // Without room the socket is not read: the thread waits for a request
    // to end (KvConnection::Finish wakes it) or for the rank to take its
    // replies (POLLOUT).
    const bool room = connection->HasRoom();
    short events = room ? POLLIN : 0;
    if (connection->has_output()) events |= POLLOUT;
    int timeout_ms = -1;
    if (!binding.has_value()) {
      const absl::Duration left = handshake_deadline - MonotonicNow();
      if (left <= absl::ZeroDuration()) break;
      timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    }
    pollfd fds[2] = {{connection->fd(), events, 0},
                     {connection->wake_fd(), POLLIN, 0}};
    if (::poll(fds, 2, timeout_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) {
      uint64_t count;
      (void)!::read(connection->wake_fd(), &count, sizeof(count));
    }
    if (fds[0].revents & POLLOUT) connection->Flush();
    if (fds[0].revents & (POLLERR | POLLNVAL)) break;
    if (!(fds[0].revents & (POLLIN | POLLHUP))) continue;
    if (!room) break;  // hung up while it had its fill
    ssize_t n =
        ::recv(connection->fd(), buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    reader.Append(buffer.data(), static_cast<size_t>(n));
  }
  end_handshake();
  connection->Close();
}

void KvSocket::Dispatch(const std::shared_ptr<KvConnection>& connection,
                        const Binding& binding, KvFrameKind kind, uint64_t id,
                        const std::string& payload) {
  // Every request is counted as the gRPC call it stands for would be.
  const absl::Time start = MonotonicNow();
  std::function<void(absl::StatusCode)> done = [observe = options_.observe,
                                                method = RankMethodOf(kind),
                                                start](absl::StatusCode code) {
    if (observe) observe(method, code, MonotonicNow() - start);
  };
  auto refuse = [&](const absl::Status& refusal) {
    done(refusal.code());
    connection->Answer(id, ForTheChannel(refusal, binding.error_reasons));
  };
  // Parses the request, applies the Rank service's checks, then runs it.
  auto run = [&](auto request, auto&& call, CancellationRef cancellation) {
    if (!request.ParseFromString(payload)) {
      refuse(absl::InvalidArgumentError(
          absl::StrCat("malformed ", KvFrameKindName(kind),
                       " request on the key-value channel")));
      return;
    }
    const uint32_t rank = request.member().rank();
    absl::Status admitted = CheckTokenRank(binding.token_rank, rank);
    if (admitted.ok()) admitted = agent_->CheckCaller(rank, binding.caller);
    if (!admitted.ok()) {
      refuse(admitted);
      return;
    }
    if (!connection->Begin(id, cancellation)) {
      refuse(absl::InvalidArgumentError(absl::StrCat(
          "request ", id, " is already in flight on this key-value channel")));
      return;
    }
    call(request);
  };
  switch (kind) {
    case KvFrameKind::kSet:
      run(
          v1::KvSetRequest(),
          [&](const v1::KvSetRequest& request) {
            agent_->KvSet(request,
                          ReplyTo<v1::KvSetResponse>(connection, id, done,
                                                     binding.error_reasons));
          },
          nullptr);
      return;
    case KvFrameKind::kGet: {
      auto cancellation = std::make_shared<CallCancellation>();
      run(
          v1::KvGetRequest(),
          [&](const v1::KvGetRequest& request) {
            agent_->KvGet(request,
                          ReplyTo<v1::KvGetResponse>(connection, id, done,
                                                     binding.error_reasons),
                          cancellation);
          },
          cancellation);
      return;
    }
    case KvFrameKind::kAdd:
      run(
          v1::KvAddRequest(),
          [&](const v1::KvAddRequest& request) {
            agent_->KvAdd(request,
                          ReplyTo<v1::KvAddResponse>(connection, id, done,
                                                     binding.error_reasons));
          },
          nullptr);
      return;
    case KvFrameKind::kDelete:
      run(
          v1::KvDeleteRequest(),
          [&](const v1::KvDeleteRequest& request) {
            agent_->KvDelete(
                request, ReplyTo<v1::KvDeleteResponse>(connection, id, done,
                                                       binding.error_reasons));
          },
          nullptr);
      return;
    case KvFrameKind::kCount:
      run(
          v1::KvCountRequest(),
          [&](const v1::KvCountRequest& request) {
            agent_->KvCount(
                request, ReplyTo<v1::KvCountResponse>(connection, id, done,
                                                      binding.error_reasons));
          },
          nullptr);
      return;
    case KvFrameKind::kHello:
    case KvFrameKind::kReply:
      break;
  }
}

}  // namespace rankd
