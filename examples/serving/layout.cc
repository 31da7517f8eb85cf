// The serving layout of a rank (see layout.h).
#include "examples/serving/layout.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace rankd::examples {

uint32_t ServingLayout::SchedulerOf(uint32_t slot) const {
  return RankServing(slot, 0, 0);
}

uint32_t ServingLayout::RankServing(uint32_t slot, uint32_t pipeline,
                                    uint32_t tensor) const {
  RankCoordinates c;
  c.data = slot / topology.expert;
  c.expert = slot % topology.expert;
  c.pipeline = pipeline;
  c.tensor = tensor;
  return RankOf(topology, c);
}

std::string ServingLayout::ToString() const {
  return absl::StrCat("rank ", rank, " (node ", node_index, "): d", coords.data,
                      " p", coords.pipeline, " t", coords.tensor, " e",
                      coords.expert);
}

absl::StatusOr<ServingLayout> LayoutFromDescriptor(
    const v1::SessionDescriptor& d) {
  ServingLayout layout;
  layout.rank = d.rank();
  layout.world_size = d.world_size();
  layout.node_index = d.node_index();
  layout.nnodes = d.nnodes();
  layout.topology.tensor = d.topology().tensor();
  layout.topology.pipeline = d.topology().pipeline();
  layout.topology.expert = d.topology().expert();
  layout.topology.data = d.topology().data();
  if (absl::Status s = ValidateTopology(layout.topology, d.world_size());
      !s.ok()) {
    return s;
  }
  layout.coords = CoordinatesOf(layout.topology, layout.rank);
  for (const v1::CollectiveGroup& g : d.groups()) {
    switch (g.kind()) {
      case v1::GROUP_KIND_TENSOR:
        layout.tensor_group = g.id();
        break;
      case v1::GROUP_KIND_PIPELINE:
        layout.pipeline_group = g.id();
        break;
      case v1::GROUP_KIND_EXPERT:
        layout.expert_group = g.id();
        break;
      default:
        break;
    }
  }
  if (layout.tensor_group == 0 || layout.pipeline_group == 0 ||
      layout.expert_group == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("session descriptor of rank ", layout.rank,
                     " lacks a tensor, pipeline or expert group (",
                     d.groups_size(), " groups)"));
  }
  return layout;
}

}  // namespace rankd::examples
