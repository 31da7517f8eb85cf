#include "dataplane/types.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::dataplane {
namespace {

// elements * factor without overflow, or nullopt.
std::optional<size_t> Multiply(size_t a, size_t b) {
  if (a != 0 && b > std::numeric_limits<size_t>::max() / a) return std::nullopt;
  return a * b;
}

}  // namespace

size_t DtypeSize(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kBool:
    case TensorDtype::kI8:
    case TensorDtype::kU8:
      return 1;
    case TensorDtype::kF16:
    case TensorDtype::kBf16:
    case TensorDtype::kI16:
    case TensorDtype::kU16:
      return 2;
    case TensorDtype::kF32:
    case TensorDtype::kI32:
    case TensorDtype::kU32:
      return 4;
    case TensorDtype::kF64:
    case TensorDtype::kI64:
    case TensorDtype::kU64:
    case TensorDtype::kComplex64:
      return 8;
  }
  return 1;
}

const char* DtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kBool:
      return "bool";
    case TensorDtype::kF32:
      return "f32";
    case TensorDtype::kF16:
      return "f16";
    case TensorDtype::kBf16:
      return "bf16";
    case TensorDtype::kF64:
      return "f64";
    case TensorDtype::kI8:
      return "i8";
    case TensorDtype::kI16:
      return "i16";
    case TensorDtype::kI32:
      return "i32";
    case TensorDtype::kI64:
      return "i64";
    case TensorDtype::kU8:
      return "u8";
    case TensorDtype::kU16:
      return "u16";
    case TensorDtype::kU32:
      return "u32";
    case TensorDtype::kU64:
      return "u64";
    case TensorDtype::kComplex64:
      return "complex64";
  }
  return "unknown";
}

absl::StatusOr<ValueDescriptor> ValueDescriptor::Create(
    std::vector<size_t> shape, TensorDtype dtype) {
  size_t elements = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", i, " of shape [", absl::StrJoin(shape, ", "),
          "] is zero; values may not be empty"));
    }
    auto product = Multiply(elements, shape[i]);
    if (!product.has_value() || !Multiply(*product, DtypeSize(dtype))) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] overflows"));
    }
    elements = *product;
  }
  return ValueDescriptor(std::move(shape), dtype, elements);
}

absl::StatusOr<ValueDescriptor> ValueDescriptor::Rows(
    size_t rows, const ValueDescriptor& row) {
  std::vector<size_t> shape = {rows};
  shape.insert(shape.end(), row.shape().begin(), row.shape().end());
  auto elements = Multiply(rows, row.element_count());
  if (!elements.has_value() || !Multiply(*elements, DtypeSize(row.dtype()))) {
    return absl::InvalidArgumentError(
        absl::StrCat(rows, " rows of ", row.ToString(), " overflow"));
  }
  return ValueDescriptor(std::move(shape), row.dtype(), *elements);
}

ValueDescriptor ValueDescriptor::RowDescriptor() const {
  std::vector<size_t> row;
  if (shape_.size() > 1) row.assign(shape_.begin() + 1, shape_.end());
  size_t elements = 1;
  for (size_t d : row) elements *= d;
  return ValueDescriptor(std::move(row), dtype_, elements);
}

size_t ValueDescriptor::row_elements() const {
  if (shape_.empty()) return 1;
  size_t elements = 1;
  for (size_t i = 1; i < shape_.size(); ++i) elements *= shape_[i];
  return elements;
}

std::string ValueDescriptor::ToString() const {
  return absl::StrCat(DtypeName(dtype_), "[", absl::StrJoin(shape_, ", "), "]");
}

absl::StatusOr<CollectiveGroupDescriptor> CollectiveGroupDescriptor::Create(
    CollectiveGroupId id, std::vector<uint32_t> members, uint32_t local_rank,
    uint32_t rank) {
  if (members.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", id, " has no members"));
  }
  std::set<uint32_t> seen;
  for (uint32_t m : members) {
    if (!seen.insert(m).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", id, " lists rank ", m, " twice"));
    }
  }
  if (local_rank >= members.size() || members[local_rank] != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", id, ": members[", local_rank, "] is not rank ",
                     rank, " (members: ", absl::StrJoin(members, ", "), ")"));
  }
  return CollectiveGroupDescriptor(id, std::move(members), local_rank);
}

absl::StatusOr<DistributedSessionDescriptor>
DistributedSessionDescriptor::Create(
    uint32_t world_size, uint32_t rank,
    std::vector<CollectiveGroupDescriptor> groups) {
  if (world_size == 0) {
    return absl::InvalidArgumentError("world_size must be > 0");
  }
  if (rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the world of size ", world_size));
  }
  std::set<CollectiveGroupId> ids;
  for (const auto& g : groups) {
    if (!ids.insert(g.id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("group id ", g.id(), " appears twice"));
    }
    for (uint32_t m : g.members()) {
      if (m >= world_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("group ", g.id(), " has member ", m,
                         ", outside the world of size ", world_size));
      }
    }
    if (g.members()[g.local_rank()] != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", g.id(), " does not place rank ", rank,
                       " at its local rank"));
    }
  }
  return DistributedSessionDescriptor(world_size, rank, std::move(groups));
}

absl::Status DistributedSessionDescriptor::SetNodePlacement(
    uint32_t local_rank, uint32_t ranks_on_node) {
  if (local_rank >= ranks_on_node || ranks_on_node > world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node placement: local rank ", local_rank, " of ", ranks_on_node,
        " ranks on the node is not valid in a world of ", world_size_));
  }
  local_rank_ = local_rank;
  ranks_on_node_ = ranks_on_node;
  return absl::OkStatus();
}

absl::StatusOr<DistributedSessionDescriptor>
DistributedSessionDescriptor::FromTopology(const ParallelTopology& topology,
                                           uint32_t world_size, uint32_t rank) {
  auto derived = DeriveGroups(topology, world_size);
  if (!derived.ok()) return derived.status();
  if (rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the world of size ", world_size));
  }
  std::vector<CollectiveGroupDescriptor> groups;
  for (const auto& [spec, index] : GroupsOfRank(*derived, rank)) {
    auto group =
        CollectiveGroupDescriptor::Create(spec->id, spec->members, index, rank);
    if (!group.ok()) return group.status();
    groups.push_back(*std::move(group));
  }
  return Create(world_size, rank, std::move(groups));
}

const CollectiveGroupDescriptor* DistributedSessionDescriptor::group(
    CollectiveGroupId id) const {
  for (const auto& g : groups_) {
    if (g.id() == id) return &g;
  }
  return nullptr;
}

std::string CollectiveScope::ToString() const {
  return is_world() ? "world" : absl::StrCat("group ", *group_);
}

absl::StatusOr<ResolvedScope> ResolveScope(
    const DistributedSessionDescriptor& descriptor,
    const CollectiveScope& scope) {
  ResolvedScope resolved;
  if (scope.is_world()) {
    resolved.members.resize(descriptor.world_size());
    for (uint32_t r = 0; r < descriptor.world_size(); ++r)
      resolved.members[r] = r;
    resolved.local_rank = descriptor.rank();
    resolved.group_id = kWorldGroupId;
    return resolved;
  }
  const CollectiveGroupDescriptor* group = descriptor.group(scope.group_id());
  if (group == nullptr) {
    std::vector<CollectiveGroupId> mine;
    for (const auto& g : descriptor.groups()) mine.push_back(g.id());
    return absl::NotFoundError(absl::StrCat(
        "rank ", descriptor.rank(), " is not a member of group ",
        scope.group_id(), ": its groups are ", absl::StrJoin(mine, ", "),
        ", and only those can be in capability 'collective_groups'"));
  }
  resolved.members = group->members();
  resolved.local_rank = group->local_rank();
  resolved.group_id = group->id();
  return resolved;
}

absl::Status RequireCapability(bool advertised, const char* backend,
                               const char* operation, const char* capability) {
  if (advertised) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(backend, " backend: ", operation, " needs capability '",
                   capability, "', which this backend does not advertise"));
}

absl::Status RequireCollective(const DistributedCapabilities& caps,
                               const char* backend, const char* operation,
                               const CollectiveScope& scope) {
  if (scope.is_world()) {
    return RequireCapability(caps.world_collectives, backend, operation,
                             "world_collectives");
  }
  if (caps.collective_groups.contains(scope.group_id()))
    return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      backend, " backend: ", operation, " on group ", scope.group_id(),
      " needs capability 'collective_groups' to include it, which this "
      "backend does not advertise"));
}

absl::Status CheckPeer(size_t peer, const ResolvedScope& scope,
                       const char* operation) {
  if (peer >= scope.members.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(operation, ": peer ", peer, " is outside the scope's ",
                     scope.members.size(), " members"));
  }
  if (peer == scope.local_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(operation, ": peer ", peer, " is this rank itself"));
  }
  return absl::OkStatus();
}

ValueDescriptor AllGatherOutput(const ValueDescriptor& input,
                                uint32_t members) {
  if (input.shape().empty()) {
    return *ValueDescriptor::Create({members}, input.dtype());
  }
  return *ValueDescriptor::Rows(input.rows() * members, input.RowDescriptor());
}

}  // namespace rankd::dataplane
