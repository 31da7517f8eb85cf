// GlooExecutor: the Gloo backend's Executor (the "stream" of the
// CommunicationBackend contract) is the engine's in-order host executor
// (dataplane/host_executor.h): one thread per lane runs the backend's
// blocking Gloo calls in submission order, each lane with its own Gloo
// contexts. The backend makes them (GlooSessionOptions::executors) and hands
// them out; only the backend makes them. Depends on
// dataplane/host_executor.h.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_EXECUTOR_H_
#define RANKD_DATAPLANE_GLOO_GLOO_EXECUTOR_H_

#include "dataplane/host_executor.h"

namespace rankd::dataplane::gloo {

using GlooExecutor = HostExecutor;

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_EXECUTOR_H_
