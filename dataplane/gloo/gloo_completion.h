// GlooCompletion: the exact completion of one operation submitted to a Gloo
// executor (the backend's CommunicationCompletion and the session's
// Completion). It is the engine's OperationCompletion (dataplane/operation.h)
// over an operation whose end the executor pushes: it retains every resource
// the operation uses (tensor buffers, the group and its Gloo context) until
// the executor finished it, and it is complete only after the operation's
// last native call returned and its output was written. It refers to its
// communicator weakly: the communicator's executors hold the queued work and
// finish all of it before the communicator goes away.
//
// WaitBounded applies a cancellation mode through the session
// (dataplane/cancellation.h): QuarantineUntilComplete moves the retained
// resources to the session's quarantine; NativeCancel aborts the session's
// Gloo contexts and returns only after every executor has unwound (see
// docs/dataplane.md). Thread-safe. Depends on dataplane/operation.h.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_COMPLETION_H_
#define RANKD_DATAPLANE_GLOO_GLOO_COMPLETION_H_

#include "dataplane/operation.h"

namespace rankd::dataplane::gloo {

using GlooCompletion = OperationCompletion;

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_COMPLETION_H_
