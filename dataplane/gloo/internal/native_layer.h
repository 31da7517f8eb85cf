// The Gloo native layer as the session front sees it (native_layer.h's
// SessionNativeLayer): GlooSession is SessionFront<HostTensor, NativeLayer>.
// Each operation is the GlooBackend operation on executor 0, under the
// session's name and scope, so that the session and its backend share one
// order, one poison state and one quarantine. Private to
// dataplane/gloo/. Depends on gloo_backend.h and the engine's headers.
#ifndef RANKD_DATAPLANE_GLOO_INTERNAL_NATIVE_LAYER_H_
#define RANKD_DATAPLANE_GLOO_INTERNAL_NATIVE_LAYER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/admission.h"
#include "dataplane/capabilities.h"
#include "dataplane/control_plane.h"
#include "dataplane/gloo/gloo_backend.h"
#include "dataplane/host_tensor.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane::gloo::internal {

class NativeLayer {
 public:
  using Value = HostTensor;
  using Scope = GlooGroup*;
  using ValueSubmission = DistributedSession<HostTensor>::ValueSubmission;
  using ValuesSubmission = DistributedSession<HostTensor>::ValuesSubmission;

  // `control_plane` must outlive the layer; `backend` is not null.
  NativeLayer(ControlPlane* control_plane,
              std::unique_ptr<GlooBackend> backend);

  GlooBackend& backend() { return *backend_; }

  const char* backend_name() const { return "gloo"; }
  const DistributedSessionDescriptor& descriptor() const {
    return backend_->descriptor();
  }
  // Fail-closed, as on NCCL: nothing once the session is poisoned.
  DistributedCapabilities capabilities() const {
    if (!backend_->poison().ok()) return DistributedCapabilities{};
    return backend_->capabilities();
  }
  absl::StatusOr<GlooGroup*> Admit(const AdmissionRequest& request);
  size_t MemberCount(GlooGroup* group) const { return group->size(); }
  size_t LocalMember(GlooGroup* group) const { return group->local_rank(); }

  absl::StatusOr<ValueSubmission> AllReduceSum(GlooGroup* group,
                                               std::string label,
                                               const HostTensor& input,
                                               const HostTensor* output);
  absl::StatusOr<ValueSubmission> AllGather(GlooGroup* group, std::string label,
                                            const HostTensor& input,
                                            const HostTensor* output);
  absl::StatusOr<ValueSubmission> AllToAllV(
      GlooGroup* group, std::string label, const HostTensor& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts, const HostTensor* output);
  absl::StatusOr<ValueSubmission> Send(GlooGroup* group, std::string label,
                                       size_t peer, const HostTensor& input);
  absl::StatusOr<ValueSubmission> Receive(GlooGroup* group, std::string label,
                                          size_t peer,
                                          const ValueDescriptor& descriptor,
                                          const HostTensor* output);
  absl::StatusOr<ValuesSubmission> BatchSendReceive(
      GlooGroup* group, std::string label,
      absl::Span<const PeerValue<HostTensor>> sends,
      absl::Span<const PeerValue<HostTensor>> receives);

  ControlPlane* control_plane() { return control_plane_; }
  absl::Duration words_timeout() const {
    return backend_->options().words_timeout;
  }
  absl::Status poison() const { return backend_->poison(); }
  void Poison(const absl::Status& cause) { backend_->Poison(cause); }
  void Abort(const absl::Status& cause) { backend_->Abort(cause); }

 private:
  ControlPlane* const control_plane_;
  const std::unique_ptr<GlooBackend> backend_;
};

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_INTERNAL_NATIVE_LAYER_H_
