#include "daemon/node/round_link.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "daemon/transport/round_link_protocol.h"

namespace rankd {
namespace {

// Connecting and the handshake poll in slices this long, so Stop is seen
// even before there is a connection to shut down.
constexpr absl::Duration kOpenPollSlice = absl::Milliseconds(50);

// Sends all of `bytes` (a blocking socket, bounded by its send timeout).
absl::Status SendAll(int fd, absl::string_view bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n =
        ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      return absl::UnavailableError(n == 0 ? "sent nothing"
                                           : std::strerror(errno));
    }
  }
  return absl::OkStatus();
}

}  // namespace

RoundLink::RoundLink(Options options)
    : options_(std::move(options)),
      name_(absl::StrCat("round link to coordinator at ",
                         options_.coordinator_address)),
      pending_(options_.coordinator_address),
      kv_calls_(name_, options_.max_kv_calls != 0 ? options_.max_kv_calls
                                                  : kMaxKvCallsPerRoundLink),
      cancel_target_(std::make_shared<CancelTarget>()) {
  {
    absl::MutexLock lock(&cancel_target_->mu);
    cancel_target_->link = this;
  }
  thread_ = std::thread([this] { Run(); });
}

RoundLink::~RoundLink() { Stop(); }

bool RoundLink::SendFrame(const std::string& frame) {
  int fd = -1;
  {
    absl::MutexLock lock(&mu_);
    if (!open_ || ended_) return false;
    fd = fd_;
  }
  if (!SendAll(fd, frame).ok()) {
    // Broken, or the coordinator took nothing for send_timeout: the
    // reader sees the shutdown and fails what waits, this frame's too.
    absl::MutexLock lock(&mu_);
    ::shutdown(fd, SHUT_RDWR);
  }
  return true;
}

bool RoundLink::Send(v1::ContributeWordsRequest request,
                     PendingRounds::RoundReply& reply, absl::Time deadline) {
  absl::MutexLock send_lock(&send_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!open_ || ended_) return false;
  }
  const uint64_t tag = pending_.Add(request.round(), deadline, reply);
  if (tag == 0) return false;
  request.set_tag(tag);
  SendFrame(RoundLinkTypedFrame(RoundLinkFrameType::kContribution,
                                request.SerializeAsString()));
  return true;
}

bool RoundLink::SendKv(v1::KvLinkRequest request,
                       PendingKvCalls::KvReply& reply, absl::Time deadline,
                       const CancellationRef& cancellation) {
  absl::Status refused;
  uint64_t id = 0;
  // The coordinator closes a link that sends a larger request (with every
  // local rank's calls on it): one rank's oversized call (a gRPC request
  // carries up to 64 MiB, unknown fields included) is refused alone here.
  // The id field still to be set takes at most 11 bytes, and the frame's
  // type byte counts against the bound too.
  if (const size_t bytes = request.ByteSizeLong() + 11 + 1;
      bytes > kMaxRoundLinkKvRequestBytes) {
    PendingKvCalls::KvReply taken = std::move(reply);
    taken(absl::InvalidArgumentError(
        absl::StrCat("a key-value request of ", bytes,
                     " bytes is larger than the round link carries (",
                     kMaxRoundLinkKvRequestBytes, " bytes)")));
    return true;
  }
  {
    absl::MutexLock send_lock(&send_mu_);
    {
      absl::MutexLock lock(&mu_);
      if (!open_ || ended_) return false;
    }
    absl::StatusOr<uint64_t> added = kv_calls_.Add(deadline, reply);
    if (!added.ok()) {
      refused = added.status();
    } else if (*added == 0) {
      return false;  // the link ended: never sent
    } else {
      id = *added;
      request.set_id(id);
      SendFrame(RoundLinkTypedFrame(RoundLinkFrameType::kKvRequest,
                                    request.SerializeAsString()));
    }
  }
  if (!refused.ok()) {
    reply(refused);
    return true;
  }
  if (cancellation != nullptr) {
    cancellation->OnCancel([target = cancel_target_, id] {
      absl::MutexLock lock(&target->mu);
      if (target->link != nullptr) target->link->CancelKv(id);
    });
  }
  return true;
}

void RoundLink::CancelKv(uint64_t id) {
  if (!kv_calls_.Waiting(id)) return;  // answered already
  v1::KvLinkCancel cancel;
  cancel.set_id(id);
  absl::MutexLock send_lock(&send_mu_);
  SendFrame(RoundLinkTypedFrame(RoundLinkFrameType::kKvCancel,
                                cancel.SerializeAsString()));
}

void RoundLink::ExpireOverdue(absl::Time now) {
  pending_.ExpireOverdue(now);
  // The coordinator counts a call against the link until it answers or is
  // cancelled: calls given up on here are cancelled there too, so that the
  // node's count of its calls in flight (which it keeps within the bound)
  // is never below the coordinator's (which cuts a node off above it).
  const std::vector<uint64_t> expired = kv_calls_.ExpireOverdue(now);
  if (expired.empty()) return;
  absl::MutexLock send_lock(&send_mu_);
  for (uint64_t id : expired) {
    v1::KvLinkCancel cancel;
    cancel.set_id(id);
    SendFrame(RoundLinkTypedFrame(RoundLinkFrameType::kKvCancel,
                                  cancel.SerializeAsString()));
  }
}

absl::Status RoundLink::WaitOpen(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return open_ || ended_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&settled), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("round link to coordinator at ",
                     options_.coordinator_address, " still opening"));
  }
  if (open_) return absl::OkStatus();
  return open_error_.ok() ? absl::UnavailableError("round link ended")
                          : open_error_;
}

void RoundLink::Stop() {
  {
    // Cancellations that fire from now on find no link.
    absl::MutexLock lock(&cancel_target_->mu);
    cancel_target_->link = nullptr;
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }
  if (thread_.joinable()) thread_.join();
}

void RoundLink::End(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || ended_ || !ended_by_.ok() || why.ok()) return;
  ended_by_ = std::move(why);
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void RoundLink::Run() {
  int fd = -1;
  absl::Status why = Open(&fd);
  const bool was_open = why.ok();
  if (options_.on_open) options_.on_open(why);
  if (was_open) why = ReadFrames(fd);
  {
    // Not while a Send writes on the socket.
    absl::MutexLock send_lock(&send_mu_);
    absl::MutexLock lock(&mu_);
    ended_ = true;
    open_ = false;
    if (stopping_) {
      why = absl::CancelledError("daemon is shutting down");
    } else if (!ended_by_.ok()) {
      why = ended_by_;
    }
    if (!was_open) open_error_ = why;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  pending_.Abandon(why);
  // A forwarded call may have been applied: it fails, never sent again.
  kv_calls_.Abandon(why.code() == absl::StatusCode::kCancelled
                        ? why
                        : absl::UnavailableError(absl::StrCat(
                              why.message(),
                              " (before the coordinator answered this "
                              "key-value call, which may have been applied)")));
  if (was_open && options_.on_end) options_.on_end(why);
}

namespace {

// Waits for `events` on `fd` until `deadline`, in slices, giving up once
// `stopping` says so.
absl::Status Await(int fd, short events, absl::Time deadline,
                   absl::FunctionRef<bool()> stopping) {
  while (true) {
    if (stopping()) return absl::CancelledError("daemon is shutting down");
    absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("timed out");
    }
    pollfd p{fd, events, 0};
    int ms = static_cast<int>(
        absl::ToInt64Milliseconds(std::min(left, kOpenPollSlice)) + 1);
    int n = ::poll(&p, 1, ms);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(std::strerror(errno));
    }
  }
}

// Reads exactly `size` bytes; polls with `deadline` first when it is
// finite (the handshake), else blocks (Stop shuts the socket down).
absl::Status ReadExactly(int fd, char* out, size_t size, absl::Time deadline,
                         absl::FunctionRef<bool()> stopping) {
  size_t got = 0;
  while (got < size) {
    if (deadline != absl::InfiniteFuture()) {
      if (auto s = Await(fd, POLLIN, deadline, stopping); !s.ok()) return s;
    }
    ssize_t n = ::recv(fd, out + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      return absl::UnavailableError("connection closed");
    } else if (errno != EINTR && errno != EAGAIN) {
      return absl::UnavailableError(std::strerror(errno));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadFrame(int fd, size_t max_bytes, absl::Time deadline,
                       absl::FunctionRef<bool()> stopping,
                       std::string* payload) {
  char header[kRoundLinkHeaderBytes];
  if (auto s = ReadExactly(fd, header, sizeof(header), deadline, stopping);
      !s.ok()) {
    return s;
  }
  const uint32_t length = RoundLinkFrameLength(header);
  if (length > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a frame of ", length, " bytes (at most ", max_bytes, ")"));
  }
  payload->resize(length);
  return ReadExactly(fd, payload->data(), length, deadline, stopping);
}

}  // namespace

absl::Status ShakeHandsAsNode(int fd, const v1::NodeRef& node,
                              absl::string_view node_token, absl::Time deadline,
                              absl::FunctionRef<bool()> stopping,
                              absl::string_view where) {
  auto failed = [&](const absl::Status& s, absl::string_view doing) {
    return absl::Status(s.code(),
                        absl::StrCat(where, ": ", doing, ": ", s.message()));
  };
  std::string payload;
  std::string coordinator_nonce;
  if (auto s = ReadFrame(fd, kMaxRoundLinkHandshakeBytes, deadline, stopping,
                         &payload);
      !s.ok()) {
    return failed(s, "no greeting");
  }
  if (auto s = ParseRoundLinkGreeting(payload, &coordinator_nonce); !s.ok()) {
    return failed(s, "bad greeting");
  }
  v1::RoundLinkHello hello;
  *hello.mutable_node() = node;
  if (auto s = NewRoundLinkNonce(hello.mutable_nonce()); !s.ok()) return s;
  if (!node_token.empty()) {
    hello.set_proof(TokenProof(
        node_token, NodeTranscript(coordinator_nonce, hello.nonce(), node)));
  }
  if (auto s = SendAll(fd, RoundLinkFrame(hello.SerializeAsString()));
      !s.ok()) {
    return failed(s, "cannot send hello");
  }
  if (auto s = ReadFrame(fd, kMaxRoundLinkHandshakeBytes, deadline, stopping,
                         &payload);
      !s.ok()) {
    return failed(s, "no welcome");
  }
  v1::RoundLinkWelcome welcome;
  if (!welcome.ParseFromString(payload)) {
    return absl::UnavailableError(
        absl::StrCat(where, ": the welcome is not a RoundLinkWelcome"));
  }
  if (welcome.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(welcome.code()),
                        absl::StrCat(where, " refused: ", welcome.message()));
  }
  if (!node_token.empty() &&
      !SecretsEqual(
          welcome.proof(),
          TokenProof(node_token, CoordinatorTranscript(coordinator_nonce,
                                                       hello.nonce(), node)))) {
    return absl::PermissionDeniedError(
        absl::StrCat(where,
                     ": the peer could not prove it holds the job's "
                     "node key"));
  }
  return absl::OkStatus();
}

absl::Status RoundLink::Open(int* fd_out) {
  const absl::Time deadline = MonotonicNow() + options_.open_timeout;
  const std::string where = absl::StrCat("round link to coordinator at ",
                                         options_.host, ":", options_.port);
  auto stopping = [this] {
    absl::MutexLock lock(&mu_);
    return stopping_ || !ended_by_.ok();
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(options_.port);
  if (int rc =
          ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat(where, ": cannot resolve host: ", ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(
      found, &::freeaddrinfo);
  absl::Status last = absl::UnavailableError("no address");
  int fd = -1;
  for (addrinfo* a = addresses.get(); a != nullptr && fd < 0; a = a->ai_next) {
    int s = ::socket(a->ai_family,
                     a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
      last = absl::UnavailableError(std::strerror(errno));
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || !ended_by_.ok()) {
        ::close(s);
        return absl::CancelledError("daemon is shutting down");
      }
      fd_ = s;  // from here on Run closes it
    }
    if (::connect(s, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = absl::UnavailableError(std::strerror(errno));
    } else if (auto w = Await(s, POLLOUT, deadline, stopping); !w.ok()) {
      last = w;
    } else {
      int error = 0;
      socklen_t len = sizeof(error);
      ::getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error == 0) {
        fd = s;
        break;
      }
      last = absl::UnavailableError(std::strerror(error));
    }
    absl::MutexLock lock(&mu_);
    ::close(s);
    fd_ = -1;
  }
  if (fd < 0) {
    return absl::Status(
        last.code(), absl::StrCat(where, ": cannot connect: ", last.message()));
  }
  // Sends block, bounded; a coordinator whose host went away is noticed.
  SetRoundLinkSocketOptions(fd);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval send_timeout = absl::ToTimeval(options_.send_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout,
               sizeof(send_timeout));

  if (absl::Status s = ShakeHandsAsNode(fd, options_.node, options_.node_token,
                                        deadline, stopping, where);
      !s.ok()) {
    return s;
  }
  *fd_out = fd;
  absl::MutexLock lock(&mu_);
  open_ = true;
  return absl::OkStatus();
}

absl::Status RoundLink::ReadFrames(int fd) {
  auto never = [] { return false; };
  auto ended = [this](absl::string_view why) {
    return absl::UnavailableError(absl::StrCat(name_, " ended: ", why));
  };
  std::string payload;
  v1::RoundOutcome outcome;
  while (true) {
    absl::Status s = ReadFrame(fd, static_cast<size_t>(kMaxGrpcMessageBytes),
                               absl::InfiniteFuture(), never, &payload);
    if (!s.ok()) return ended(s.message());
    RoundLinkFrameType type;
    absl::string_view message;
    if (s = ParseRoundLinkFrame(payload, "coordinator", kCoordinatorFrameTypes,
                                &type, &message);
        !s.ok()) {
      return ended(s.message());
    }
    if (type == RoundLinkFrameType::kKvReply) {
      v1::KvLinkReply reply;
      if (!reply.ParseFromArray(message.data(),
                                static_cast<int>(message.size()))) {
        return ended("it sent a kv reply frame that is not a KvLinkReply");
      }
      // An unknown id is a call this side gave up on (ExpireOverdue).
      kv_calls_.Answer(std::move(reply));
      continue;
    }
    outcome.Clear();
    if (!outcome.ParseFromArray(message.data(),
                                static_cast<int>(message.size()))) {
      return ended("it sent an outcome frame that is not a RoundOutcome");
    }
    if (outcome.tag() == 0 && outcome.code() != 0) {
      // The coordinator's reason for closing.
      return absl::Status(static_cast<absl::StatusCode>(outcome.code()),
                          absl::StrCat(name_, " closed by the coordinator: ",
                                       outcome.message()));
    }
    // An unknown tag is a round this side gave up on (ExpireOverdue).
    pending_.Answer(outcome);
  }
}

}  // namespace rankd
