#include "dataplane/nccl/internal/unique_id_plan.h"

#include <algorithm>

namespace rankd::dataplane::nccl::internal {

UniqueIdPlan PlanUniqueIds(uint32_t nranks, uint32_t ranks_per_id,
                           bool scalable_available) {
  UniqueIdPlan plan;
  plan.nranks = nranks;
  if (ranks_per_id == 0) ranks_per_id = kDefaultRanksPerUniqueId;
  if (nranks == 0) return plan;
  if (!scalable_available || nranks <= ranks_per_id) {
    plan.roots = {0};
    return plan;
  }
  const uint32_t count = (nranks + ranks_per_id - 1) / ranks_per_id;
  const uint32_t per_root = nranks / count;
  const uint32_t extra = nranks % count;
  plan.roots.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    plan.roots.push_back(i * per_root + std::min(i, extra));
  }
  return plan;
}

}  // namespace rankd::dataplane::nccl::internal
