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
  CancelNative(cause);
  const absl::Duration grace = AbortGrace();
  if (op->WaitFor(grace)) return true;
  op->FailIfRunning(cause);
  Quarantine(op);
  return absl::InternalError(absl::StrCat(
      deadline, "; NativeCancel could not confirm teardown within ",
      absl::FormatDuration(grace),
      "; the work's resources are quarantined until it completes"));
}

}  // namespace rankd::dataplane
