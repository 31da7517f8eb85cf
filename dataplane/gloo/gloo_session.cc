#include "dataplane/gloo/gloo_session.h"

#include <algorithm>
#include <utility>

#include "dataplane/gloo/internal/native_layer.h"
#include "dataplane/session_front_definitions.h"

namespace rankd::dataplane {
template class SessionFront<HostTensor, gloo::internal::NativeLayer>;
}  // namespace rankd::dataplane

namespace rankd::dataplane::gloo {

GlooSession::GlooSession(ControlPlane* control_plane,
                         std::unique_ptr<GlooBackend> backend)
    : SessionFront(std::make_shared<internal::NativeLayer>(control_plane,
                                                           std::move(backend))),
      opened_with_(layer().backend().options()) {}

GlooSession::~GlooSession() = default;

GlooBackend& GlooSession::backend() { return layer().backend(); }

absl::StatusOr<std::unique_ptr<GlooSession>> GlooSession::Open(
    const DistributedSessionDescriptor& descriptor, ControlPlane* control_plane,
    const GlooSessionOptions& options) {
  auto backend = GlooBackend::Open(descriptor, control_plane, options);
  if (!backend.ok()) return backend.status();
  // The constructor is private (Open is the only way to make a session).
  auto session = std::unique_ptr<GlooSession>(
      new GlooSession(control_plane, *std::move(backend)));
  session->opened_with_ = options;
  return session;
}

absl::StatusOr<std::unique_ptr<GlooSession>> GlooSession::Reform(
    std::unique_ptr<GlooSession> ended, absl::Duration timeout) {
  GlooSessionOptions options;
  if (ended != nullptr) options = ended->opened_with_;
  return ReformSession(
      std::move(ended), timeout, "gloo",
      [&options](DistributedSessionDescriptor descriptor,
                 ControlPlane* control_plane, absl::Duration open_bound) {
        GlooSessionOptions bounded = options;
        bounded.connect_timeout = std::min(options.connect_timeout, open_bound);
        auto session = Open(descriptor, control_plane, bounded);
        // A later Reform bounds itself afresh.
        if (session.ok()) (*session)->opened_with_ = options;
        return session;
      });
}

}  // namespace rankd::dataplane::gloo
