// A last-stage rank's own self-check (see replica_check.h).
#include "examples/serving/replica_check.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rankd::examples {

ReplicaCheck::ReplicaCheck(const ModelSpec& spec, const ServingLayout& layout,
                           Tolerance tolerance)
    : layout_(layout),
      tolerance_(tolerance),
      reference_(spec),
      stream_(spec.seed, layout.my_slot(), layout.num_slots()) {}

void ReplicaCheck::SkipTo(uint32_t step) {
  for (uint32_t s = 1; s < step; ++s) stream_.Next();
}

StepCheck ReplicaCheck::Check(uint32_t step, const SlotBatch& agreed,
                              const Matrix& outputs) {
  StepCheck result;
  const SlotBatch expected = stream_.Next();
  const std::string who =
      absl::StrCat("rank ", layout_.rank, " (d", layout_.coords.data, " p",
                   layout_.coords.pipeline, " t", layout_.coords.tensor, " e",
                   layout_.coords.expert, "), slot ", layout_.my_slot());
  if (!(agreed == expected)) {
    result.status = absl::DataLossError(absl::StrCat(
        "self-check failed at step ", step, " of replica ", layout_.coords.data,
        ": ", who, " agreed on ", agreed.ToString(),
        " but its request stream has ", expected.ToString()));
    return result;
  }
  if (agreed.tokens() == 0) return result;
  const Matrix want = reference_.Forward(agreed);
  if (outputs.rows != want.rows || outputs.cols != want.cols) {
    result.status = absl::DataLossError(
        absl::StrCat("self-check failed at step ", step, ": ", who,
                     " has outputs of ", outputs.rows, " x ", outputs.cols,
                     "; the reference ", want.rows, " x ", want.cols));
    return result;
  }
  const std::vector<TokenRef> tokens = agreed.TokenRefs();
  size_t mismatches = 0;
  std::string first;
  for (size_t r = 0; r < want.rows; ++r) {
    for (size_t i = 0; i < want.cols; ++i) {
      const float got = outputs.row(r)[i];
      const float ref = want.row(r)[i];
      if (CountWithinTolerance(tolerance_, got, ref, result)) continue;
      const double err = std::fabs(double{got} - double{ref});
      if (mismatches++ == 0) {
        first = absl::StrFormat(
            "%s, token %d (request %d position %d), element %d: got %.7g, "
            "reference %.7g, |error| %.3g exceeds %s",
            who, r, tokens[r].request_id, tokens[r].position, i, got, ref, err,
            tolerance_.ToString());
      }
    }
  }
  if (mismatches > 0) {
    result.status = absl::DataLossError(absl::StrCat(
        "self-check failed at step ", step, " of replica ", layout_.coords.data,
        ": ", first,
        mismatches > 1 ? absl::StrCat(" (and ", mismatches - 1, " more)")
                       : ""));
  }
  return result;
}

}  // namespace rankd::examples
