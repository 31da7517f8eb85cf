// ForwardStep: this rank's part of one serving step, once the batch is
// agreed (batch_agreement.h):
//
//   1. input    stage 0 embeds its slot's tokens; a later stage receives
//               the activations from the previous stage (receive on the
//               pipeline group; the shape comes from the agreed batch).
//   2. per layer of the stage:
//      a. MLP   partial output from this rank's ffn slice, summed over the
//               tensor group with all_reduce_sum, added to the residual.
//      b. MoE   tokens go to the expert-group members owning their experts
//               and come back with all_to_all_v (counts from
//               moe_dispatch.h), the expert output added to the residual.
//   3. output   a stage that is not the last sends its activations on.
//
// Collectives on groups of one member are skipped (their result is the
// input); a slot with no tokens skips its tensor and pipeline transfers on
// every rank that serves it, but still takes part in all_to_all_v, which
// every expert-group member must join.
#ifndef RANKD_EXAMPLES_SERVING_FORWARD_STEP_H_
#define RANKD_EXAMPLES_SERVING_FORWARD_STEP_H_

#include "absl/status/statusor.h"
#include "examples/serving/batch_agreement.h"
#include "examples/serving/collectives.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_shard.h"

namespace rankd::examples {

// The activations of this rank's slot after its stage's last layer:
// [tokens, hidden]. For the last stage these are the model's outputs.
absl::StatusOr<Matrix> ForwardStep(Collectives& collectives,
                                   const ModelShard& shard,
                                   const ServingLayout& layout,
                                   const StepPlan& plan);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_FORWARD_STEP_H_
