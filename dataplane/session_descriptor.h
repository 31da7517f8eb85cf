// DistributedSessionDescriptor: the stable topology and rank identity a
// session is opened with (docs/contract.md, Types): world size, this rank,
// the groups it belongs to, and where it runs on its node. Built only by
// validating factories, so a descriptor that exists is valid. Depends on
// dataplane/collective_group.h, dataplane/recovery_domain.h,
// common/topology.h and absl.
#ifndef RANKD_DATAPLANE_SESSION_DESCRIPTOR_H_
#define RANKD_DATAPLANE_SESSION_DESCRIPTOR_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/topology.h"
#include "dataplane/collective_group.h"
#include "dataplane/recovery_domain.h"

namespace rankd::dataplane {

// Stable topology and rank identity of a session.
class DistributedSessionDescriptor {
 public:
  // The descriptor of `rank` in a world of `world_size` with `groups`.
  // InvalidArgument naming the fault unless world_size > 0,
  // rank < world_size, group ids are unique, every member is < world_size
  // and every group places `rank` at its local rank.
  static absl::StatusOr<DistributedSessionDescriptor> Create(
      uint32_t world_size, uint32_t rank,
      std::vector<CollectiveGroupDescriptor> groups);

  // The descriptor a ParallelTopology implies for `rank`: the groups of
  // common/topology.h that contain it, in derivation order. The error of
  // DeriveGroups for a topology that does not fit `world_size`;
  // InvalidArgument for a rank outside the world.
  static absl::StatusOr<DistributedSessionDescriptor> FromTopology(
      const ParallelTopology& topology, uint32_t world_size, uint32_t rank);

  uint32_t world_size() const { return world_size_; }
  uint32_t rank() const { return rank_; }
  const std::vector<CollectiveGroupDescriptor>& groups() const {
    return groups_;
  }
  // The group with `id`, or nullptr when this rank is not a member of it.
  const CollectiveGroupDescriptor* group(CollectiveGroupId id) const;

  // Where this rank runs on its node: its index among the node's ranks and
  // how many ranks the node runs (a device backend gives each its own
  // device). Until SetNodePlacement, the whole world is on one node:
  // local_rank() == rank(), ranks_on_node() == world_size().
  uint32_t local_rank() const { return local_rank_; }
  uint32_t ranks_on_node() const { return ranks_on_node_; }
  // Records the node placement. InvalidArgument (and no change) unless
  // local_rank < ranks_on_node <= world_size.
  absl::Status SetNodePlacement(uint32_t local_rank, uint32_t ranks_on_node);

  // The job epoch this descriptor belongs to (docs/architecture.md, "Epochs
  // and recovery"): 1 until a recovery moves the job on. A session opened
  // with it names its keys under that epoch (EpochKey in
  // dataplane/control_plane.h), so sessions of two epochs never meet.
  uint64_t epoch() const { return epoch_; }
  // Records the epoch. InvalidArgument (and no change) for epoch 0.
  absl::Status SetEpoch(uint64_t epoch);

  // The data-parallel replica this rank's session is confined to when the
  // job recovers by domain (docs/contract.md, "Data-parallel domains"), or
  // nullopt when it does not (the default). groups() still lists every
  // group of the rank; which of them a session holds is
  // dataplane/domain_groups.h's rule.
  const std::optional<RecoveryDomain>& recovery_domain() const {
    return recovery_domain_;
  }
  // Records the domain. InvalidArgument (and no change) unless the domain
  // is non-empty, lies inside the world and contains rank().
  absl::Status SetRecoveryDomain(const RecoveryDomain& domain);

 private:
  DistributedSessionDescriptor(uint32_t world_size, uint32_t rank,
                               std::vector<CollectiveGroupDescriptor> groups)
      : world_size_(world_size),
        rank_(rank),
        local_rank_(rank),
        ranks_on_node_(world_size),
        groups_(std::move(groups)) {}
  uint32_t world_size_;
  uint32_t rank_;
  uint32_t local_rank_;
  uint32_t ranks_on_node_;
  uint64_t epoch_ = 1;
  std::optional<RecoveryDomain> recovery_domain_;
  std::vector<CollectiveGroupDescriptor> groups_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SESSION_DESCRIPTOR_H_
