// DistributedCapabilities: what a backend advertises it can do, failing
// closed (docs/contract.md, Capabilities), and the checks every backend
// makes before native work (RequireCollective, RequireCapability). Depends
// on dataplane/collective_scope.h, dataplane/collective_group.h and absl.
#ifndef RANKD_DATAPLANE_CAPABILITIES_H_
#define RANKD_DATAPLANE_CAPABILITIES_H_

#include <optional>
#include <set>

#include "absl/status/status.h"
#include "dataplane/collective_group.h"
#include "dataplane/collective_scope.h"

namespace rankd::dataplane {

// What a backend can do. Default: nothing (fail closed). An operation whose
// capability is not advertised fails before any native work.
struct DistributedCapabilities {
  bool world_collectives = false;
  std::set<CollectiveGroupId> collective_groups;
  bool point_to_point = false;
  bool variable_all_to_all = false;
  bool exact_completion = false;
};

// What a healthy backend advertises: world_collectives, point_to_point,
// variable_all_to_all, exact_completion and every group of `groups`, each
// kept only where `allow` (the options' restrict_capabilities) also has it,
// when set. Pure function.
DistributedCapabilities AdvertisedCapabilities(
    std::set<CollectiveGroupId> groups,
    const std::optional<DistributedCapabilities>& allow);

// OK when `caps` lets `operation` run on `scope` (world_collectives for the
// world, the group's id in collective_groups for a group). Otherwise
// Unimplemented naming the backend, the operation and the missing
// capability.
absl::Status RequireCollective(const DistributedCapabilities& caps,
                               const char* backend, const char* operation,
                               const CollectiveScope& scope);
// OK when `advertised`; otherwise Unimplemented naming the backend, the
// operation and `capability`.
absl::Status RequireCapability(bool advertised, const char* backend,
                               const char* operation, const char* capability);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_CAPABILITIES_H_
