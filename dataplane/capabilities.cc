#include "dataplane/capabilities.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

DistributedCapabilities AdvertisedCapabilities(
    std::set<CollectiveGroupId> groups,
    const std::optional<DistributedCapabilities>& allow) {
  DistributedCapabilities caps{true, std::move(groups), true, true, true};
  if (!allow.has_value()) return caps;
  caps.world_collectives &= allow->world_collectives;
  std::erase_if(caps.collective_groups, [&](CollectiveGroupId id) {
    return !allow->collective_groups.contains(id);
  });
  caps.point_to_point &= allow->point_to_point;
  caps.variable_all_to_all &= allow->variable_all_to_all;
  caps.exact_completion &= allow->exact_completion;
  return caps;
}

absl::Status RequireCapability(bool advertised, const char* backend,
                               const char* operation, const char* capability) {
  if (advertised) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(backend, " backend: ", operation, " needs capability '",
                   capability, "', which this backend does not advertise"));
}

absl::Status RequireCollective(const DistributedCapabilities& caps,
                               const char* backend, const char* operation,
                               const CollectiveScope& scope) {
  if (scope.is_world()) {
    return RequireCapability(caps.world_collectives, backend, operation,
                             "world_collectives");
  }
  if (caps.collective_groups.contains(scope.group_id()))
    return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      backend, " backend: ", operation, " on group ", scope.group_id(),
      " needs capability 'collective_groups' to include it, which this "
      "backend does not advertise"));
}

}  // namespace rankd::dataplane
