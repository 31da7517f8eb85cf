// What a program that drives Gloo itself, next to GlooSessions, may use of
// the Gloo backend: a Gloo rendezvous store on the job's key-value broker,
// and the element-wise sums the backend's all_reduce_sum gives Gloo.
// bench/allreduce_bench.cc needs both to time a bare gloo::allreduce on the
// same terms as the layer (the same kernel, rendezvous on the same broker).
//
// Contract: these are the backend's own store and kernels behind a narrow
// interface; their implementations (internal/rankd_store.h,
// internal/sum_kernels.h) stay private and may change. Keys a store made
// here writes never meet a session's keys. Depends on Gloo's store header,
// dataplane/control_plane.h, dataplane/dtype.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_INTEROP_H_
#define RANKD_DATAPLANE_GLOO_GLOO_INTEROP_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dataplane/control_plane.h"
#include "dataplane/dtype.h"
#include "gloo/rendezvous/store.h"

namespace rankd::dataplane::gloo {

// A rendezvous store (for gloo::rendezvous::Context::connectFullMesh) on the
// key-value broker of `control_plane`'s job incarnation, its keys under
// "gloo/<namespace>/direct/<label>/", where no GlooSession writes. Members
// that connect one context use the same label. Gloo's store interface
// reports errors only by throwing: a read past `timeout`, a failed job or an
// unreachable broker throws ::gloo::IoException naming the key.
// `control_plane` must outlive the store; one connecting thread at a time.
std::unique_ptr<::gloo::rendezvous::Store> NewBrokerStore(
    ControlPlane* control_plane, absl::string_view label,
    absl::Duration timeout);

// out[i] = a[i] + b[i] for `elements` elements; out may alias a or b. The form
// gloo::AllreduceOptions::setReduceFunction takes.
using SumFunction = std::function<void(void* out, const void* a, const void* b,
                                       size_t elements)>;

// The sum GlooSession::AllReduceSum gives Gloo for `dtype` (the same
// function, built at -O3); Unimplemented for a dtype without a sum (bool).
absl::StatusOr<SumFunction> SumFunctionFor(TensorDtype dtype);

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_INTEROP_H_
