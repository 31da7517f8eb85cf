// The unique-id plan of a communicator: how many ncclUniqueIds it needs and
// which communicator rank creates (and publishes) each one
// (internal/unique_id_broker.h hands them out). Private to dataplane/nccl.
// Depends on nccl_unique_id.h.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_UNIQUE_ID_PLAN_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_UNIQUE_ID_PLAN_H_

#include <cstdint>
#include <vector>

#include "dataplane/nccl/nccl_unique_id.h"

namespace rankd::dataplane::nccl::internal {

// With scalable init, one id per `ranks_per_id` ranks (rounded up); the
// roots are spread the way NCCL assigns ranks to roots (root i serves
// nranks/count ranks, one more for the first nranks%count), and root i is
// the first rank it serves. Without scalable init (or nranks <=
// ranks_per_id): one id, created by rank 0.
struct UniqueIdPlan {
  uint32_t nranks = 0;
  std::vector<uint32_t> roots;  // roots[i] creates id i
  uint32_t count() const { return static_cast<uint32_t>(roots.size()); }
  bool scalable() const { return roots.size() > 1; }
};
// The plan for a communicator of `nranks`; `ranks_per_id` 0 means
// kDefaultRanksPerUniqueId. No ids for nranks 0.
UniqueIdPlan PlanUniqueIds(uint32_t nranks, uint32_t ranks_per_id,
                           bool scalable_available);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_UNIQUE_ID_PLAN_H_
