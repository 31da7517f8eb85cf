// The engine's admission of every session operation, one order and one set
// of words for every backend (docs/dataplane.md, "Validation"). Before any
// argument check and any native work, an operation on a scope passes:
//   1. the session's own state, `usable`: OK, or the refusal the backend's
//      PoisonLatch::Check gives ("<backend> backend: <operation> refused:
//      session poisoned by an earlier failure: <cause>", the cause's code)
//      or its quarantine fence (FailedPrecondition);
//   2. scope membership: NotFound "<backend> backend: <operation>: rank R is
//      not a member of group G: its groups are ...";
//   3. the domain rule (domain_groups.h's CheckHeld): under recovery by
//      domain, FailedPrecondition for the world or a group spanning
//      domains, which the session does not connect, naming what to use
//      instead;
//   4. capability: Unimplemented naming the backend and the capability
//      (RequireCapability for the operation's own flag, when it has one,
//      then RequireCollective for the scope).
// Then the operation checks its own arguments (dtype, shape, counts, peer:
// CheckPeerOf) and only then submits. Pure functions; thread-safe.
// Depends on capabilities.h, collective_scope.h, domain_groups.h,
// peer_transfer.h, session_descriptor.h and absl.
#ifndef RANKD_DATAPLANE_ADMISSION_H_
#define RANKD_DATAPLANE_ADMISSION_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session_descriptor.h"

namespace rankd::dataplane {

// One operation asking to be admitted.
struct AdmissionRequest {
  const char* backend = "";    // "gloo", "nccl"
  const char* operation = "";  // the session's name: "all_reduce_sum", ...
  CollectiveScope scope = CollectiveScope::World();
  // The operation's own capability (point_to_point, variable_all_to_all),
  // or null when the scope's is all it needs.
  bool DistributedCapabilities::*flag = nullptr;
  const char* capability = nullptr;
};

// OK once `request` passed steps 1-4 above; otherwise the first refusal,
// as described there. Builds nothing on success (it runs on every
// submission): a caller that needs the scope's members takes them from its
// own group or communicator.
absl::Status Admit(const AdmissionRequest& request, const absl::Status& usable,
                   const DistributedSessionDescriptor& session,
                   const DistributedCapabilities& caps);

// OK when `peer` is a member index of a scope of `members` members other
// than this rank's (`self`); otherwise InvalidArgument "<backend> backend:
// <operation>: peer P is outside the scope's N members" or "... peer P is
// this rank itself".
absl::Status CheckPeerOf(const char* backend, const char* operation,
                         size_t peer, size_t members, size_t self);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_ADMISSION_H_
