// NcclCompletion: the exact completion of one operation submitted to the
// NCCL backend (the backend's CommunicationCompletion and the session's
// Completion). It is the engine's OperationCompletion
// (dataplane/operation.h) over an operation whose work runs on a CUDA
// device and is probed through a CUDA event recorded after it: it retains
// every resource the work uses (tensors' buffers, output and scratch
// buffers, the stream, the communicator) and holds its session state
// alive until it is gone. It is complete only once the event reports the
// device work finished, never early; waits poll the event (never
// cudaEventSynchronize, so a concurrent abort is always observed).
//
// WaitBounded applies a cancellation mode through the session
// (dataplane/cancellation.h): QuarantineUntilComplete moves the retained
// resources to the session's quarantine (dataplane/quarantine.h), so no
// live buffer is ever freed; NativeCancel marks the running operations
// failed and aborts every communicator of the session (ncclCommAbort
// returns after teardown). Thread-safe. Depends on dataplane/operation.h.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_
#define RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_

#include "dataplane/operation.h"

namespace rankd::dataplane::nccl {

using NcclCompletion = OperationCompletion;

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_COMPLETION_H_
