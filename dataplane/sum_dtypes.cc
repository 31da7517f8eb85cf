#include "dataplane/sum_dtypes.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

bool SumDefined(TensorDtype dtype) { return dtype != TensorDtype::kBool; }

absl::Status SumUndefinedError(absl::string_view backend,
                               absl::string_view operation, TensorDtype dtype) {
  return absl::InvalidArgumentError(absl::StrCat(
      backend, " backend: ", operation, " cannot sum ", DtypeName(dtype),
      " values (a sum of booleans is not a boolean); use agree_success for a "
      "logical AND or convert to an integer dtype"));
}

absl::Status SumUnimplementedError(absl::string_view backend,
                                   absl::string_view operation,
                                   TensorDtype dtype, absl::string_view why) {
  return absl::UnimplementedError(
      absl::StrCat(backend, " backend: ", operation, " cannot sum ",
                   DtypeName(dtype), " values on this backend: ", why));
}

}  // namespace rankd::dataplane
