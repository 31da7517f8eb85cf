#include "dataplane/domain_groups.h"

#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::dataplane {
namespace {

// The domains `members` touch, in rank order: "0 and 1", "0, 1 and 2".
std::string DomainsOf(const RecoveryDomain& mine,
                      const std::vector<uint32_t>& members) {
  std::set<uint32_t> domains;
  for (uint32_t m : members) {
    // Domains are equal contiguous blocks (common/topology.h).
    domains.insert(m / mine.size);
  }
  std::vector<uint32_t> list(domains.begin(), domains.end());
  if (list.size() == 1) return absl::StrCat("domain ", list[0]);
  const uint32_t last = list.back();
  list.pop_back();
  return absl::StrCat("domains ", absl::StrJoin(list, ", "), " and ", last);
}

}  // namespace

bool HoldsWorld(const DistributedSessionDescriptor& descriptor) {
  const auto& domain = descriptor.recovery_domain();
  return !domain.has_value() || domain->size == descriptor.world_size();
}

bool HoldsGroup(const DistributedSessionDescriptor& descriptor,
                const CollectiveGroupDescriptor& group) {
  const auto& domain = descriptor.recovery_domain();
  if (!domain.has_value()) return true;
  for (uint32_t m : group.members()) {
    if (!domain->Contains(m)) return false;
  }
  return true;
}

std::vector<const CollectiveGroupDescriptor*> HeldGroups(
    const DistributedSessionDescriptor& descriptor) {
  std::vector<const CollectiveGroupDescriptor*> held;
  for (const auto& g : descriptor.groups()) {
    if (HoldsGroup(descriptor, g)) held.push_back(&g);
  }
  return held;
}

DistributedCapabilities HeldCapabilities(
    const DistributedSessionDescriptor& descriptor,
    const std::optional<DistributedCapabilities>& allow) {
  std::set<CollectiveGroupId> ids;
  for (const auto* g : HeldGroups(descriptor)) ids.insert(g->id());
  DistributedCapabilities caps = AdvertisedCapabilities(std::move(ids), allow);
  if (!HoldsWorld(descriptor)) caps.world_collectives = false;
  return caps;
}

absl::Status CheckHeld(const char* backend, const char* operation,
                       const DistributedSessionDescriptor& descriptor,
                       const CollectiveScope& scope) {
  const auto& domain = descriptor.recovery_domain();
  if (!domain.has_value()) return absl::OkStatus();
  std::string what;
  if (scope.is_world()) {
    if (HoldsWorld(descriptor)) return absl::OkStatus();
    what = "the world spans every domain";
  } else {
    const CollectiveGroupDescriptor* group = descriptor.group(scope.group_id());
    if (group == nullptr || HoldsGroup(descriptor, *group)) {
      return absl::OkStatus();
    }
    what = absl::StrCat("group ", group->id(), " (members ",
                        absl::StrJoin(group->members(), ", "), ") spans ",
                        DomainsOf(*domain, group->members()));
  }
  std::vector<CollectiveGroupId> held;
  for (const auto* g : HeldGroups(descriptor)) held.push_back(g->id());
  return absl::FailedPreconditionError(absl::StrCat(
      backend, " backend: ", operation, " on ", scope.ToString(),
      " refused: the job recovers by data-parallel domain and this session "
      "holds only ",
      domain->ToString(), "'s groups (",
      held.empty() ? "none" : absl::StrJoin(held, ", "), "); ", what,
      " and is not connected, so that a replica re-forms alone; exchange "
      "world-wide through the control plane's all_gather_words "
      "(Client::AllGatherWordsWithView: its result names the domains it "
      "spans)"));
}

}  // namespace rankd::dataplane
