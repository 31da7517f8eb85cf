// Parallel topology of a rankd job and the collective groups derived from it.
//
// A job of `world_size` ranks is split into tensor (T), pipeline (P), expert
// (E) and data (D) parallel degrees whose product is the world size. Ranks
// are laid out data-outermost, expert-innermost:
//
//   rank = ((d*P + p)*T + t)*E + e
//
// Every rank derives the same groups from the same topology (docs/contract.md,
// Types): group id 1 holds every rank, then come all tensor groups, then
// pipeline, expert and data groups, numbered consecutively in that order.
// Within one kind, groups are numbered by first appearance when scanning ranks
// 0..W-1, and each group's members are in ascending rank order. Groups of
// size one are kept (TP=1 gives W singleton tensor groups) so that a given
// kind always starts at the same id for a given world size.
//
// Pure computation: depends only on abseil and the standard library, does no
// I/O and holds no state. Safe to call from any thread.

#ifndef RANKD_COMMON_TOPOLOGY_H_
#define RANKD_COMMON_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rankd {

// Largest world size rankd accepts. Group derivation allocates about five
// entries per rank, so the bound keeps a mistyped size from exhausting memory.
inline constexpr uint32_t kMaxWorldSize = 1u << 20;

// Id of the group that holds every rank.
inline constexpr uint32_t kWorldGroupId = 1;

// Degrees of parallelism. Each is >= 1 and their product is the world size.
struct ParallelTopology {
  uint32_t tensor = 1;
  uint32_t pipeline = 1;
  uint32_t expert = 1;
  uint32_t data = 1;

  friend bool operator==(const ParallelTopology&,
                         const ParallelTopology&) = default;
};

// The kinds of derived groups, in derivation order.
enum class GroupKind { kWorld, kTensor, kPipeline, kExpert, kData };

// Returns "world", "tensor", "pipeline", "expert" or "data"; "unknown" for a
// value outside the enum.
std::string_view GroupKindName(GroupKind kind);

// One derived group. `members` are world ranks, ascending, non-empty and
// duplicate-free.
struct GroupSpec {
  uint32_t id = 0;
  GroupKind kind = GroupKind::kWorld;
  std::vector<uint32_t> members;

  friend bool operator==(const GroupSpec&, const GroupSpec&) = default;
};

// A rank's position along each parallel axis.
struct RankCoordinates {
  uint32_t tensor = 0;
  uint32_t pipeline = 0;
  uint32_t expert = 0;
  uint32_t data = 0;

  friend bool operator==(const RankCoordinates&,
                         const RankCoordinates&) = default;
};

// Returns "tp2 pp2 ep1 dp2" style text for logs and error messages.
std::string DescribeTopology(const ParallelTopology& topology);

// Returns OK iff world_size is in 1..kMaxWorldSize, every degree is >= 1 and
// the product of the degrees equals world_size. Otherwise InvalidArgument
// naming the degrees, their product and the world size.
absl::Status ValidateTopology(const ParallelTopology& topology,
                              uint32_t world_size);

// Builds a topology from the tensor, pipeline and expert degrees; the data
// degree is world_size / (tensor * pipeline * expert). Returns
// InvalidArgument when a degree is zero, world_size is out of range, or the
// product of the three degrees does not divide world_size.
absl::StatusOr<ParallelTopology> TopologyFromDegrees(uint32_t world_size,
                                                     uint32_t tensor,
                                                     uint32_t pipeline,
                                                     uint32_t expert);

// Returns the coordinates of `rank`. Requires a valid topology and a rank
// below its world size (product of degrees); otherwise the result is
// meaningless (but the call is still safe).
RankCoordinates CoordinatesOf(const ParallelTopology& topology, uint32_t rank);

// Inverse of CoordinatesOf: returns ((d*P + p)*T + t)*E + e. Requires a valid
// topology and each coordinate below its degree.
uint32_t RankOf(const ParallelTopology& topology,
                const RankCoordinates& coordinates);

// Returns the number of ranks in each group of `kind` (world_size for kWorld,
// the matching degree otherwise).
uint32_t GroupSizeOf(const ParallelTopology& topology, GroupKind kind);

// Data-parallel domains (docs/contract.md, "Data-parallel domains"): a
// domain is one model replica, the ranks sharing a data coordinate. Data is
// the outermost axis, so domain d is the contiguous ranks
// [d * DomainSizeOf(t), (d + 1) * DomainSizeOf(t)).

// Ranks per domain: tensor * pipeline * expert (at least 1).
uint32_t DomainSizeOf(const ParallelTopology& topology);

// The domain of `rank` (its data coordinate). Requires a valid topology;
// a rank outside the world gives a domain >= topology.data.
uint32_t DomainOf(const ParallelTopology& topology, uint32_t rank);

// Derives every group of the job, identically on every rank: the world group
// (id 1), then W/T tensor groups, W/P pipeline groups, W/E expert groups and
// W/D data groups, ids consecutive. Returns InvalidArgument when
// ValidateTopology(topology, world_size) fails.
absl::StatusOr<std::vector<GroupSpec>> DeriveGroups(
    const ParallelTopology& topology, uint32_t world_size);

// Returns the groups whose members contain `rank`, in the order of `groups`,
// each paired with the rank's index in that group's members. The pointers
// point into `groups` and are valid while it is unchanged. Empty when no group
// contains `rank`.
std::vector<std::pair<const GroupSpec*, uint32_t>> GroupsOfRank(
    const std::vector<GroupSpec>& groups, uint32_t rank);

}  // namespace rankd

#endif  // RANKD_COMMON_TOPOLOGY_H_
