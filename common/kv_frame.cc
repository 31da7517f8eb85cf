#include "common/kv_frame.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"

namespace rankd {
namespace {

void PutLe(std::string* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

uint64_t GetLe(const char* in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[i]))
             << (8 * i);
  }
  return value;
}

bool KnownKind(uint8_t kind) {
  return kind >= static_cast<uint8_t>(KvFrameKind::kHello) &&
         kind <= static_cast<uint8_t>(KvFrameKind::kCount);
}

}  // namespace

std::string KvFrameKindName(KvFrameKind kind) {
  switch (kind) {
    case KvFrameKind::kHello:
      return "hello";
    case KvFrameKind::kReply:
      return "reply";
    case KvFrameKind::kSet:
      return "KvSet";
    case KvFrameKind::kGet:
      return "KvGet";
    case KvFrameKind::kAdd:
      return "KvAdd";
    case KvFrameKind::kDelete:
      return "KvDelete";
    case KvFrameKind::kCount:
      return "KvCount";
  }
  return absl::StrCat("kind ", static_cast<int>(kind));
}

std::string EncodeKvFrame(KvFrameKind kind, uint64_t id,
                          absl::string_view payload) {
  std::string frame;
  frame.reserve(kKvFrameHeaderBytes + payload.size());
  PutLe(&frame, payload.size(), 4);
  frame.push_back(static_cast<char>(kind));
  frame.append(3, '\0');
  PutLe(&frame, id, 8);
  frame.append(payload.data(), payload.size());
  return frame;
}

std::string EncodeKvReply(const absl::Status& status,
                          absl::string_view response) {
  absl::string_view message = status.message();
  if (message.size() > kMaxKvReplyMessageBytes) {
    message = message.substr(0, kMaxKvReplyMessageBytes);
  }
  std::string payload;
  payload.reserve(8 + message.size() + response.size());
  PutLe(&payload, static_cast<uint32_t>(status.code()), 4);
  PutLe(&payload, message.size(), 4);
  payload.append(message.data(), message.size());
  if (status.ok()) {
    payload.append(response.data(), response.size());
  } else if (const ErrorReason reason = ReasonOf(status);
             reason != ErrorReason::kUnspecified) {
    payload.push_back(static_cast<char>(reason));
  }
  return payload;
}

absl::Status DecodeKvReply(absl::string_view payload, absl::Status* status,
                           absl::string_view* response) {
  if (payload.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("key-value reply truncated: ", payload.size(),
                     " bytes, shorter than its 8-byte status header"));
  }
  const uint64_t code = GetLe(payload.data(), 4);
  const uint64_t length = GetLe(payload.data() + 4, 4);
  if (code > static_cast<uint64_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key-value reply carries status code ", code, ", which is none"));
  }
  if (length > kMaxKvReplyMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key-value reply announces a ", length, "-byte message; at most ",
        kMaxKvReplyMessageBytes, " allowed"));
  }
  if (length > payload.size() - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("key-value reply truncated: its message announces ",
                     length, " bytes, ", payload.size() - 8, " follow"));
  }
  const auto status_code = static_cast<absl::StatusCode>(code);
  if (status_code == absl::StatusCode::kOk && length != 0) {
    return absl::InvalidArgumentError(
        "key-value reply carries a message with status OK");
  }
  *status = absl::Status(status_code, payload.substr(8, length));
  *response = payload.substr(8 + length);
  if (!status->ok() && response->size() == 1) {
    // The error's reason; one this build does not know reads as none.
    *status =
        WithReason(std::move(*status),
                   ErrorReasonFromWire(static_cast<uint8_t>((*response)[0])));
    *response = absl::string_view();
  } else if (!status->ok() && !response->empty()) {
    return absl::InvalidArgumentError(
        "key-value reply carries a response with an error status");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<KvFrame>> KvFrameReader::Next() {
  // Drop what was returned before once it is most of the buffer, so the
  // buffer holds at most about one frame.
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  const size_t available = buffer_.size() - consumed_;
  if (available < kKvFrameHeaderBytes) return std::nullopt;
  const char* header = buffer_.data() + consumed_;
  const uint64_t length = GetLe(header, 4);
  const uint8_t kind = static_cast<uint8_t>(header[4]);
  if (!KnownKind(kind)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key-value frame of unknown kind ", static_cast<int>(kind)));
  }
  if (header[5] != 0 || header[6] != 0 || header[7] != 0) {
    return absl::InvalidArgumentError(
        "key-value frame with nonzero reserved header bytes");
  }
  if (length > max_payload_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key-value ", KvFrameKindName(static_cast<KvFrameKind>(kind)),
        " frame announces ", length, " bytes; at most ", max_payload_,
        " allowed"));
  }
  if (available - kKvFrameHeaderBytes < length) return std::nullopt;
  KvFrame frame;
  frame.kind = static_cast<KvFrameKind>(kind);
  frame.id = GetLe(header + 8, 8);
  frame.payload.assign(header + kKvFrameHeaderBytes, length);
  consumed_ += kKvFrameHeaderBytes + length;
  return frame;
}

}  // namespace rankd
