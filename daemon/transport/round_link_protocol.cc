#include "daemon/transport/round_link_protocol.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/rand.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/limits.h"

namespace rankd {
namespace {

std::string Transcript(absl::string_view side,
                       absl::string_view coordinator_nonce,
                       absl::string_view node_nonce, const v1::NodeRef& node) {
  return absl::StrCat("rankd round link v1 ", side, "\n",
                      coordinator_nonce.size(), ":", coordinator_nonce, "\n",
                      node_nonce.size(), ":", node_nonce, "\n",
                      node.job_id().size(), ":", node.job_id(), "\n",
                      node.node_index(), "\n", node.daemon_incarnation());
}

}  // namespace

std::string RoundLinkFrameHeader(uint32_t length) {
  char bytes[kRoundLinkHeaderBytes];
  for (size_t i = 0; i < kRoundLinkHeaderBytes; ++i) {
    bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  }
  return std::string(bytes, kRoundLinkHeaderBytes);
}

std::string RoundLinkFrame(absl::string_view payload) {
  return absl::StrCat(
      RoundLinkFrameHeader(static_cast<uint32_t>(payload.size())), payload);
}

uint32_t RoundLinkFrameLength(const char* header) {
  uint32_t length = 0;
  for (size_t i = 0; i < kRoundLinkHeaderBytes; ++i) {
    length |= static_cast<uint32_t>(static_cast<unsigned char>(header[i]))
              << (8 * i);
  }
  return length;
}

std::string RoundLinkTypedFrameHeader(RoundLinkFrameType type,
                                      size_t message_length) {
  std::string head =
      RoundLinkFrameHeader(static_cast<uint32_t>(message_length + 1));
  head.push_back(static_cast<char>(type));
  return head;
}

std::string RoundLinkTypedFrame(RoundLinkFrameType type,
                                absl::string_view message) {
  return absl::StrCat(RoundLinkTypedFrameHeader(type, message.size()), message);
}

std::string RoundLinkFrameTypeName(uint8_t type) {
  switch (static_cast<RoundLinkFrameType>(type)) {
    case RoundLinkFrameType::kContribution:
      return "contribution";
    case RoundLinkFrameType::kOutcome:
      return "outcome";
    case RoundLinkFrameType::kKvRequest:
      return "kv request";
    case RoundLinkFrameType::kKvCancel:
      return "kv cancel";
    case RoundLinkFrameType::kKvReply:
      return "kv reply";
  }
  return absl::StrCat("type ", type);
}

size_t MaxRoundLinkFrameBytes(RoundLinkFrameType type) {
  switch (type) {
    case RoundLinkFrameType::kKvRequest:
      return kMaxRoundLinkKvRequestBytes;
    case RoundLinkFrameType::kKvCancel:
      return 64;
    default:
      return static_cast<size_t>(kMaxGrpcMessageBytes);
  }
}

namespace {

absl::Status EmptyFrameError() {
  return absl::InvalidArgumentError(
      "an empty round link frame (every frame after the handshake starts "
      "with its type)");
}

// OK when `type` is one of `allowed` and `length` fits it.
absl::Status CheckTypeAndLength(uint8_t type, size_t length,
                                absl::string_view from,
                                absl::Span<const RoundLinkFrameType> allowed) {
  bool known = false;
  for (RoundLinkFrameType t : allowed) {
    known = known || static_cast<uint8_t>(t) == type;
  }
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("a round link frame of ", RoundLinkFrameTypeName(type),
                     ", which the ", from, " does not send"));
  }
  const size_t limit =
      MaxRoundLinkFrameBytes(static_cast<RoundLinkFrameType>(type));
  if (length > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a round link ", RoundLinkFrameTypeName(type),
                     " frame of ", length, " bytes (at most ", limit, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseRoundLinkFrame(absl::string_view payload,
                                 absl::string_view from,
                                 absl::Span<const RoundLinkFrameType> allowed,
                                 RoundLinkFrameType* type,
                                 absl::string_view* message) {
  if (payload.empty()) {
    return EmptyFrameError();
  }
  const uint8_t byte = static_cast<uint8_t>(payload[0]);
  if (auto s = CheckTypeAndLength(byte, payload.size(), from, allowed);
      !s.ok()) {
    return s;
  }
  *type = static_cast<RoundLinkFrameType>(byte);
  *message = payload.substr(1);
  return absl::OkStatus();
}

absl::Status CheckRoundLinkFrameStart(
    const char* start, absl::string_view from,
    absl::Span<const RoundLinkFrameType> allowed) {
  const uint32_t length = RoundLinkFrameLength(start);
  if (length == 0) {
    return EmptyFrameError();
  }
  return CheckTypeAndLength(static_cast<uint8_t>(start[kRoundLinkHeaderBytes]),
                            length, from, allowed);
}

std::string RoundLinkGreeting(absl::string_view nonce) {
  return absl::StrCat(absl::string_view(kRoundLinkMagic, kRoundLinkMagicBytes),
                      nonce);
}

absl::Status ParseRoundLinkGreeting(absl::string_view payload,
                                    std::string* nonce) {
  if (payload.size() != kRoundLinkMagicBytes + kRoundLinkNonceBytes ||
      payload.substr(0, kRoundLinkMagicBytes) !=
          absl::string_view(kRoundLinkMagic, kRoundLinkMagicBytes)) {
    return absl::InvalidArgumentError(
        "the peer did not greet as a rankd round link (another service on "
        "that port?)");
  }
  *nonce = std::string(payload.substr(kRoundLinkMagicBytes));
  return absl::OkStatus();
}

std::string NodeTranscript(absl::string_view coordinator_nonce,
                           absl::string_view node_nonce,
                           const v1::NodeRef& node) {
  return Transcript("node", coordinator_nonce, node_nonce, node);
}

std::string CoordinatorTranscript(absl::string_view coordinator_nonce,
                                  absl::string_view node_nonce,
                                  const v1::NodeRef& node) {
  return Transcript("coordinator", coordinator_nonce, node_nonce, node);
}

absl::Status NewRoundLinkNonce(std::string* nonce) {
  unsigned char bytes[kRoundLinkNonceBytes];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return absl::InternalError("the random generator failed (RAND_bytes)");
  }
  nonce->assign(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  return absl::OkStatus();
}

void SetKvLinkError(const absl::Status& status, v1::KvLinkReply* reply) {
  reply->set_code(static_cast<int>(status.code()));
  reply->set_message(std::string(status.message()));
  reply->set_reason(static_cast<v1::ErrorReason>(ReasonOf(status)));
}

absl::Status KvLinkReplyStatus(const v1::KvLinkReply& reply) {
  if (reply.code() == 0) return absl::OkStatus();
  return WithReason(absl::Status(static_cast<absl::StatusCode>(reply.code()),
                                 reply.message()),
                    ErrorReasonFromWire(static_cast<uint32_t>(reply.reason())));
}

void SetRoundLinkSocketOptions(int fd) {
  const int one = 1;
  const int idle_s = 5, interval_s = 2, probes = 5;
  const unsigned int user_timeout_ms = static_cast<unsigned int>(
      absl::ToInt64Milliseconds(kRoundLinkDeadPeerTimeout));
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms,
               sizeof(user_timeout_ms));
}

}  // namespace rankd
