#include "common/limits.h"

#include "absl/strings/str_cat.h"

namespace rankd {

absl::Status CheckTimeoutMs(uint32_t timeout_ms, absl::string_view field) {
  if (timeout_ms == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be > 0: every wait needs a deadline"));
  }
  if (timeout_ms > kMaxTimeoutMs) {
    return absl::InvalidArgumentError(absl::StrCat(field, "=", timeout_ms,
                                                   " exceeds the limit of ",
                                                   kMaxTimeoutMs, " ms"));
  }
  return absl::OkStatus();
}

absl::Status CheckOptionalTimeoutMs(uint32_t timeout_ms,
                                    absl::string_view field) {
  if (timeout_ms == 0) return absl::OkStatus();
  return CheckTimeoutMs(timeout_ms, field);
}

absl::Status CheckTextSize(absl::string_view field, absl::string_view value,
                           size_t max_bytes) {
  if (value.size() <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " has ", value.size(), " bytes; the limit is ", max_bytes));
}

}  // namespace rankd
