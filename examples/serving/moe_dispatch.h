// Expert dispatch plan: how the tokens of one layer travel to the members
// of the expert group that own their experts, and back, with all_to_all_v.
//
// Every member of an expert group (same data replica, stage and tensor
// index; expert index e varies) serves a different slot (d, e). A token's
// expert comes from hash routing (ExpertOf), so the counts follow from the
// agreed batches alone: member m sends to member n the tokens of slot (d, m)
// whose expert n owns, in the slot's token order. No count exchange is
// needed beyond the batch agreement. Pure computation.
#ifndef RANKD_EXAMPLES_SERVING_MOE_DISPATCH_H_
#define RANKD_EXAMPLES_SERVING_MOE_DISPATCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "examples/serving/batch_agreement.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_shard.h"

namespace rankd::examples {

struct DispatchPlan {
  // Per expert-group member: rows this rank sends it / receives from it.
  std::vector<size_t> send_counts;
  std::vector<size_t> receive_counts;
  // This rank's token rows in send order (destination-major, stable).
  std::vector<size_t> send_order;
  // The expert of every received row (source-major), to apply locally.
  std::vector<uint32_t> received_experts;
};

// The plan of `layer` for this rank, from the agreed `plan`.
DispatchPlan PlanDispatch(const ModelShard& shard, const ServingLayout& layout,
                          const StepPlan& plan, uint32_t layer);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_MOE_DISPATCH_H_
