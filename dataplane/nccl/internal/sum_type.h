// How NCCL sums values of one TensorDtype (SumTypeFor), following the
// engine's shared dtype table (dataplane/sum_dtypes.h). Private to
// dataplane/nccl. Depends on nccl_data_type.h, dataplane/dtype.h and absl.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_SUM_TYPE_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_SUM_TYPE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "dataplane/dtype.h"
#include "dataplane/nccl/nccl_data_type.h"

namespace rankd::dataplane::nccl::internal {

// `lanes` NCCL elements of `type` per value element (complex64 is summed
// as 2 x f32: real and imaginary parts add independently).
struct NcclSumType {
  NcclDataType type;
  size_t lanes;
};
// The errors of the shared table (dataplane/sum_dtypes.h): InvalidArgument
// for bool (no sum is defined); Unimplemented naming the nccl backend and
// the dtype for i16/u16 (NCCL has no 16-bit integer type) and for bf16
// before NCCL 2.10.
// `nccl_version` is the NCCL version code in use (internal/nccl_version.h).
absl::StatusOr<NcclSumType> SumTypeFor(TensorDtype dtype, int nccl_version);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_SUM_TYPE_H_
