#include "dataplane/cancellation.h"

#include "absl/strings/str_cat.h"
#include "dataplane/operation.h"

namespace rankd::dataplane {

bool CancellingOwner::SupportsCancellation(CancellationMode mode) const {
  switch (mode) {
    case CancellationMode::kNativeCancel:
      return SupportsNativeCancel();
    case CancellationMode::kQuarantineUntilComplete:
      return SupportsQuarantine();
  }
  return false;
}

absl::StatusOr<bool> CancellingOwner::ApplyCancellation(
    const std::shared_ptr<Operation>& op, CancellationMode mode,
    absl::Duration missed) {
  if (op->Done()) return false;
  const std::string deadline = absl::StrCat(
      backend_name(), " backend: ", op->operation(),
      " missed its WaitBounded deadline of ", absl::FormatDuration(missed));
  if (mode == CancellationMode::kQuarantineUntilComplete) {
    const absl::Status cause = absl::DeadlineExceededError(
        absl::StrCat(deadline,
                     "; its resources are quarantined until it completes "
                     "(QuarantineUntilComplete)"));
    Poison(cause);
    op->FailIfRunning(cause);
    Quarantine(op);
    return true;
  }
  const absl::Status cause = absl::DeadlineExceededError(absl::StrCat(
      deadline, "; cancelled natively (NativeCancel): ", abort_effect()));
  const bool torn_down = CancelNative(cause);
  if (torn_down && op->WaitFor(AbortGrace())) return true;
  op->FailIfRunning(cause);
  Quarantine(op);
  if (torn_down) return true;
  return absl::InternalError(absl::StrCat(
      deadline,
      "; NativeCancel could not confirm the native teardown; the work's "
      "resources are quarantined until it completes"));
}

}  // namespace rankd::dataplane
