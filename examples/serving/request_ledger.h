// RequestLedger: rank 0's count of the requests the job served, and of
// those in flight when a loss interrupted a step (rankd --recovery=on):
// each must be served again when that step re-runs after the job
// re-formed, or it counts as lost.
//
//   served      distinct requests with tokens in a completed step
//   in flight   requests of the step the loss interrupted (its agreed
//               batch), summed over every recovery
//   re-run      of those, the ones the re-run of that step served again,
//               with the very same tokens
//   lost        in flight but not re-run (the demo requires 0)
//
// The self-check (self_check.h) separately proves that every slot's batch,
// re-runs included, equals its request stream: no request skipped,
// repeated or reordered. Pure; not thread-safe.
#ifndef RANKD_EXAMPLES_SERVING_REQUEST_LEDGER_H_
#define RANKD_EXAMPLES_SERVING_REQUEST_LEDGER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "examples/serving/batch_agreement.h"
#include "examples/serving/request_stream.h"

namespace rankd::examples {

class RequestLedger {
 public:
  // A completed step: counts its requests not seen in an earlier step.
  // When a loss interrupted an earlier run of this step (Interrupted),
  // its requests found again here count as re-run, the others as lost.
  void Completed(const StepPlan& plan);

  // A loss interrupted the step of `plan` (its batch was agreed); its
  // requests are in flight until that step completes. Another loss during
  // the same step's re-run counts them once; a pending step of another
  // number never completed, so its requests count as lost.
  void Interrupted(const StepPlan& plan);

  uint64_t served() const { return served_; }
  uint64_t in_flight() const { return in_flight_; }
  uint64_t rerun() const { return rerun_; }
  // Counting the requests of an interrupted step that has not completed
  // (yet): read at the end of the run, they were never served again.
  uint64_t lost() const;

 private:
  // The highest request id seen per slot (ids grow within a slot).
  std::vector<uint32_t> highest_id_;
  std::optional<StepPlan> pending_;
  uint64_t served_ = 0;
  uint64_t in_flight_ = 0;
  uint64_t rerun_ = 0;
  uint64_t lost_ = 0;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_REQUEST_LEDGER_H_
