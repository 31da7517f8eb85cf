// gloo_interop.h over the backend's private store and kernels.
#include "dataplane/gloo/gloo_interop.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "dataplane/gloo/internal/rankd_store.h"
#include "dataplane/gloo/internal/sum_kernels.h"

namespace rankd::dataplane::gloo {

std::unique_ptr<::gloo::rendezvous::Store> NewBrokerStore(
    ControlPlane* control_plane, absl::string_view label,
    absl::Duration timeout) {
  // Sessions' groups are "world", "diagnosis", "sessions" and group ids
  // (internal/session_impl.cc), never "direct/...".
  return std::make_unique<internal::RankdStore>(
      control_plane,
      internal::RankdStore::Prefix(control_plane->Namespace(), 0,
                                   absl::StrCat("direct/", label)),
      timeout);
}

absl::StatusOr<SumFunction> SumFunctionFor(TensorDtype dtype) {
  absl::StatusOr<internal::SumKernel> kernel =
      internal::SumKernelFor(dtype, "all_reduce_sum");
  if (!kernel.ok()) return kernel.status();
  return std::move(kernel->reduce);
}

}  // namespace rankd::dataplane::gloo
