#include "dataplane/completion.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

const char* CancellationModeName(CancellationMode mode) {
  switch (mode) {
    case CancellationMode::kNativeCancel:
      return "NativeCancel";
    case CancellationMode::kQuarantineUntilComplete:
      return "QuarantineUntilComplete";
  }
  return "unknown";
}

absl::Status CheckBoundedWait(const BoundedCompletion& completion,
                              absl::Duration timeout, CancellationMode mode,
                              const char* backend) {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WaitBounded needs a positive timeout; got ",
                     absl::FormatDuration(timeout)));
  }
  if (!completion.SupportsCancellation(mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(backend, " backend does not support cancellation mode ",
                     CancellationModeName(mode)));
  }
  return absl::OkStatus();
}

}  // namespace rankd::dataplane
