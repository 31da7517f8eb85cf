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
#include "absl/time/time.h"
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

  // Re-forms this rank's session after a loss (docs/dataplane.md,
  // "Re-forming after a loss"): `ended`'s job epoch e ended (a rank or node
  // was lost; `rankd --recovery=on`), and this returns the session of epoch
  // e + 1 with as many executors, new ones. In order: aborts `ended` unless it
  // is poisoned already (its Gloo contexts aborted), destroys it, so that
  // nothing of epoch e survives; waits through its control plane
  // (ControlPlane::Rejoin) for the job to pass epoch e and for the world to be
  // whole again; then opens the new epoch's session as Open does, with the
  // options `ended` was opened with (an instance Open numbered is numbered
  // again in the new epoch), through the same control plane. Its keys are epoch
  // e + 1's (EpochKey in dataplane/control_plane.h): a replacement process that
  // Opens its session fresh at that epoch meets it. Tensors the caller holds
  // (the weights) are untouched and stay valid: their memory is never the
  // session's (HostTensor buffers come from the process-wide
  // HostBufferPool::Default()). Every rank of the new epoch must re-form (or
  // open) its sessions in the same order.
  //
  // Takes `ended` in every case; on error there is no session. Errors,
  // prefixed "gloo backend: re-forming the session of epoch <e>: ":
  // InvalidArgument for a null session or a non-positive timeout;
  // FailedPrecondition when the job is still healthy at the ended epoch
  // (no loss, so no later epoch: a session poisoned by a stalled peer or a
  // disagreement), after at most kReformLossNoticeGrace (10 s) for a loss
  // notice still on its way; DeadlineExceeded naming the epoch when `timeout`
  // passes before the world is whole; `ended`'s error class when the job failed
  // for good instead of recovering; Unimplemented from a control plane that
  // cannot join a later epoch; Open's errors for the new session (bounded by
  // options.connect_timeout, as Open is, and by the time left of `timeout`)
  // when the job is healthy at the new epoch. When the new epoch ends too
  // while its session opens (a second loss), this joins the epoch after it
  // and opens there, again and again, within the same `timeout`.
  static absl::StatusOr<std::unique_ptr<GlooSession>> Reform(
      std::unique_ptr<GlooSession> ended, absl::Duration timeout);

  ~GlooSession() override;

  // The low-level contract over the same communicators and executor, with
  // the same poison state (poison(), Poison() and Abort() are the front's).
  GlooBackend& backend();

 private:
  // The session over an open backend (Open is the one way to make one, as
  // NcclSession's); `control_plane` (for all_gather_words) must outlive it.
  GlooSession(ControlPlane* control_plane,
              std::unique_ptr<GlooBackend> backend);

  // The options Open was given (instance unset when Open numbered it).
  GlooSessionOptions opened_with_;
};

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_SESSION_H_
