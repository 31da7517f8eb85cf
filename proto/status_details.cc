#include "proto/status_details.h"

#include <utility>

#include "common/error_reason.h"
#include "rankd/v1/common.pb.h"

namespace rankd {
namespace {

constexpr char kErrorInfoType[] = "type.googleapis.com/rankd.v1.ErrorInfo";

static_assert(static_cast<int>(ErrorReason::kEpochFenced) ==
              v1::ERROR_REASON_EPOCH_FENCED);
static_assert(static_cast<int>(ErrorReason::kEpochEnded) ==
              v1::ERROR_REASON_EPOCH_ENDED);

}  // namespace

std::string StatusDetailsOf(const absl::Status& status) {
  const ErrorReason reason = ReasonOf(status);
  if (status.ok() || reason == ErrorReason::kUnspecified) return "";
  v1::ErrorInfo info;
  info.set_reason(static_cast<v1::ErrorReason>(reason));
  v1::StatusDetails details;
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(std::string(status.message()));
  v1::TypedDetail* detail = details.add_details();
  detail->set_type_url(kErrorInfoType);
  detail->set_value(info.SerializeAsString());
  return details.SerializeAsString();
}

absl::Status WithDetails(absl::Status status, absl::string_view details) {
  if (status.ok() || details.empty()) return status;
  v1::StatusDetails parsed;
  if (!parsed.ParseFromArray(details.data(),
                             static_cast<int>(details.size()))) {
    return status;
  }
  for (const v1::TypedDetail& detail : parsed.details()) {
    if (detail.type_url() != kErrorInfoType) continue;
    v1::ErrorInfo info;
    if (!info.ParseFromString(detail.value())) continue;
    const ErrorReason reason =
        ErrorReasonFromWire(static_cast<uint32_t>(info.reason()));
    if (reason != ErrorReason::kUnspecified) {
      return WithReason(std::move(status), reason);
    }
  }
  return status;
}

}  // namespace rankd
