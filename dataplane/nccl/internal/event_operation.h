// EventOperation: an engine Operation (dataplane/operation.h) whose work
// runs on a CUDA device and is probed through a CUDA event recorded after
// it. Every resource the work uses (tensors' buffers, output and scratch
// buffers, the stream, the communicator) is retained until the event says
// done. Exactness: done only once the event reports the device work
// finished, never early; waits poll the event (never cudaEventSynchronize,
// so a concurrent abort is always observed).
//
// Private to dataplane/nccl. Depends on dataplane/operation.h and
// dataplane/nccl/cuda_event.h.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_EVENT_OPERATION_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_EVENT_OPERATION_H_

#include <memory>
#include <string>
#include <vector>

#include "dataplane/nccl/cuda_event.h"
#include "dataplane/operation.h"

namespace rankd::dataplane::nccl::internal {

// An operation whose work `event` captures; Pending (reports done only
// after MarkQueued) when `queued` is false. A null event never reports
// done: its resources are only released by Quarantine::Abandon, i.e.
// leaked on purpose. A CUDA error from the event fails the operation with
// a message naming it.
std::shared_ptr<Operation> EventOperation(
    std::string operation, std::shared_ptr<CudaEvent> event,
    std::vector<std::shared_ptr<const void>> retained, bool queued = true);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_EVENT_OPERATION_H_
