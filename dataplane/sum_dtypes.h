// The one dtype table of all_reduce_sum, for both backends
// (docs/contract.md, "Dtypes"): which dtypes a sum is defined for, and the
// errors a backend returns when it refuses one, so that the same call fails
// the same way on Gloo and on NCCL.
//
//   bool            no sum is defined (a sum of booleans is not a
//                   boolean): InvalidArgument, on every backend;
//   every other     defined; complex64 sums real and imaginary parts.
//                   A backend that cannot compute a defined sum returns
//                   Unimplemented naming itself, the dtype and why (NCCL
//                   has no 16-bit integer type: i16, u16).
//
// Depends on dataplane/types.h and absl.
#ifndef RANKD_DATAPLANE_SUM_DTYPES_H_
#define RANKD_DATAPLANE_SUM_DTYPES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dataplane/dtype.h"

namespace rankd::dataplane {

// Whether an element-wise sum of `dtype` values is defined.
bool SumDefined(TensorDtype dtype);

// InvalidArgument "<backend> backend: <operation> cannot sum <dtype>
// values ..." for a dtype without a defined sum.
absl::Status SumUndefinedError(absl::string_view backend,
                               absl::string_view operation, TensorDtype dtype);

// Unimplemented "<backend> backend: <operation> cannot sum <dtype> values
// on this backend: <why>" for a defined sum the backend cannot compute.
absl::Status SumUnimplementedError(absl::string_view backend,
                                   absl::string_view operation,
                                   TensorDtype dtype, absl::string_view why);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SUM_DTYPES_H_
