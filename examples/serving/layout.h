// ServingLayout: where this rank sits in the model-parallel layout and what
// it serves, derived from the descriptor rankd::Client::Join returned.
//
// Ranks are laid out as rankd lays them out (rank = ((d*P + p)*T + t)*E + e):
//   - slot (d, e): one request stream per data-parallel replica d and expert
//     index e. Its scheduler is the rank (d, p=0, t=0, e); every tensor rank
//     t and pipeline stage p of (d, e) serves the same batch.
//   - tensor group (t varies): holds one column/row slice of every MLP.
//   - pipeline group (p varies): stage p holds layers [p*L/P, (p+1)*L/P).
//   - expert group (e varies): member e holds experts [e*X/E, (e+1)*X/E) of
//     every layer of its stage; tokens travel to them and back.
// Pure computation over the descriptor.
#ifndef RANKD_EXAMPLES_SERVING_LAYOUT_H_
#define RANKD_EXAMPLES_SERVING_LAYOUT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/topology.h"
#include "rankd/v1/common.pb.h"

namespace rankd::examples {

struct ServingLayout {
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t node_index = 0;
  uint32_t nnodes = 0;
  ParallelTopology topology;
  RankCoordinates coords;
  // This rank's group ids (dataplane CollectiveGroupId), one per kind.
  uint32_t tensor_group = 0;
  uint32_t pipeline_group = 0;
  uint32_t expert_group = 0;

  uint32_t num_slots() const { return topology.data * topology.expert; }
  uint32_t SlotOf(uint32_t data, uint32_t expert) const {
    return data * topology.expert + expert;
  }
  uint32_t my_slot() const { return SlotOf(coords.data, coords.expert); }
  // The rank that schedules `slot` (stage 0, tensor index 0).
  uint32_t SchedulerOf(uint32_t slot) const;
  // The rank at (slot's d and e, stage `pipeline`, tensor index `tensor`).
  uint32_t RankServing(uint32_t slot, uint32_t pipeline, uint32_t tensor) const;
  bool is_scheduler() const {
    return coords.pipeline == 0 && coords.tensor == 0;
  }
  bool first_stage() const { return coords.pipeline == 0; }
  bool last_stage() const { return coords.pipeline + 1 == topology.pipeline; }
  // "rank 5 (node 1): d0 p1 t0 e1".
  std::string ToString() const;
};

// InvalidArgument when the descriptor lacks a group kind or is inconsistent
// with its topology.
absl::StatusOr<ServingLayout> LayoutFromDescriptor(
    const v1::SessionDescriptor& descriptor);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_LAYOUT_H_
