// The NCCL backend's side of dataplane/operation.h: operations whose work
// runs on the device, probed through a CUDA event recorded after it, and
// the owner that applies the two cancellation modes to them.
//
//   EventOperation  an Operation whose probe is a CUDA event query; every
//                   resource the work uses (tensors' buffers, output and
//                   scratch buffers, the stream, the communicator) is
//                   retained until the event says done.
//   NcclOpOwner     the owner of NCCL operations (the session state,
//                   internal::SessionImpl): the
//                   native hooks of the engine's one policy for a missed
//                   WaitBounded deadline (dataplane/cancellation.h): its
//                   native cancel marks the running operations failed and
//                   aborts every communicator (ncclCommAbort returns after
//                   teardown). An operation whose completion is dropped
//                   while the device still runs it is quarantined
//                   (dataplane/quarantine.h), so no live buffer is ever
//                   freed.
//   NcclCompletion  OperationCompletion holding its owner (kShared).
//
// Exactness: done only once the event reports the device work finished,
// never early; waits poll the event (never cudaEventSynchronize, so a
// concurrent abort is always observed).
#ifndef RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_
#define RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/cancellation.h"
#include "dataplane/completion.h"
#include "dataplane/nccl/cuda_event.h"
#include "dataplane/operation.h"
#include "dataplane/quarantine.h"

namespace rankd::dataplane::nccl {

using NcclCompletion = OperationCompletion;

// An operation whose work `event` captures; Pending (reports done only
// after MarkQueued) when `queued` is false. A null event never reports
// done: its resources are only released by Quarantine::Abandon, i.e.
// leaked on purpose. A CUDA error from the event fails the operation with
// a message naming it.
std::shared_ptr<Operation> EventOperation(
    std::string operation, std::shared_ptr<CudaEvent> event,
    std::vector<std::shared_ptr<const void>> retained, bool queued = true);

// The session side of NCCL operations.
class NcclOpOwner : public CancellingOwner {
 public:
  // OK while healthy; the original cause once poisoned.
  virtual absl::Status PoisonStatus() const = 0;

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

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_
