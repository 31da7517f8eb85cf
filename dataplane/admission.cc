#include "dataplane/admission.h"

#include "absl/strings/str_cat.h"
#include "dataplane/domain_groups.h"

namespace rankd::dataplane {
namespace {

absl::Status Prefixed(const absl::Status& status, const char* backend,
                      const char* operation) {
  return absl::Status(
      status.code(),
      absl::StrCat(backend, " backend: ", operation, ": ", status.message()));
}

}  // namespace

absl::Status Admit(const AdmissionRequest& request, const absl::Status& usable,
                   const DistributedSessionDescriptor& session,
                   const DistributedCapabilities& caps) {
  if (!usable.ok()) return usable;
  if (!request.scope.is_world() &&
      session.group(request.scope.group_id()) == nullptr) {
    // Not a member: ResolveScope's refusal names the rank's groups.
    return Prefixed(ResolveScope(session, request.scope).status(),
                    request.backend, request.operation);
  }
  if (absl::Status s =
          CheckHeld(request.backend, request.operation, session, request.scope);
      !s.ok()) {
    return s;
  }
  if (request.flag != nullptr) {
    if (absl::Status s =
            RequireCapability(caps.*(request.flag), request.backend,
                              request.operation, request.capability);
        !s.ok()) {
      return s;
    }
  }
  return RequireCollective(caps, request.backend, request.operation,
                           request.scope);
}

absl::Status CheckPeerOf(const char* backend, const char* operation,
                         size_t peer, size_t members, size_t self) {
  absl::Status s;
  if (peer >= members) {
    s = absl::InvalidArgumentError(absl::StrCat(operation, ": peer ", peer,
                                                " is outside the scope's ",
                                                members, " members"));
  } else if (peer == self) {
    s = absl::InvalidArgumentError(
        absl::StrCat(operation, ": peer ", peer, " is this rank itself"));
  }
  if (s.ok()) return s;
  return absl::Status(s.code(),
                      absl::StrCat(backend, " backend: ", s.message()));
}

}  // namespace rankd::dataplane
