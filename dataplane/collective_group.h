// CollectiveGroupId and CollectiveGroupDescriptor: one collective group as
// one rank sees it (docs/contract.md, Types). The ids are those of
// common/topology.h's derived groups. Built only by a validating factory, so
// a descriptor that exists is valid. Depends on absl only.
#ifndef RANKD_DATAPLANE_COLLECTIVE_GROUP_H_
#define RANKD_DATAPLANE_COLLECTIVE_GROUP_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace rankd::dataplane {

using CollectiveGroupId = uint32_t;

// One collective group as seen by one rank: the ordered, non-empty,
// duplicate-free member list of world ranks and this rank's index in it.
class CollectiveGroupDescriptor {
 public:
  // The group `id` of `members`, in which `rank` sits at `local_rank`.
  // InvalidArgument naming the group for an empty or duplicated member
  // list, or when members[local_rank] is not `rank`.
  static absl::StatusOr<CollectiveGroupDescriptor> Create(
      CollectiveGroupId id, std::vector<uint32_t> members, uint32_t local_rank,
      uint32_t rank);

  CollectiveGroupId id() const { return id_; }
  const std::vector<uint32_t>& members() const { return members_; }
  uint32_t local_rank() const { return local_rank_; }
  uint32_t size() const { return static_cast<uint32_t>(members_.size()); }

 private:
  CollectiveGroupDescriptor(CollectiveGroupId id, std::vector<uint32_t> members,
                            uint32_t local_rank)
      : id_(id), members_(std::move(members)), local_rank_(local_rank) {}
  CollectiveGroupId id_;
  std::vector<uint32_t> members_;
  uint32_t local_rank_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_COLLECTIVE_GROUP_H_
