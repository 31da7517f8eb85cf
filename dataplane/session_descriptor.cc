#include "dataplane/session_descriptor.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

absl::StatusOr<DistributedSessionDescriptor>
DistributedSessionDescriptor::Create(
    uint32_t world_size, uint32_t rank,
    std::vector<CollectiveGroupDescriptor> groups) {
  if (world_size == 0) {
    return absl::InvalidArgumentError("world_size must be > 0");
  }
  if (rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the world of size ", world_size));
  }
  std::set<CollectiveGroupId> ids;
  for (const auto& g : groups) {
    if (!ids.insert(g.id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("group id ", g.id(), " appears twice"));
    }
    for (uint32_t m : g.members()) {
      if (m >= world_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("group ", g.id(), " has member ", m,
                         ", outside the world of size ", world_size));
      }
    }
    if (g.members()[g.local_rank()] != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", g.id(), " does not place rank ", rank,
                       " at its local rank"));
    }
  }
  return DistributedSessionDescriptor(world_size, rank, std::move(groups));
}

absl::Status DistributedSessionDescriptor::SetNodePlacement(
    uint32_t local_rank, uint32_t ranks_on_node) {
  if (local_rank >= ranks_on_node || ranks_on_node > world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node placement: local rank ", local_rank, " of ", ranks_on_node,
        " ranks on the node is not valid in a world of ", world_size_));
  }
  local_rank_ = local_rank;
  ranks_on_node_ = ranks_on_node;
  return absl::OkStatus();
}

absl::Status DistributedSessionDescriptor::SetEpoch(uint64_t epoch) {
  if (epoch == 0) {
    return absl::InvalidArgumentError(
        "session descriptor: epoch 0 is not valid (epochs count from 1)");
  }
  epoch_ = epoch;
  return absl::OkStatus();
}

absl::Status DistributedSessionDescriptor::SetRecoveryDomain(
    const RecoveryDomain& domain) {
  if (domain.size == 0 || domain.first_rank >= world_size_ ||
      domain.size > world_size_ - domain.first_rank ||
      !domain.Contains(rank_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session descriptor: recovery domain ", domain.index, " (", domain.size,
        " ranks from rank ", domain.first_rank, ") is not valid for rank ",
        rank_, " in a world of ", world_size_));
  }
  recovery_domain_ = domain;
  return absl::OkStatus();
}

absl::StatusOr<DistributedSessionDescriptor>
DistributedSessionDescriptor::FromTopology(const ParallelTopology& topology,
                                           uint32_t world_size, uint32_t rank) {
  auto derived = DeriveGroups(topology, world_size);
  if (!derived.ok()) return derived.status();
  if (rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the world of size ", world_size));
  }
  std::vector<CollectiveGroupDescriptor> groups;
  for (const auto& [spec, index] : GroupsOfRank(*derived, rank)) {
    auto group =
        CollectiveGroupDescriptor::Create(spec->id, spec->members, index, rank);
    if (!group.ok()) return group.status();
    groups.push_back(*std::move(group));
  }
  return Create(world_size, rank, std::move(groups));
}

const CollectiveGroupDescriptor* DistributedSessionDescriptor::group(
    CollectiveGroupId id) const {
  for (const auto& g : groups_) {
    if (g.id() == id) return &g;
  }
  return nullptr;
}

}  // namespace rankd::dataplane
