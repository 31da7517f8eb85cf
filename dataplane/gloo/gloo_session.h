// GlooSession: the DistributedSession contract (docs/contract.md, session.h) on
// the Gloo backend, with HostTensor values: the one session front
// (session_front.h) over Gloo's native layer. Scopes map to the backend's
// groups (World -> the world group, Group(id) -> the descriptor's group);
// every operation is the matching GlooBackend operation on its executor 0,
// so the session and the backend share one order, one poison state and one
// quarantine. all_gather_words goes over the control plane, not Gloo, so it
// works independently of the data communicators (and of their poisoning).
//
//   auto control_plane = MakeClientControlPlane(client.get());
//   auto session = GlooSession::Open(DescriptorFromProto(...),
//                                    control_plane.get(), {});
//   auto sum = (*session)->AllReduceSum(CollectiveScope::World(), x);
//   ...
//
// Validation order for every operation: poison and quarantine fence
// (the original cause), scope membership (NotFound), capability
// (Unimplemented naming "gloo" and the capability), then dtype, shape,
// counts and peer range (InvalidArgument / Unimplemented for a dtype without
// a sum), all before anything is queued. Thread-safe. Depends on
// dataplane/session_front.h, gloo_backend.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_SESSION_H_
#define RANKD_DATAPLANE_GLOO_GLOO_SESSION_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/control_plane.h"
#include "dataplane/gloo/gloo_backend.h"
#include "dataplane/gloo/gloo_options.h"
#include "dataplane/host_tensor.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/session_front.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane::gloo {

namespace internal {
class NativeLayer;  // internal/native_layer.h: private to this package
}  // namespace internal

}  // namespace rankd::dataplane::gloo

namespace rankd::dataplane {
// Instantiated once, in gloo_session.cc.
extern template class SessionFront<HostTensor, gloo::internal::NativeLayer>;
}  // namespace rankd::dataplane

namespace rankd::dataplane::gloo {

class GlooSession final
    : public SessionFront<HostTensor, internal::NativeLayer> {
 public:
  // Connects a Gloo session for this rank, as NcclSession::Open opens one:
  // every group of `descriptor` (and the world) rendezvouses through
  // `control_plane`'s key-value broker. Blocks until every group is
  // connected on every executor or options.connect_timeout passes; errors
  // name the group. InvalidArgument for bad options or a null control
  // plane; the job's failure when it already failed. `control_plane` must
  // outlive the session. (From the descriptor rankd::Client::Join returns:
  // DescriptorFromProto in dataplane/descriptor_proto.h first; public
  // data-plane headers carry no protobuf types.)
  static absl::StatusOr<std::unique_ptr<GlooSession>> Open(
      const DistributedSessionDescriptor& descriptor,
      ControlPlane* control_plane, const GlooSessionOptions& options = {});

  // The session over an open backend; `control_plane` (for
  // all_gather_words) must outlive it.
  GlooSession(ControlPlane* control_plane,
              std::unique_ptr<GlooBackend> backend);
  ~GlooSession() override;

  // The low-level contract over the same communicators and executor, with
  // the same poison state (poison(), Poison() and Abort() are the front's).
  GlooBackend& backend();
};

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_SESSION_H_
