// CancellingOwner: the one policy for a bounded wait that missed its
// deadline (OperationCompletion::WaitBounded, completion.h), over the
// native hooks a backend supplies. Both backends' sessions are one
// (docs/contract.md, "Completions"):
//
//   - kQuarantineUntilComplete: poisons the session with the deadline's
//     cause, marks the operation failed with it (the caller gave up on it:
//     its later Wait() reports the cause, never a success nobody waited
//     for) and moves what it retains to the quarantine, freed only once the
//     work finished. Nothing is torn down: the work keeps running.
//   - kNativeCancel: poisons and aborts every native context
//     (CancelNative), then waits up to AbortGrace() for the work to end.
//     Work the teardown finished with but that has not ended (a kernel
//     still queued on its stream behind other work) is marked failed and
//     quarantined: its resources are never freed under running work. When
//     the teardown itself did not finish (CancelNative returns false), the
//     same, and the wait reports INTERNAL: the mode was not completed.
//
// Every message starts "<backend> backend: <operation> missed its
// WaitBounded deadline of <timeout>; ". A backend's session derives from
// CancellingOwner and implements the hooks below; Unattended, RunIfNext and
// StartHeld stay the backend's own (OperationOwner, native_layer.h).
// Thread-safe as the hooks are. Depends on native_layer.h, operation.h and
// absl.
#ifndef RANKD_DATAPLANE_CANCELLATION_H_
#define RANKD_DATAPLANE_CANCELLATION_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/completion.h"
#include "dataplane/native_layer.h"

namespace rankd::dataplane {

class CancellingOwner : public OperationOwner {
 public:
  // "gloo", "nccl": the first word of every message.
  virtual const char* backend_name() const = 0;
  // Whether CancelNative tears native work down (false: kNativeCancel is
  // not offered).
  virtual bool SupportsNativeCancel() const = 0;
  // Whether kQuarantineUntilComplete is offered: not where the session's
  // exact_completion capability was restricted away, since the quarantine
  // releases work on exact completion.
  virtual bool SupportsQuarantine() const = 0;
  // Poisons the session with `cause` (first cause wins) and aborts every
  // native context, so that every outstanding operation fails. Returns
  // whether the native teardown finished (within the backend's own bound).
  virtual bool CancelNative(const absl::Status& cause) = 0;
  // What CancelNative does, as messages say it ("every communicator of the
  // session was aborted").
  virtual std::string abort_effect() const = 0;
  // After CancelNative: how long aborted work may take to leave.
  virtual absl::Duration AbortGrace() const = 0;
  // Holds what `op` retains until its work finished (quarantine.h).
  virtual void Quarantine(std::shared_ptr<Operation> op) = 0;

  // OperationOwner, as the header comment says.
  bool SupportsCancellation(CancellationMode mode) const final;
  absl::StatusOr<bool> ApplyCancellation(const std::shared_ptr<Operation>& op,
                                         CancellationMode mode,
                                         absl::Duration missed) final;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_CANCELLATION_H_
