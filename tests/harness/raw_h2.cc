#include "tests/harness/raw_h2.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rankd::testing {
namespace {

constexpr uint8_t kData = 0x0;
constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;
constexpr uint8_t kSettings = 0x4;
constexpr uint8_t kPing = 0x6;
constexpr uint8_t kGoaway = 0x7;
constexpr uint8_t kWindowUpdate = 0x8;
constexpr uint8_t kEndStream = 0x1;
constexpr uint8_t kAck = 0x1;
constexpr uint8_t kEndHeaders = 0x4;
constexpr int64_t kMaxFrame = 16384;

uint32_t Be32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 3]));
}

void PutBe32(std::string* s, uint32_t v) {
  s->push_back(static_cast<char>(v >> 24));
  s->push_back(static_cast<char>(v >> 16));
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}

// HPACK integer with an `n`-bit prefix whose high bits are `first`.
void PutHpackInt(std::string* s, uint8_t first, int n, uint32_t v) {
  const uint32_t max = (1u << n) - 1;
  if (v < max) {
    s->push_back(static_cast<char>(first | v));
    return;
  }
  s->push_back(static_cast<char>(first | max));
  v -= max;
  while (v >= 128) {
    s->push_back(static_cast<char>((v % 128) + 128));
    v /= 128;
  }
  s->push_back(static_cast<char>(v));
}

// A literal header field without indexing, new name, no Huffman coding.
void PutLiteral(std::string* s, const std::string& name,
                const std::string& value) {
  s->push_back(0x00);
  PutHpackInt(s, 0x00, 7, static_cast<uint32_t>(name.size()));
  s->append(name);
  PutHpackInt(s, 0x00, 7, static_cast<uint32_t>(value.size()));
  s->append(value);
}

}  // namespace

int ConnectLoopback(int port, absl::Duration timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      ::close(fd);
      return -1;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) !=
            1 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      ::close(fd);
      return -1;
    }
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

absl::StatusOr<std::unique_ptr<RawH2Connection>> RawH2Connection::Open(
    int port, absl::Duration timeout) {
  int fd = ConnectLoopback(port, timeout);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to 127.0.0.1:", port, ": ", std::strerror(errno)));
  }
  auto c = std::unique_ptr<RawH2Connection>(new RawH2Connection(fd));
  c->out_ = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  c->Queue(kSettings, 0, 0, "");
  c->Flush();
  return c;
}

RawH2Connection::RawH2Connection(int fd) : fd_(fd) {}

RawH2Connection::~RawH2Connection() { Close(); }

void RawH2Connection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RawH2Connection::Queue(uint8_t type, uint8_t flags, uint32_t stream,
                            const std::string& payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  out_.push_back(static_cast<char>(n >> 16));
  out_.push_back(static_cast<char>(n >> 8));
  out_.push_back(static_cast<char>(n));
  out_.push_back(static_cast<char>(type));
  out_.push_back(static_cast<char>(flags));
  PutBe32(&out_, stream & 0x7fffffffu);
  out_.append(payload);
}

bool RawH2Connection::Flush() {
  while (fd_ >= 0 && !out_.empty()) {
    ssize_t n = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    Close();
    return false;
  }
  return fd_ >= 0;
}

uint32_t RawH2Connection::StartCall(
    const std::string& path, uint32_t declared, int64_t budget,
    const std::map<std::string, std::string>& metadata) {
  const uint32_t id = next_stream_;
  next_stream_ += 2;
  std::string block;
  block.push_back(static_cast<char>(0x83));  // :method POST
  block.push_back(static_cast<char>(0x86));  // :scheme http
  PutLiteral(&block, ":path", path);
  PutLiteral(&block, ":authority", "127.0.0.1");
  PutLiteral(&block, "content-type", "application/grpc");
  PutLiteral(&block, "te", "trailers");
  for (const auto& [name, value] : metadata) PutLiteral(&block, name, value);
  Queue(kHeaders, kEndHeaders, id, block);
  Stream& s = streams_[id];
  s.declared = declared;
  s.budget = std::min<int64_t>(budget, declared);
  s.window = initial_stream_window_;
  // The gRPC message prefix: not compressed, then the declared length.
  std::string prefix(1, '\0');
  PutBe32(&prefix, declared);
  Queue(kData, 0, id, prefix);
  s.window -= 5;
  conn_window_ -= 5;
  SendData();
  Flush();
  return id;
}

void RawH2Connection::SendData() {
  for (auto& [id, s] : streams_) {
    if (s.reset || s.closed) continue;
    while (s.sent < s.budget && s.window > 0 && conn_window_ > 0 &&
           out_.size() < (1u << 20)) {
      int64_t n =
          std::min({s.budget - s.sent, s.window, conn_window_, kMaxFrame});
      Queue(kData, 0, id, std::string(static_cast<size_t>(n), 'x'));
      s.sent += n;
      s.window -= n;
      conn_window_ -= n;
    }
  }
}

bool RawH2Connection::ReadFrames() {
  char buffer[65536];
  while (fd_ >= 0) {
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n > 0) {
      in_.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    Close();  // EOF or error
    break;
  }
  while (in_.size() >= 9) {
    const uint32_t length =
        (static_cast<uint32_t>(static_cast<uint8_t>(in_[0])) << 16) |
        (static_cast<uint32_t>(static_cast<uint8_t>(in_[1])) << 8) |
        static_cast<uint32_t>(static_cast<uint8_t>(in_[2]));
    if (in_.size() < 9 + length) break;
    const uint8_t type = static_cast<uint8_t>(in_[3]);
    const uint8_t flags = static_cast<uint8_t>(in_[4]);
    const uint32_t stream = Be32(in_, 5) & 0x7fffffffu;
    HandleFrame(type, flags, stream, in_.substr(9, length));
    in_.erase(0, 9 + length);
  }
  return fd_ >= 0;
}

void RawH2Connection::HandleFrame(uint8_t type, uint8_t flags, uint32_t stream,
                                  const std::string& payload) {
  switch (type) {
    case kSettings:
      if (flags & kAck) return;
      for (size_t at = 0; at + 6 <= payload.size(); at += 6) {
        const uint16_t id =
            static_cast<uint16_t>((static_cast<uint8_t>(payload[at]) << 8) |
                                  static_cast<uint8_t>(payload[at + 1]));
        const uint32_t value = Be32(payload, at + 2);
        if (id == 0x3) max_streams_ = value;
        if (id == 0x4) {
          const int64_t delta = int64_t{value} - initial_stream_window_;
          initial_stream_window_ = value;
          for (auto& [sid, s] : streams_) s.window += delta;
        }
      }
      Queue(kSettings, kAck, 0, "");
      return;
    case kPing:
      if (!(flags & kAck)) Queue(kPing, kAck, 0, payload);
      return;
    case kWindowUpdate:
      if (payload.size() == 4) {
        const int64_t inc = Be32(payload, 0) & 0x7fffffffu;
        if (stream == 0) {
          conn_window_ += inc;
        } else if (auto it = streams_.find(stream); it != streams_.end()) {
          it->second.window += inc;
        }
      }
      return;
    case kRstStream:
      if (auto it = streams_.find(stream); it != streams_.end()) {
        it->second.reset = true;
        if (payload.size() == 4) it->second.reset_code = Be32(payload, 0);
      }
      return;
    case kHeaders:
      if (flags & kEndStream) {
        if (auto it = streams_.find(stream); it != streams_.end()) {
          it->second.closed = true;
        }
      }
      return;
    case kGoaway:
      goaway_ = true;
      if (payload.size() >= 8) goaway_code_ = Be32(payload, 4);
      return;
    default:
      return;  // DATA (answers), CONTINUATION, PRIORITY: not needed
  }
}

bool RawH2Connection::Pump() {
  if (fd_ < 0) return false;
  ReadFrames();
  if (fd_ < 0) return false;
  SendData();
  return Flush();
}

int RawH2Connection::live_streams() const {
  int n = 0;
  for (const auto& [id, s] : streams_) n += (s.reset || s.closed) ? 0 : 1;
  return n;
}

int64_t RawH2Connection::bytes_sent() const {
  int64_t n = 0;
  for (const auto& [id, s] : streams_) n += s.sent;
  return n;
}

}  // namespace rankd::testing
