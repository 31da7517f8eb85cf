// SelfCheck: rank 0's verification of every step against a single-process
// reference.
//
//   - Batches: rank 0 replays every slot's RequestStream and requires the
//     agreed batch of each slot to equal it (catches a scheduler that
//     diverged or a corrupted agreement).
//   - Outputs: the final activations of every slot, as computed by every
//     last-stage tensor rank and gathered to all ranks, must match
//     ReferenceModel::Forward within the tolerance, element by element:
//
//         |got - ref| <= atol + rtol * |ref|      (f32; atol = rtol = 1e-4)
//
//     The distributed result differs from the reference only in the order
//     of floating-point additions (tensor-parallel partial sums), which
//     stays orders of magnitude below the tolerance (about 1e-6 here).
//
// Not thread-safe; one per process.
#ifndef RANKD_EXAMPLES_SERVING_SELF_CHECK_H_
#define RANKD_EXAMPLES_SERVING_SELF_CHECK_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "examples/serving/batch_agreement.h"
#include "examples/serving/collectives.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_spec.h"
#include "examples/serving/reference_model.h"
#include "examples/serving/request_stream.h"

namespace rankd::examples {

struct Tolerance {
  double atol = 1e-4;
  double rtol = 1e-4;
  // "|got - ref| <= 0.0001 + 0.0001 * |ref|".
  std::string ToString() const;
};

struct StepCheck {
  // OK, or DataLoss describing the first mismatch (and how many values
  // mismatched).
  absl::Status status;
  double max_abs_error = 0;
  size_t values_checked = 0;
};

// Counts one output value of a step against its reference: adds it to
// `check`'s values_checked and |got - ref| to its max_abs_error (a NaN as
// infinity). Returns whether it is within `tolerance` (a NaN never is).
bool CountWithinTolerance(const Tolerance& tolerance, double got, double ref,
                          StepCheck& check);

class SelfCheck {
 public:
  SelfCheck(const ModelSpec& spec, const ServingLayout& layout,
            Tolerance tolerance);

  // Checks one step. `gathered` is the world all_gather of every rank's
  // outputs padded to `rows_per_rank` rows (rank r's rows start at
  // r * rows_per_rank); unused when the step has no tokens. Must be called
  // for every step, in order (it replays the request streams).
  StepCheck Check(const StepPlan& plan, const Matrix& gathered,
                  size_t rows_per_rank);

  // A rank 0 that replaced a lost one (rankd --recovery=on) starts checking
  // at `step`: replays the request streams of the steps before it. Only
  // before the first Check.
  void SkipTo(uint32_t step);

 private:
  ServingLayout layout_;
  Tolerance tolerance_;
  ReferenceModel reference_;
  std::vector<RequestStream> streams_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_SELF_CHECK_H_
