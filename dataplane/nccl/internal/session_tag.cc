#include "dataplane/nccl/internal/session_tag.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rankd::dataplane::nccl::internal {

absl::Status ValidateSessionTag(absl::string_view tag) {
  if (tag.empty() || tag.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: session tag must have 1..64 characters; got ",
        tag.size()));
  }
  for (char c : tag) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '-' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl backend: session tag '", tag,
                       "' may only use letters, digits, '_', '-' and '.'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace rankd::dataplane::nccl::internal
