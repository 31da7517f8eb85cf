#include "dataplane/collective_group.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::dataplane {

absl::StatusOr<CollectiveGroupDescriptor> CollectiveGroupDescriptor::Create(
    CollectiveGroupId id, std::vector<uint32_t> members, uint32_t local_rank,
    uint32_t rank) {
  if (members.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", id, " has no members"));
  }
  std::set<uint32_t> seen;
  for (uint32_t m : members) {
    if (!seen.insert(m).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", id, " lists rank ", m, " twice"));
    }
  }
  if (local_rank >= members.size() || members[local_rank] != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", id, ": members[", local_rank, "] is not rank ",
                     rank, " (members: ", absl::StrJoin(members, ", "), ")"));
  }
  return CollectiveGroupDescriptor(id, std::move(members), local_rank);
}

}  // namespace rankd::dataplane
