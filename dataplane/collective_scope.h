// CollectiveScope: where a collective runs (the whole world or one group),
// and ResolveScope, which turns a scope into the ordered members and this
// rank's index among them against a session descriptor (docs/contract.md,
// Types). Depends on dataplane/session_descriptor.h,
// dataplane/collective_group.h and absl.
#ifndef RANKD_DATAPLANE_COLLECTIVE_SCOPE_H_
#define RANKD_DATAPLANE_COLLECTIVE_SCOPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/collective_group.h"
#include "dataplane/session_descriptor.h"

namespace rankd::dataplane {

// Where a collective runs: every rank of the world, or one group.
class CollectiveScope {
 public:
  static CollectiveScope World() { return CollectiveScope(std::nullopt); }
  static CollectiveScope Group(CollectiveGroupId id) {
    return CollectiveScope(id);
  }
  bool is_world() const { return !group_.has_value(); }
  // Only for a group scope (undefined for the world).
  CollectiveGroupId group_id() const { return *group_; }
  // "world" or "group <id>".
  std::string ToString() const;

 private:
  explicit CollectiveScope(std::optional<CollectiveGroupId> group)
      : group_(group) {}
  std::optional<CollectiveGroupId> group_;
};

// A scope resolved against a descriptor: the ordered members and this
// rank's index among them.
struct ResolvedScope {
  std::vector<uint32_t> members;
  uint32_t local_rank = 0;
  // The group id (kWorldGroupId for the world).
  CollectiveGroupId group_id = 0;
};

// The members of `scope` as `descriptor`'s rank sees them. NotFound naming
// the rank's groups when the group id is not one of the descriptor's groups
// (this rank is not a member of it).
absl::StatusOr<ResolvedScope> ResolveScope(
    const DistributedSessionDescriptor& descriptor,
    const CollectiveScope& scope);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_COLLECTIVE_SCOPE_H_
