// ReplicaCheck: the self-check under recovery by domain (replica_round.h).
// Without it rank 0 checks every step of the world against the reference
// from a data-plane all_gather of every rank's outputs (self_check.h); a
// session confined to its replica has no world group, so here every
// last-stage rank checks its own outputs, step by step, against the
// single-process reference, and its counts reach the rank printing the
// summary through the world rounds' words:
//
//   - Batch: the agreed batch of its slot must equal the slot's request
//     stream, replayed here (no request skipped, repeated or reordered).
//   - Outputs: its final activations must match ReferenceModel::Forward
//     within the tolerance, element by element (self_check.h's rule).
//
// Not thread-safe; one per last-stage rank.
#ifndef RANKD_EXAMPLES_SERVING_REPLICA_CHECK_H_
#define RANKD_EXAMPLES_SERVING_REPLICA_CHECK_H_

#include <cstdint>

#include "examples/serving/collectives.h"
#include "examples/serving/layout.h"
#include "examples/serving/model_spec.h"
#include "examples/serving/reference_model.h"
#include "examples/serving/request_stream.h"
#include "examples/serving/self_check.h"

namespace rankd::examples {

class ReplicaCheck {
 public:
  ReplicaCheck(const ModelSpec& spec, const ServingLayout& layout,
               Tolerance tolerance);

  // Checks this rank's step: `agreed` is its slot's agreed batch and
  // `outputs` its last stage's activations for it ([agreed.tokens(),
  // hidden]). Must be called for every step of the replica, in order (it
  // replays the slot's request stream).
  StepCheck Check(uint32_t step, const SlotBatch& agreed,
                  const Matrix& outputs);

  // A replacement starts at `step`: replays the steps before it. Only
  // before the first Check.
  void SkipTo(uint32_t step);

 private:
  ServingLayout layout_;
  Tolerance tolerance_;
  ReferenceModel reference_;
  RequestStream stream_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_REPLICA_CHECK_H_
