#include "dataplane/caller_output.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

absl::Status CheckCallerOutput(absl::string_view backend,
                               absl::string_view operation,
                               const ValueDescriptor& output,
                               const ValueDescriptor& result,
                               OutputOverlap overlap, bool runs_in_place) {
  if (output != result) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " backend: ", operation, ": the output is ", output.ToString(),
        " but the result is ", result.ToString()));
  }
  if (overlap == OutputOverlap::kNone ||
      (runs_in_place && overlap == OutputOverlap::kSameBytes)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      backend, " backend: ", operation, ": the output overlaps the input, and ",
      operation,
      runs_in_place ? " runs in place only on exactly the input's bytes"
                    : " cannot run in place"));
}

}  // namespace rankd::dataplane
