// Expert dispatch plans from the agreed batches (see moe_dispatch.h).
#include "examples/serving/moe_dispatch.h"

#include <cstdint>
#include <vector>

namespace rankd::examples {

DispatchPlan PlanDispatch(const ModelShard& shard, const ServingLayout& layout,
                          const StepPlan& plan, uint32_t layer) {
  const uint32_t members = layout.topology.expert;
  const uint32_t me = layout.coords.expert;
  DispatchPlan d;
  d.send_counts.assign(members, 0);
  d.receive_counts.assign(members, 0);
  // What this rank sends: its slot's tokens grouped by owning member.
  const std::vector<TokenRef> mine = plan.slots[layout.my_slot()].TokenRefs();
  std::vector<std::vector<size_t>> by_member(members);
  for (size_t row = 0; row < mine.size(); ++row) {
    const uint32_t expert =
        ExpertOf(shard.spec(), mine[row].request_id, mine[row].position, layer);
    by_member[shard.OwnerOf(expert)].push_back(row);
  }
  for (uint32_t m = 0; m < members; ++m) {
    d.send_counts[m] = by_member[m].size();
    d.send_order.insert(d.send_order.end(), by_member[m].begin(),
                        by_member[m].end());
  }
  // What it receives: from each member, that member's slot's tokens whose
  // expert this rank owns, in their order.
  for (uint32_t m = 0; m < members; ++m) {
    const uint32_t slot = layout.SlotOf(layout.coords.data, m);
    for (const TokenRef& t : plan.slots[slot].TokenRefs()) {
      const uint32_t expert =
          ExpertOf(shard.spec(), t.request_id, t.position, layer);
      if (shard.OwnerOf(expert) != me) continue;
      ++d.receive_counts[m];
      d.received_experts.push_back(expert);
    }
  }
  return d;
}

}  // namespace rankd::examples
