// Rank 0's per-step verification against the reference (see self_check.h).
#include "examples/serving/self_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rankd::examples {

std::string Tolerance::ToString() const {
  return absl::StrCat("|got - ref| <= ", atol, " + ", rtol, " * |ref|");
}

bool CountWithinTolerance(const Tolerance& tolerance, double got, double ref,
                          StepCheck& check) {
  const double err = std::fabs(got - ref);
  ++check.values_checked;
  // NaN compares false: a mismatch too, and the largest error there is.
  const bool ok = err <= tolerance.atol + tolerance.rtol * std::fabs(ref);
  check.max_abs_error =
      std::max(check.max_abs_error,
               std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
  return ok;
}

SelfCheck::SelfCheck(const ModelSpec& spec, const ServingLayout& layout,
                     Tolerance tolerance)
    : layout_(layout), tolerance_(tolerance), reference_(spec) {
  for (uint32_t s = 0; s < layout.num_slots(); ++s) {
    streams_.emplace_back(spec.seed, s, layout.num_slots());
  }
}

void SelfCheck::SkipTo(uint32_t step) {
  for (uint32_t s = 1; s < step; ++s) {
    for (RequestStream& stream : streams_) stream.Next();
  }
}

StepCheck SelfCheck::Check(const StepPlan& plan, const Matrix& gathered,
                           size_t rows_per_rank) {
  StepCheck result;
  std::string first;
  size_t mismatches = 0;
  for (uint32_t slot = 0; slot < layout_.num_slots(); ++slot) {
    const SlotBatch expected = streams_[slot].Next();
    const SlotBatch& agreed = plan.slots[slot];
    if (!(agreed == expected)) {
      ++mismatches;
      if (first.empty()) {
        first =
            absl::StrCat("slot ", slot, " agreed on ", agreed.ToString(),
                         " but its request stream has ", expected.ToString());
      }
      continue;
    }
    if (agreed.tokens() == 0) continue;
    const Matrix want = reference_.Forward(agreed);
    const std::vector<TokenRef> tokens = agreed.TokenRefs();
    for (uint32_t t = 0; t < layout_.topology.tensor; ++t) {
      const uint32_t rank =
          layout_.RankServing(slot, layout_.topology.pipeline - 1, t);
      for (size_t r = 0; r < want.rows; ++r) {
        const float* got = gathered.row(rank * rows_per_rank + r);
        const float* ref = want.row(r);
        for (size_t i = 0; i < want.cols; ++i) {
          if (CountWithinTolerance(tolerance_, got[i], ref[i], result)) {
            continue;
          }
          const double err = std::fabs(double{got[i]} - double{ref[i]});
          if (mismatches++ == 0) {
            first = absl::StrFormat(
                "slot %d, output of rank %d (%s), token %d (request %d "
                "position %d), element %d: got %.7g, reference %.7g, "
                "|error| %.3g exceeds %s",
                slot, rank,
                absl::StrCat("d", slot / layout_.topology.expert, " p",
                             layout_.topology.pipeline - 1, " t", t, " e",
                             slot % layout_.topology.expert),
                r, tokens[r].request_id, tokens[r].position, i, got[i], ref[i],
                err, tolerance_.ToString());
          }
        }
      }
    }
  }
  if (mismatches > 0) {
    result.status = absl::DataLossError(absl::StrCat(
        "self-check failed at step ", plan.step, ": ", first,
        mismatches > 1 ? absl::StrCat(" (and ", mismatches - 1, " more)")
                       : ""));
  }
  return result;
}

}  // namespace rankd::examples
