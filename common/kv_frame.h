// common/kv_frame.h: the frames of the key-value channel, the second Unix
// socket through which a rank sends its key-value calls to its node's
// daemon without a gRPC call each (docs/architecture.md, "Local fast
// path"; the daemon's end is daemon/transport/kv_socket.h, the rank's
// client/internal/kv_channel.h).
//
// Every frame is a kKvFrameHeaderBytes header followed by its payload:
//   bytes 0-3   payload length, little-endian (at most kMaxKvFramePayloadBytes)
//   byte  4     kind (KvFrameKind)
//   bytes 5-7   zero
//   bytes 8-15  request id, little-endian: a reply carries its request's
// A channel opens with the rank's kHello (payload: the ticket that
// Rank.OpenKvChannel answered, id 0); the daemon answers kReply id 0, OK or
// why it refuses (and then closes). Then the rank sends requests (payload:
// the serialized v1 request of the same name as on the Rank service) with
// ids of its choosing, and the daemon answers each with a kReply whose
// payload is EncodeKvReply(status, serialized v1 response). Replies come in
// any order: a blocking get does not hold up the calls behind it.
//
// Both ends are processes that do not trust each other: every decoder
// checks lengths before use and says precisely what is wrong.
//
// Depends on absl, common/error_reason and common/kv_limits (part of
// common/limits).
#ifndef RANKD_COMMON_KV_FRAME_H_
#define RANKD_COMMON_KV_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/kv_limits.h"

namespace rankd {

inline constexpr size_t kKvFrameHeaderBytes = 16;
// Largest payload: a compare-and-set carries a key, a value and the value
// it expects, plus the member reference and protobuf framing.
inline constexpr size_t kMaxKvFramePayloadBytes =
    2 * kMaxKvValueBytes + kMaxKvKeyBytes + 4096;
// Longest ticket a hello may carry.
inline constexpr size_t kMaxKvTicketBytes = 64;
// Longest status message a reply may carry.
inline constexpr size_t kMaxKvReplyMessageBytes = 64 << 10;

enum class KvFrameKind : uint8_t {
  kHello = 1,
  kReply = 2,
  kSet = 3,
  kGet = 4,
  kAdd = 5,
  kDelete = 6,
  kCount = 7,
};

// "hello", "reply", "KvSet", ... for messages; "kind 9" for others.
std::string KvFrameKindName(KvFrameKind kind);

struct KvFrame {
  KvFrameKind kind = KvFrameKind::kReply;
  uint64_t id = 0;
  std::string payload;
};

// The whole frame: header, then `payload` (which must be at most
// kMaxKvFramePayloadBytes; callers check sizes first).
std::string EncodeKvFrame(KvFrameKind kind, uint64_t id,
                          absl::string_view payload);

// A reply's payload: the status code (4 bytes), the message's length
// (4 bytes) and the message (cut to kMaxKvReplyMessageBytes), then
// `response` (the serialized response) when `status` is OK, or, for an
// error that carries a reason (common/error_reason.h), that reason's number
// (1 byte; nothing after the message when it carries none).
std::string EncodeKvReply(const absl::Status& status,
                          absl::string_view response);
// Splits a reply payload into the daemon's status (with its reason, if it
// sent one; a number this build does not know reads as none) and the
// response bytes (a view into `payload`; empty for an error).
// InvalidArgument naming what is wrong when the payload is truncated, its
// code is not a status code, its message is longer than allowed or than the
// payload, or an error carries more than a reason after its message.
absl::Status DecodeKvReply(absl::string_view payload, absl::Status* status,
                           absl::string_view* response);

// Reassembles frames from a byte stream. Holds at most one frame's bytes
// beyond what was appended last. Not thread-safe.
class KvFrameReader {
 public:
  void Append(const char* data, size_t size) { buffer_.append(data, size); }

  // The longest payload Next accepts from now on (at most, and by default,
  // kMaxKvFramePayloadBytes): the daemon takes no more than a ticket's
  // bytes before a channel presented one.
  void LimitPayload(size_t bytes) {
    max_payload_ =
        bytes < kMaxKvFramePayloadBytes ? bytes : kMaxKvFramePayloadBytes;
  }

  // The next whole frame, nullopt when more bytes are needed, or
  // InvalidArgument when the bytes cannot be a frame: an unknown kind,
  // nonzero reserved bytes, or a payload longer than the limit
  // (LimitPayload; said as soon as the header arrives, before any of the
  // payload is held). After an error the stream is unusable.
  absl::StatusOr<std::optional<KvFrame>> Next();

  // Bytes received but not yet returned as a frame (a truncated frame
  // when the stream ended).
  size_t pending_bytes() const { return buffer_.size() - consumed_; }

 private:
  std::string buffer_;
  size_t consumed_ = 0;
  size_t max_payload_ = kMaxKvFramePayloadBytes;
};

}  // namespace rankd

#endif  // RANKD_COMMON_KV_FRAME_H_
