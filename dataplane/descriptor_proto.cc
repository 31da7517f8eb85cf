#include "dataplane/descriptor_proto.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/topology.h"

namespace rankd::dataplane {

absl::StatusOr<DistributedSessionDescriptor> DescriptorFromProto(
    const v1::SessionDescriptor& proto) {
  std::vector<CollectiveGroupDescriptor> groups;
  groups.reserve(proto.groups_size());
  for (const v1::CollectiveGroup& g : proto.groups()) {
    auto group = CollectiveGroupDescriptor::Create(
        g.id(), std::vector<uint32_t>(g.members().begin(), g.members().end()),
        g.local_rank(), proto.rank());
    if (!group.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("session descriptor of job ", proto.job_id(), ": ",
                       group.status().message()));
    }
    groups.push_back(*std::move(group));
  }
  auto descriptor = DistributedSessionDescriptor::Create(
      proto.world_size(), proto.rank(), std::move(groups));
  if (!descriptor.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("session descriptor of job ", proto.job_id(), ": ",
                     descriptor.status().message()));
  }
  // A descriptor without nproc_per_node keeps the one-node default.
  if (proto.nproc_per_node() > 0) {
    absl::Status placed = descriptor->SetNodePlacement(proto.local_rank(),
                                                       proto.nproc_per_node());
    if (!placed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("session descriptor of job ", proto.job_id(), ": ",
                       placed.message()));
    }
  }
  // An old daemon sends no epoch (0 on the wire): its jobs never leave
  // epoch 1.
  if (proto.epoch() > 1) {
    absl::Status epoch = descriptor->SetEpoch(proto.epoch());
    if (!epoch.ok()) return epoch;
  }
  // Recovery by domain confines the session to the rank's replica: the
  // contiguous block of T*P*E ranks (common/topology.h).
  if (proto.recovery_by_domain()) {
    // A replica is T*P*E ranks (an unset degree, 0 on the wire, is 1),
    // which must tile the world. Checked before dividing by it: degrees
    // whose 32-bit product wraps to 0 divided by zero.
    uint64_t replica = 1;
    for (uint32_t d : {proto.topology().tensor(), proto.topology().pipeline(),
                       proto.topology().expert()}) {
      replica *= d == 0 ? 1u : d;
      if (replica > proto.world_size()) break;
    }
    if (replica > proto.world_size() || proto.world_size() % replica != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session descriptor of job ", proto.job_id(),
          ": recovery by domain: tensor(", proto.topology().tensor(),
          ") * pipeline(", proto.topology().pipeline(), ") * expert(",
          proto.topology().expert(),
          ") ranks per replica do not tile the "
          "world of ",
          proto.world_size()));
    }
    const uint32_t size = static_cast<uint32_t>(replica);
    const uint32_t index = proto.rank() / size;
    absl::Status domain =
        descriptor->SetRecoveryDomain({index, index * size, size});
    if (!domain.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("session descriptor of job ", proto.job_id(), ": ",
                       domain.message()));
    }
  }
  return descriptor;
}

}  // namespace rankd::dataplane
