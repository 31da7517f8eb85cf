#include "dataplane/nccl/nccl_types.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dataplane/sum_dtypes.h"

namespace rankd::dataplane::nccl {

const char* NcclDataTypeName(NcclDataType type) {
  switch (type) {
    case NcclDataType::kInt8:
      return "ncclInt8";
    case NcclDataType::kUint8:
      return "ncclUint8";
    case NcclDataType::kInt32:
      return "ncclInt32";
    case NcclDataType::kUint32:
      return "ncclUint32";
    case NcclDataType::kInt64:
      return "ncclInt64";
    case NcclDataType::kUint64:
      return "ncclUint64";
    case NcclDataType::kFloat16:
      return "ncclFloat16";
    case NcclDataType::kFloat32:
      return "ncclFloat32";
    case NcclDataType::kFloat64:
      return "ncclFloat64";
    case NcclDataType::kBfloat16:
      return "ncclBfloat16";
  }
  return "unknown";
}

absl::StatusOr<NcclSumType> SumTypeFor(TensorDtype dtype, int nccl_version) {
  switch (dtype) {
    case TensorDtype::kF32:
      return NcclSumType{NcclDataType::kFloat32, 1};
    case TensorDtype::kF16:
      return NcclSumType{NcclDataType::kFloat16, 1};
    case TensorDtype::kBf16:
      if (nccl_version < kNcclBf16Version) {
        return SumUnimplementedError(
            "nccl", "all_reduce_sum", dtype,
            absl::StrCat("bf16 needs NCCL >= 2.10; this NCCL is version code ",
                         nccl_version));
      }
      return NcclSumType{NcclDataType::kBfloat16, 1};
    case TensorDtype::kF64:
      return NcclSumType{NcclDataType::kFloat64, 1};
    case TensorDtype::kI8:
      return NcclSumType{NcclDataType::kInt8, 1};
    case TensorDtype::kU8:
      return NcclSumType{NcclDataType::kUint8, 1};
    case TensorDtype::kI32:
      return NcclSumType{NcclDataType::kInt32, 1};
    case TensorDtype::kU32:
      return NcclSumType{NcclDataType::kUint32, 1};
    case TensorDtype::kI64:
      return NcclSumType{NcclDataType::kInt64, 1};
    case TensorDtype::kU64:
      return NcclSumType{NcclDataType::kUint64, 1};
    case TensorDtype::kComplex64:
      return NcclSumType{NcclDataType::kFloat32, 2};
    case TensorDtype::kBool:
      return SumUndefinedError("nccl", "all_reduce_sum", dtype);
    case TensorDtype::kI16:
    case TensorDtype::kU16:
      return SumUnimplementedError("nccl", "all_reduce_sum", dtype,
                                   "NCCL has no 16-bit integer type");
  }
  return absl::InvalidArgumentError("nccl backend: unknown dtype");
}

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

std::string CommName(absl::Span<const uint32_t> members, uint32_t world_size) {
  bool world = members.size() == world_size;
  for (size_t i = 0; world && i < members.size(); ++i) {
    world = members[i] == i;
  }
  if (world) return "world";
  uint64_t hash = 1469598103934665603ull;  // FNV-1a 64
  for (uint32_t m : members) {
    for (int b = 0; b < 4; ++b) {
      hash ^= (m >> (8 * b)) & 0xffu;
      hash *= 1099511628211ull;
    }
  }
  return absl::StrFormat("m%u-%016x", members.size(), hash);
}

std::string UniqueIdKey(absl::string_view ns, absl::string_view tag,
                        absl::string_view comm_name, uint32_t index,
                        uint32_t count) {
  std::string key;
  if (!ns.empty()) absl::StrAppend(&key, ns, "/");
  absl::StrAppend(&key, "nccl/", tag, "/", comm_name, "/uid/", index, "of",
                  count);
  return key;
}

namespace {
constexpr absl::string_view kUniqueIdPrefix = "nccl-uid-v1:";
}  // namespace

std::string EncodeUniqueId(absl::string_view id_bytes) {
  return absl::StrCat(kUniqueIdPrefix, absl::BytesToHexString(id_bytes));
}

absl::StatusOr<std::string> DecodeUniqueId(absl::string_view value,
                                           absl::string_view key) {
  if (!absl::StartsWith(value, kUniqueIdPrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl backend: key '", key,
                     "' does not hold an NCCL unique id (expected the prefix '",
                     kUniqueIdPrefix, "')"));
  }
  absl::string_view hex = value.substr(kUniqueIdPrefix.size());
  if (hex.size() != 2 * kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: key '", key, "' holds ", hex.size() / 2,
        " bytes of unique id; NCCL ids have ", kNcclUniqueIdBytes));
  }
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl backend: key '", key, "' holds a unique id that is not hex"));
    }
  }
  return absl::HexStringToBytes(hex);
}

absl::Status ValidateSessionTag(absl::string_view tag) {
  if (tag.empty() || tag.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: session tag must have 1..64 characters; got ",
        tag.size()));
  }
  for (char c : tag) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '-' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl backend: session tag '", tag,
                       "' may only use letters, digits, '_', '-' and '.'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> DefaultDevice(uint32_t local_rank, uint32_t ranks_on_node,
                                  uint32_t world_size, int visible_devices) {
  if (visible_devices >= 1 &&
      static_cast<uint32_t>(visible_devices) >= ranks_on_node) {
    return static_cast<int>(local_rank);
  }
  if (visible_devices == 1) return 0;
  return absl::FailedPreconditionError(absl::StrCat(
      "nccl backend: ", ranks_on_node, " ranks run on this node (world size ",
      world_size, ") but this process sees ", visible_devices, " GPU",
      visible_devices == 1 ? "" : "s",
      "; NCCL needs one GPU per rank, and the default device (local rank ",
      local_rank,
      ") is chosen only when each process sees every GPU of its node or "
      "exactly one: run at most ",
      visible_devices, " ranks per node, give each rank process one GPU ",
      "(CUDA_VISIBLE_DEVICES), make all of the node's GPUs visible, or name ",
      "the device (NcclSessionOptions::device)"));
}

absl::Span<const NcclResultCode> NcclResultCodes() {
  static constexpr NcclResultCode kCodes[] = {
      {1, "ncclUnhandledCudaError", absl::StatusCode::kInternal,
       "a CUDA call inside NCCL failed (a device fault or a CUDA error)"},
      {2, "ncclSystemError", absl::StatusCode::kUnavailable,
       "a system call or resource failed (network, shared memory, files)"},
      {3, "ncclInternalError", absl::StatusCode::kInternal,
       "NCCL's own defect"},
      {4, "ncclInvalidArgument", absl::StatusCode::kInternal,
       "NCCL refused an argument rankd had already validated: rankd's "
       "defect"},
      {5, "ncclInvalidUsage", absl::StatusCode::kFailedPrecondition,
       "the call is not allowed in this setup or state (e.g. two ranks on "
       "one GPU)"},
      {6, "ncclRemoteError", absl::StatusCode::kAborted,
       "a peer failed or the network between the ranks broke"},
      {7, "ncclInProgress", absl::StatusCode::kInternal,
       "work still in progress was reported as a failure: rankd's defect"},
  };
  return kCodes;
}

const NcclResultCode& NcclResultCodeOf(int result) {
  for (const NcclResultCode& entry : NcclResultCodes()) {
    if (entry.result == result) return entry;
  }
  static constexpr NcclResultCode kUnknown = {
      -1, "unknown ncclResult_t", absl::StatusCode::kUnknown,
      "a result this rankd does not know (a newer NCCL?)"};
  return kUnknown;
}

}  // namespace rankd::dataplane::nccl
