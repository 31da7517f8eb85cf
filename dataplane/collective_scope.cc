#include "dataplane/collective_scope.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/topology.h"

namespace rankd::dataplane {

std::string CollectiveScope::ToString() const {
  return is_world() ? "world" : absl::StrCat("group ", *group_);
}

absl::StatusOr<ResolvedScope> ResolveScope(
    const DistributedSessionDescriptor& descriptor,
    const CollectiveScope& scope) {
  ResolvedScope resolved;
  if (scope.is_world()) {
    resolved.members.resize(descriptor.world_size());
    for (uint32_t r = 0; r < descriptor.world_size(); ++r)
      resolved.members[r] = r;
    resolved.local_rank = descriptor.rank();
    resolved.group_id = kWorldGroupId;
    return resolved;
  }
  const CollectiveGroupDescriptor* group = descriptor.group(scope.group_id());
  if (group == nullptr) {
    std::vector<CollectiveGroupId> mine;
    for (const auto& g : descriptor.groups()) mine.push_back(g.id());
    return absl::NotFoundError(absl::StrCat(
        "rank ", descriptor.rank(), " is not a member of group ",
        scope.group_id(), ": its groups are ", absl::StrJoin(mine, ", "),
        ", and only those can be in capability 'collective_groups'"));
  }
  resolved.members = group->members();
  resolved.local_rank = group->local_rank();
  resolved.group_id = group->id();
  return resolved;
}

}  // namespace rankd::dataplane
