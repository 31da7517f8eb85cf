#include "dataplane/admission.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {
namespace {

absl::Status Prefixed(const absl::Status& status, const char* backend,
                      const char* operation) {
  return absl::Status(
      status.code(),
      absl::StrCat(backend, " backend: ", operation, ": ", status.message()));
}

}  // namespace

absl::StatusOr<ResolvedScope> Admit(const AdmissionRequest& request,
                                    const absl::Status& usable,
                                    const DistributedSessionDescriptor& session,
                                    const DistributedCapabilities& caps) {
  if (!usable.ok()) return usable;
  auto resolved = ResolveScope(session, request.scope);
  if (!resolved.ok()) {
    return Prefixed(resolved.status(), request.backend, request.operation);
  }
  if (request.flag != nullptr) {
    if (absl::Status s =
            RequireCapability(caps.*(request.flag), request.backend,
                              request.operation, request.capability);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = RequireCollective(caps, request.backend,
                                         request.operation, request.scope);
      !s.ok()) {
    return s;
  }
  return resolved;
}

absl::Status CheckPeerOf(const char* backend, const char* operation,
                         size_t peer, const ResolvedScope& scope) {
  absl::Status s = CheckPeer(peer, scope, operation);
  if (s.ok()) return s;
  return absl::Status(s.code(),
                      absl::StrCat(backend, " backend: ", s.message()));
}

}  // namespace rankd::dataplane
