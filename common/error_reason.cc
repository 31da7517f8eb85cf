#include "common/error_reason.h"

#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace rankd {
namespace {

// The payload's type URL; its value is the reason's number, in decimal.
constexpr char kReasonPayload[] = "rankd/error_reason";

}  // namespace

ErrorReason ErrorReasonFromWire(uint32_t value) {
  switch (value) {
    case static_cast<uint32_t>(ErrorReason::kEpochFenced):
      return ErrorReason::kEpochFenced;
    case static_cast<uint32_t>(ErrorReason::kEpochEnded):
      return ErrorReason::kEpochEnded;
    default:
      return ErrorReason::kUnspecified;
  }
}

absl::Status WithReason(absl::Status status, ErrorReason reason) {
  if (status.ok()) return status;
  if (reason == ErrorReason::kUnspecified) {
    status.ErasePayload(kReasonPayload);
    return status;
  }
  status.SetPayload(kReasonPayload,
                    absl::Cord(std::to_string(static_cast<int>(reason))));
  return status;
}

ErrorReason ReasonOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kReasonPayload);
  uint32_t value = 0;
  if (!payload.has_value() ||
      !absl::SimpleAtoi(std::string(*payload), &value)) {
    return ErrorReason::kUnspecified;
  }
  return ErrorReasonFromWire(value);
}

absl::Status KeepReason(const absl::Status& from, absl::Status to) {
  return WithReason(std::move(to), ReasonOf(from));
}

}  // namespace rankd
