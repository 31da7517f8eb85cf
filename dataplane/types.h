// Supporting types of the data-plane contract (docs/contract.md, Types):
// dtypes, value and group descriptors, the session descriptor, collective
// scopes and fail-closed capabilities. Every type with an invariant is built by
// a factory that validates it, so a value that exists is valid. Depends on absl
// and common/topology only.
#ifndef RANKD_DATAPLANE_TYPES_H_
#define RANKD_DATAPLANE_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/topology.h"

namespace rankd::dataplane {

// Element types a value may hold.
enum class TensorDtype {
  kBool,
  kF32,
  kF16,
  kBf16,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kComplex64,
};

// Bytes per element (Bool is one byte).
size_t DtypeSize(TensorDtype dtype);
// "f32", "bf16", "complex64", ...
const char* DtypeName(TensorDtype dtype);

// Row-major logical shape and element type of a value. An empty shape is a
// scalar (one element). A zero-sized dimension is rejected.
class ValueDescriptor {
 public:
  // InvalidArgument for a zero dimension or an element count that overflows.
  static absl::StatusOr<ValueDescriptor> Create(std::vector<size_t> shape,
                                                TensorDtype dtype);
  // A value of `rows` rows shaped like `row` (shape [rows, row.shape...]).
  // The one way to build an empty leading axis (rows == 0): variable-count
  // exchanges (all_to_all_v, uneven gathers) legitimately send or receive
  // nothing. InvalidArgument on overflow.
  static absl::StatusOr<ValueDescriptor> Rows(size_t rows,
                                              const ValueDescriptor& row);
  // The shape of one row of this value's leading axis: shape[1:] (a scalar
  // row for a 1-D value or a scalar).
  ValueDescriptor RowDescriptor() const;

  const std::vector<size_t>& shape() const { return shape_; }
  TensorDtype dtype() const { return dtype_; }
  size_t element_count() const { return elements_; }
  size_t byte_size() const { return elements_ * DtypeSize(dtype_); }
  // Elements in one row of the leading axis (all elements for a scalar).
  size_t row_elements() const;
  // Length of the leading axis (1 for a scalar).
  size_t rows() const { return shape_.empty() ? 1 : shape_[0]; }
  // "f32[4, 8]"
  std::string ToString() const;

  friend bool operator==(const ValueDescriptor& a, const ValueDescriptor& b) {
    return a.shape_ == b.shape_ && a.dtype_ == b.dtype_;
  }

 private:
  ValueDescriptor(std::vector<size_t> shape, TensorDtype dtype, size_t elements)
      : shape_(std::move(shape)), dtype_(dtype), elements_(elements) {}
  std::vector<size_t> shape_;
  TensorDtype dtype_;
  size_t elements_;
};

using CollectiveGroupId = uint32_t;

// One collective group as seen by one rank: the ordered, non-empty,
// duplicate-free member list of world ranks and this rank's index in it.
class CollectiveGroupDescriptor {
 public:
  // InvalidArgument for an empty or duplicated member list, or when
  // members[local_rank] is not `rank`.
  static absl::StatusOr<CollectiveGroupDescriptor> Create(
      CollectiveGroupId id, std::vector<uint32_t> members, uint32_t local_rank,
      uint32_t rank);

  CollectiveGroupId id() const { return id_; }
  const std::vector<uint32_t>& members() const { return members_; }
  uint32_t local_rank() const { return local_rank_; }
  uint32_t size() const { return static_cast<uint32_t>(members_.size()); }

 private:
  CollectiveGroupDescriptor(CollectiveGroupId id, std::vector<uint32_t> members,
                            uint32_t local_rank)
      : id_(id), members_(std::move(members)), local_rank_(local_rank) {}
  CollectiveGroupId id_;
  std::vector<uint32_t> members_;
  uint32_t local_rank_;
};

// Stable topology and rank identity of a session.
class DistributedSessionDescriptor {
 public:
  // InvalidArgument unless world_size > 0, rank < world_size, group ids are
  // unique and every member is < world_size.
  static absl::StatusOr<DistributedSessionDescriptor> Create(
      uint32_t world_size, uint32_t rank,
      std::vector<CollectiveGroupDescriptor> groups);

  // The descriptor a ParallelTopology implies for `rank`: the groups of
  // common/topology.h that contain it, in derivation order.
  static absl::StatusOr<DistributedSessionDescriptor> FromTopology(
      const ParallelTopology& topology, uint32_t world_size, uint32_t rank);

  uint32_t world_size() const { return world_size_; }
  uint32_t rank() const { return rank_; }
  const std::vector<CollectiveGroupDescriptor>& groups() const {
    return groups_;
  }
  // The group with `id`, or nullptr.
  const CollectiveGroupDescriptor* group(CollectiveGroupId id) const;

  // Where this rank runs on its node: its index among the node's ranks and
  // how many ranks the node runs (a device backend gives each its own
  // device). Until SetNodePlacement, the whole world is on one node:
  // local_rank() == rank(), ranks_on_node() == world_size().
  uint32_t local_rank() const { return local_rank_; }
  uint32_t ranks_on_node() const { return ranks_on_node_; }
  // InvalidArgument (and no change) unless
  // local_rank < ranks_on_node <= world_size.
  absl::Status SetNodePlacement(uint32_t local_rank, uint32_t ranks_on_node);

 private:
  DistributedSessionDescriptor(uint32_t world_size, uint32_t rank,
                               std::vector<CollectiveGroupDescriptor> groups)
      : world_size_(world_size),
        rank_(rank),
        local_rank_(rank),
        ranks_on_node_(world_size),
        groups_(std::move(groups)) {}
  uint32_t world_size_;
  uint32_t rank_;
  uint32_t local_rank_;
  uint32_t ranks_on_node_;
  std::vector<CollectiveGroupDescriptor> groups_;
};

// Where a collective runs: every rank of the world, or one group.
class CollectiveScope {
 public:
  static CollectiveScope World() { return CollectiveScope(std::nullopt); }
  static CollectiveScope Group(CollectiveGroupId id) {
    return CollectiveScope(id);
  }
  bool is_world() const { return !group_.has_value(); }
  // Only for a group scope.
  CollectiveGroupId group_id() const { return *group_; }
  std::string ToString() const;

 private:
  explicit CollectiveScope(std::optional<CollectiveGroupId> group)
      : group_(group) {}
  std::optional<CollectiveGroupId> group_;
};

// A scope resolved against a descriptor: the ordered members and this
// rank's index among them.
struct ResolvedScope {
  std::vector<uint32_t> members;
  uint32_t local_rank = 0;
  // The group id (kWorldGroupId for the world).
  CollectiveGroupId group_id = 0;
};

// The members of `scope`. NotFound when the group id is not one of the
// descriptor's groups (this rank is not a member of it).
absl::StatusOr<ResolvedScope> ResolveScope(
    const DistributedSessionDescriptor& descriptor,
    const CollectiveScope& scope);

// What a backend can do. Default: nothing (fail closed). An operation whose
// capability is not advertised fails before any native work.
struct DistributedCapabilities {
  bool world_collectives = false;
  std::set<CollectiveGroupId> collective_groups;
  bool point_to_point = false;
  bool variable_all_to_all = false;
  bool exact_completion = false;
};

// The capability an operation needs on `scope`. Unimplemented naming the
// backend, the operation and the missing capability when it is absent.
absl::Status RequireCollective(const DistributedCapabilities& caps,
                               const char* backend, const char* operation,
                               const CollectiveScope& scope);
absl::Status RequireCapability(bool advertised, const char* backend,
                               const char* operation, const char* capability);

// Validation shared by every backend returns InvalidArgument with a
// message naming the operation, before any native work (also shape.h's
// LayoutAllToAll and batch.h's CheckBatch).
// One transfer of a batched send/receive: `value` goes to (or, for a
// receive, is the caller-owned output filled from) member `peer` of the
// scope (or group).
template <typename T>
struct PeerValue {
  size_t peer = 0;
  T value;
};
// The most transfers one batched send/receive may hold.
inline constexpr size_t kMaxBatchTransfers = 4096;

// send/receive: `peer` indexes the scope's members and is not this rank.
absl::Status CheckPeer(size_t peer, const ResolvedScope& scope,
                       const char* operation);
// all_gather: output shape [members * n, ...] for a [n, ...] input, and
// [members] for a scalar.
ValueDescriptor AllGatherOutput(const ValueDescriptor& input, uint32_t members);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_TYPES_H_
