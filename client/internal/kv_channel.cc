#include "client/internal/kv_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kv_frame.h"
#include "common/monotonic_clock.h"
#include "proto/status_details.h"

namespace rankd::internal {
namespace {

// Milliseconds until `deadline` for poll(): at least 1 while time is left
// (so a short wait does not spin), 0 once it passed.
int PollTimeout(absl::Time deadline) {
  const absl::Duration left = deadline - MonotonicNow();
  if (left <= absl::ZeroDuration()) return 0;
  if (left > absl::Hours(1)) return 3'600'000;
  return static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()), StatusDetailsOf(status));
}

const grpc::Status kDeadlineExceeded(grpc::StatusCode::DEADLINE_EXCEEDED,
                                     "Deadline Exceeded");

}  // namespace

KvChannel::KvChannel(int fd)
    : fd_(fd), reader_(std::make_unique<KvFrameReader>()) {}

KvChannel::~KvChannel() { ::close(fd_); }

absl::StatusOr<std::unique_ptr<KvChannel>> KvChannel::Connect(
    const std::string& path, absl::string_view ticket, absl::Time deadline) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key-value socket path ", path, " is too long"));
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create a Unix socket: ", std::strerror(errno)));
  }
  std::unique_ptr<KvChannel> channel(new KvChannel(fd));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  // A Unix socket connects at once or fails (EAGAIN: backlog full).
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the key-value socket ", path, ": ",
                     std::strerror(errno)));
  }
  std::string welcome;
  grpc::Status status = channel->Call(KvFrameKind::kHello, std::string(ticket),
                                      deadline, &welcome);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  return channel;
}

bool KvChannel::broken() const {
  absl::MutexLock lock(&mu_);
  return !broken_.ok();
}

void KvChannel::BreakLocked(absl::Status why) {
  if (broken_.ok()) broken_ = std::move(why);
  ::shutdown(fd_, SHUT_RDWR);
  replied_.SignalAll();
  written_.SignalAll();
}

absl::Status KvChannel::WriteFrame(const std::string& frame,
                                   absl::Time deadline) {
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd out = {fd_, POLLOUT, 0};
      const int timeout = PollTimeout(deadline);
      if (timeout == 0 || ::poll(&out, 1, timeout) == 0) {
        // Part of a frame may be out: the stream can no longer be framed.
        if (sent > 0) {
          return absl::UnavailableError(
              "the daemon took no more of a request before its deadline");
        }
        return absl::DeadlineExceededError("Deadline Exceeded");
      }
      continue;
    }
    return absl::UnavailableError(absl::StrCat(
        "the key-value channel to the daemon broke: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status KvChannel::ReadSome(absl::Time deadline) {
  pollfd in = {fd_, POLLIN, 0};
  const int ready = ::poll(&in, 1, PollTimeout(deadline));
  if (ready < 0 && errno != EINTR) {
    return absl::UnavailableError(absl::StrCat(
        "polling the key-value channel failed: ", std::strerror(errno)));
  }
  if (ready <= 0) return absl::OkStatus();
  char buffer[64 << 10];
  ssize_t n = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return absl::OkStatus();
  if (n == 0) {
    return absl::UnavailableError("the daemon closed the key-value channel");
  }
  if (n < 0) {
    return absl::UnavailableError(absl::StrCat(
        "the key-value channel to the daemon broke: ", std::strerror(errno)));
  }
  reader_->Append(buffer, static_cast<size_t>(n));
  while (true) {
    absl::StatusOr<std::optional<KvFrame>> frame = reader_->Next();
    if (!frame.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the daemon sent what is not a key-value frame: ",
                       frame.status().message()));
    }
    if (!frame->has_value()) return absl::OkStatus();
    if ((*frame)->kind != KvFrameKind::kReply) {
      return absl::UnavailableError(
          absl::StrCat("the daemon sent a ", KvFrameKindName((*frame)->kind),
                       " frame where only replies come"));
    }
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find((*frame)->id);
    // A reply whose caller gave up at its deadline has no waiter.
    if (it == waiters_.end()) continue;
    it->second->done = true;
    it->second->reply = std::move((*frame)->payload);
    waiters_.erase(it);
    replied_.SignalAll();
  }
}

grpc::Status KvChannel::Call(KvFrameKind kind, const std::string& payload,
                             absl::Time deadline, std::string* response) {
  Waiter waiter;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    while (writing_ && broken_.ok()) {
      if (MonotonicNow() >= deadline) return kDeadlineExceeded;
      // A timeout, not the deadline (see below).
      written_.WaitWithTimeout(&mu_, deadline - MonotonicNow());
    }
    if (!broken_.ok()) return ToGrpcStatus(broken_);
    writing_ = true;
    // The hello is request 0: the daemon answers it as 0.
    id = kind == KvFrameKind::kHello ? 0 : next_id_++;
    waiters_[id] = &waiter;
  }
  absl::Status written = WriteFrame(EncodeKvFrame(kind, id, payload), deadline);
  absl::MutexLock lock(&mu_);
  writing_ = false;
  written_.SignalAll();  // one of them writes next
  if (!written.ok()) {
    waiters_.erase(id);
    if (written.code() != absl::StatusCode::kDeadlineExceeded) {
      BreakLocked(written);
    }
    return ToGrpcStatus(written);
  }
  while (!waiter.done) {
    if (!broken_.ok()) {
      waiters_.erase(id);
      return ToGrpcStatus(broken_);
    }
    if (MonotonicNow() >= deadline) {
      waiters_.erase(id);
      return kDeadlineExceeded;
    }
    if (reading_) {
      // Another thread reads; it hands this thread its reply. A timeout,
      // not the deadline: `deadline` is on MonotonicNow's clock, which
      // absl would read as wall-clock time (a step of the wall clock would
      // make this spin, or sleep past the deadline).
      replied_.WaitWithTimeout(&mu_, deadline - MonotonicNow());
      continue;
    }
    reading_ = true;
    mu_.Unlock();
    absl::Status read = ReadSome(deadline);
    mu_.Lock();
    reading_ = false;
    if (!read.ok()) BreakLocked(read);
    // Someone else may be waiting to read now.
    replied_.SignalAll();
  }
  absl::Status daemon;
  absl::string_view body;
  if (absl::Status decoded = DecodeKvReply(waiter.reply, &daemon, &body);
      !decoded.ok()) {
    BreakLocked(absl::UnavailableError(absl::StrCat(
        "the daemon sent a malformed key-value reply: ", decoded.message())));
    return ToGrpcStatus(broken_);
  }
  if (daemon.ok()) response->assign(body.data(), body.size());
  return ToGrpcStatus(daemon);
}

namespace {

template <typename Request, typename Response, typename CallFn>
grpc::Status Typed(const Request& request, Response* response, CallFn&& call) {
  std::string bytes;
  grpc::Status status = call(request.SerializeAsString(), &bytes);
  if (status.ok() && !response->ParseFromString(bytes)) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "the daemon's key-value reply does not parse");
  }
  return status;
}

}  // namespace

#define RANKD_KV_CHANNEL_METHOD(Method, Kind)                                \
  grpc::Status KvChannel::Method(const v1::Kv##Method##Request& request,     \
                                 v1::Kv##Method##Response* response,         \
                                 absl::Time deadline) {                      \
    return Typed(request, response,                                          \
                 [&](const std::string& payload, std::string* bytes) {       \
                   return Call(KvFrameKind::Kind, payload, deadline, bytes); \
                 });                                                         \
  }

RANKD_KV_CHANNEL_METHOD(Set, kSet)
RANKD_KV_CHANNEL_METHOD(Get, kGet)
RANKD_KV_CHANNEL_METHOD(Add, kAdd)
RANKD_KV_CHANNEL_METHOD(Delete, kDelete)
RANKD_KV_CHANNEL_METHOD(Count, kCount)

#undef RANKD_KV_CHANNEL_METHOD

}  // namespace rankd::internal
