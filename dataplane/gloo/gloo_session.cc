#include "dataplane/gloo/gloo_session.h"

#include <utility>

#include "dataplane/gloo/internal/native_layer.h"
#include "dataplane/session_front_definitions.h"

namespace rankd::dataplane {
template class SessionFront<HostTensor, gloo::internal::NativeLayer>;
}  // namespace rankd::dataplane

namespace rankd::dataplane::gloo {

GlooSession::GlooSession(ControlPlane* control_plane,
                         std::unique_ptr<GlooBackend> backend)
    : SessionFront(std::make_shared<internal::NativeLayer>(
          control_plane, std::move(backend))) {}

GlooSession::~GlooSession() = default;

GlooBackend& GlooSession::backend() { return layer().backend(); }

absl::StatusOr<std::unique_ptr<GlooSession>> GlooSession::Open(
    const DistributedSessionDescriptor& descriptor, ControlPlane* control_plane,
    const GlooSessionOptions& options) {
  auto backend = GlooBackend::Open(descriptor, control_plane, options);
  if (!backend.ok()) return backend.status();
  return std::make_unique<GlooSession>(control_plane, *std::move(backend));
}

}  // namespace rankd::dataplane::gloo
