// NcclOpOwner: the owner of NCCL operations, i.e. the native hooks of the
// engine's one policy for a missed WaitBounded deadline
// (dataplane/cancellation.h). The session state (internal::SessionImpl) is
// one: its native cancel marks the running operations failed and aborts
// every communicator (ncclCommAbort returns after teardown). An operation
// whose completion is dropped while the device still runs it is
// quarantined (dataplane/quarantine.h), so no live buffer is ever freed.
// Also the owner of session-less operations (LocalOpOwner) and how an
// NcclCompletion (nccl_completion.h) is made over an owner.
//
// Private to dataplane/nccl. Depends on dataplane/cancellation.h,
// dataplane/operation.h, dataplane/nccl/nccl_completion.h and absl.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_OP_OWNER_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_OP_OWNER_H_

#include <memory>

#include "absl/status/status.h"
#include "dataplane/cancellation.h"
#include "dataplane/nccl/nccl_completion.h"
#include "dataplane/operation.h"

namespace rankd::dataplane::nccl::internal {

// The session side of NCCL operations.
class NcclOpOwner : public CancellingOwner {
 public:
  // OK while healthy; the original cause once poisoned (the engine's
  // vocabulary: Poison latches, Abort tears down, poison() returns the
  // cause).
  virtual absl::Status poison() const = 0;

  const char* backend_name() const final { return "nccl"; }
  // Work on a device runs by itself: a dropped completion's resources are
  // quarantined until its event completes.
  void Unattended(const std::shared_ptr<Operation>& op) final;
};

// What an NCCL session's native abort does, as messages say it.
inline constexpr char kNcclAbortEffect[] =
    "every communicator of the session was aborted";

// The completion of `op`, holding `owner` alive until it is gone.
std::shared_ptr<NcclCompletion> MakeNcclCompletion(
    std::shared_ptr<Operation> op, const std::shared_ptr<NcclOpOwner>& owner);

// The owner of operations that belong to no session
// (NcclBackend::SubmitLocalDependencies): no communicator to abort, a
// process-wide quarantine reaped by a background thread.
std::shared_ptr<NcclOpOwner> LocalOpOwner();

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_OP_OWNER_H_
