#include "dataplane/nccl/internal/sum_type.h"

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/internal/nccl_version.h"
#include "dataplane/sum_dtypes.h"

namespace rankd::dataplane::nccl::internal {

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

}  // namespace rankd::dataplane::nccl::internal
