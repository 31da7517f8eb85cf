// The one rule of which groups a data-plane session holds (docs/contract.md,
// "Data-parallel domains"; docs/dataplane.md, "Sessions by domain"). Without
// recovery by domain a session holds the world and every group of its rank.
// With it (DistributedSessionDescriptor::recovery_domain() set), a session
// holds only the groups whose members all lie in its rank's domain (tensor,
// pipeline, expert groups inside one replica), so that the domain can
// re-form alone while the other replicas serve on; the world and every
// group spanning domains (the data-parallel groups) are not connected, and
// an operation on them is refused before any native work. A domain that is
// the whole world (dp = 1) holds everything. Every backend connects
// exactly HeldGroups (plus the world when HoldsWorld), advertises
// HeldCapabilities, and admission.h refuses the rest with CheckHeld, so
// Gloo and NCCL behave alike. Pure functions; thread-safe. Depends on
// capabilities.h, collective_scope.h, session_descriptor.h and absl.
#ifndef RANKD_DATAPLANE_DOMAIN_GROUPS_H_
#define RANKD_DATAPLANE_DOMAIN_GROUPS_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_group.h"
#include "dataplane/collective_scope.h"
#include "dataplane/session_descriptor.h"

namespace rankd::dataplane {

// Whether a session of `descriptor` connects the world: always without
// recovery by domain; with it, only when the domain is the whole world.
bool HoldsWorld(const DistributedSessionDescriptor& descriptor);

// Whether a session of `descriptor` connects `group` (one of its groups):
// always without recovery by domain; with it, when every member lies in
// the domain.
bool HoldsGroup(const DistributedSessionDescriptor& descriptor,
                const CollectiveGroupDescriptor& group);

// The groups of `descriptor` a session connects, in the descriptor's order
// (pointers into `descriptor`, valid while it lives).
std::vector<const CollectiveGroupDescriptor*> HeldGroups(
    const DistributedSessionDescriptor& descriptor);

// What a healthy session of `descriptor` advertises
// (capabilities.h's AdvertisedCapabilities over the held groups' ids, with
// world_collectives only when HoldsWorld), restricted by `allow`.
DistributedCapabilities HeldCapabilities(
    const DistributedSessionDescriptor& descriptor,
    const std::optional<DistributedCapabilities>& allow);

// OK when a session of `descriptor` holds `scope` (a group it is not a
// member of is admission's NotFound, not this check's: OK here).
// Otherwise FailedPrecondition "<backend> backend: <operation> on <scope>
// refused: the job recovers by data-parallel domain and this session holds
// only domain D (ranks a-b)'s groups (ids); <the world | group G (members
// ...)> spans domains ... and is not connected, so that a replica re-forms
// alone; exchange world-wide through the control plane's all_gather_words
// (Client::AllGatherWordsWithView: its result names the domains it spans)".
absl::Status CheckHeld(const char* backend, const char* operation,
                       const DistributedSessionDescriptor& descriptor,
                       const CollectiveScope& scope);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_DOMAIN_GROUPS_H_
