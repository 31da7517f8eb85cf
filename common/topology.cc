#include "common/topology.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace rankd {
namespace {

constexpr std::array<GroupKind, 4> kSubgroupKinds = {
    GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kExpert,
    GroupKind::kData};

// A degree of zero is invalid; arithmetic helpers treat it as one so that
// they never divide by zero on unvalidated input.
uint32_t Safe(uint32_t degree) { return degree == 0 ? 1 : degree; }

// Distance in ranks between neighbours along `kind` (rank layout
// ((d*P + p)*T + t)*E + e).
uint64_t StrideOf(const ParallelTopology& t, GroupKind kind) {
  switch (kind) {
    case GroupKind::kExpert:
      return 1;
    case GroupKind::kTensor:
      return Safe(t.expert);
    case GroupKind::kPipeline:
      return uint64_t{Safe(t.tensor)} * Safe(t.expert);
    case GroupKind::kData:
      return uint64_t{Safe(t.pipeline)} * Safe(t.tensor) * Safe(t.expert);
    case GroupKind::kWorld:
      return 1;
  }
  return 1;
}

uint32_t CoordinateAlong(const RankCoordinates& c, GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return c.tensor;
    case GroupKind::kPipeline:
      return c.pipeline;
    case GroupKind::kExpert:
      return c.expert;
    case GroupKind::kData:
      return c.data;
    case GroupKind::kWorld:
      return 0;
  }
  return 0;
}

}  // namespace

std::string_view GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld:
      return "world";
    case GroupKind::kTensor:
      return "tensor";
    case GroupKind::kPipeline:
      return "pipeline";
    case GroupKind::kExpert:
      return "expert";
    case GroupKind::kData:
      return "data";
  }
  return "unknown";
}

std::string DescribeTopology(const ParallelTopology& t) {
  return absl::StrCat("tp", t.tensor, " pp", t.pipeline, " ep", t.expert, " dp",
                      t.data);
}

absl::Status ValidateTopology(const ParallelTopology& t, uint32_t world_size) {
  if (world_size == 0 || world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size ", world_size, " is outside 1..", kMaxWorldSize));
  }
  if (t.tensor == 0 || t.pipeline == 0 || t.expert == 0 || t.data == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "every parallel degree must be >= 1, got tensor=", t.tensor,
        " pipeline=", t.pipeline, " expert=", t.expert, " data=", t.data));
  }
  // Each factor is < 2^32, so the product of four may overflow 64 bits only
  // if taken naively; stop as soon as it exceeds the world size.
  uint64_t product = 1;
  for (uint32_t degree : {t.tensor, t.pipeline, t.expert, t.data}) {
    product *= degree;
    if (product > world_size) break;
  }
  if (product != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor(", t.tensor, ") * pipeline(", t.pipeline, ") * expert(",
        t.expert, ") * data(", t.data, ") = ",
        product > world_size ? absl::StrCat("more than ", world_size)
                             : absl::StrCat(product),
        ", but the world size is ", world_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParallelTopology> TopologyFromDegrees(uint32_t world_size,
                                                     uint32_t tensor,
                                                     uint32_t pipeline,
                                                     uint32_t expert) {
  if (world_size == 0 || world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size ", world_size, " is outside 1..", kMaxWorldSize));
  }
  if (tensor == 0 || pipeline == 0 || expert == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor, pipeline and expert degrees must be >= 1, got tensor=", tensor,
        " pipeline=", pipeline, " expert=", expert));
  }
  // tensor * pipeline fits in 64 bits; it is compared with the world size
  // before multiplying by expert, so that product cannot overflow either.
  const uint64_t tp = uint64_t{tensor} * pipeline;
  const bool too_big = tp > world_size || tp * expert > world_size;
  if (too_big || world_size % (tp * expert) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor(", tensor, ") * pipeline(", pipeline,
                     ") * expert(", expert, ") = ",
                     too_big ? absl::StrCat("more than ", world_size)
                             : absl::StrCat(tp * expert),
                     " does not divide the world size ", world_size));
  }
  ParallelTopology t;
  t.tensor = tensor;
  t.pipeline = pipeline;
  t.expert = expert;
  t.data = static_cast<uint32_t>(world_size / (tp * expert));
  return t;
}

RankCoordinates CoordinatesOf(const ParallelTopology& t, uint32_t rank) {
  RankCoordinates c;
  uint32_t rest = rank;
  c.expert = rest % Safe(t.expert);
  rest /= Safe(t.expert);
  c.tensor = rest % Safe(t.tensor);
  rest /= Safe(t.tensor);
  c.pipeline = rest % Safe(t.pipeline);
  rest /= Safe(t.pipeline);
  c.data = rest;
  return c;
}

uint32_t RankOf(const ParallelTopology& t, const RankCoordinates& c) {
  return ((c.data * t.pipeline + c.pipeline) * t.tensor + c.tensor) * t.expert +
         c.expert;
}

uint32_t DomainSizeOf(const ParallelTopology& t) {
  return Safe(t.tensor) * Safe(t.pipeline) * Safe(t.expert);
}

uint32_t DomainOf(const ParallelTopology& t, uint32_t rank) {
  return rank / DomainSizeOf(t);
}

uint32_t GroupSizeOf(const ParallelTopology& t, GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld:
      return t.tensor * t.pipeline * t.expert * t.data;
    case GroupKind::kTensor:
      return t.tensor;
    case GroupKind::kPipeline:
      return t.pipeline;
    case GroupKind::kExpert:
      return t.expert;
    case GroupKind::kData:
      return t.data;
  }
  return 0;
}

absl::StatusOr<std::vector<GroupSpec>> DeriveGroups(
    const ParallelTopology& topology, uint32_t world_size) {
  if (absl::Status s = ValidateTopology(topology, world_size); !s.ok()) {
    return s;
  }
  std::vector<GroupSpec> groups;
  uint32_t next_id = kWorldGroupId;

  GroupSpec world{next_id++, GroupKind::kWorld, {}};
  world.members.resize(world_size);
  for (uint32_t r = 0; r < world_size; ++r) world.members[r] = r;
  groups.push_back(std::move(world));

  for (GroupKind kind : kSubgroupKinds) {
    const uint32_t size = GroupSizeOf(topology, kind);
    const uint64_t stride = StrideOf(topology, kind);
    // A group's lowest member is the one whose coordinate along `kind` is
    // zero, and scanning ranks upward meets each group first at that member;
    // so emitting a group at each such rank numbers groups by first
    // appearance.
    for (uint32_t r = 0; r < world_size; ++r) {
      if (CoordinateAlong(CoordinatesOf(topology, r), kind) != 0) continue;
      GroupSpec group{next_id++, kind, {}};
      group.members.reserve(size);
      for (uint32_t i = 0; i < size; ++i) {
        group.members.push_back(static_cast<uint32_t>(r + i * stride));
      }
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

std::vector<std::pair<const GroupSpec*, uint32_t>> GroupsOfRank(
    const std::vector<GroupSpec>& groups, uint32_t rank) {
  std::vector<std::pair<const GroupSpec*, uint32_t>> result;
  for (const GroupSpec& group : groups) {
    auto it = std::find(group.members.begin(), group.members.end(), rank);
    if (it != group.members.end()) {
      result.emplace_back(&group,
                          static_cast<uint32_t>(it - group.members.begin()));
    }
  }
  return result;
}

}  // namespace rankd
