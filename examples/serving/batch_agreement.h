// Batch agreement: at the start of every step all ranks learn, with one
// world-wide all_gather_words round over the control plane, what every slot
// serves this step: per-slot token counts and request ids (see layout.h for
// slots). Every rank contributes one fixed-length frame:
//
//   word 0   kFrameMagic
//   word 1   step (1, 2, ...)
//   word 2   flags: kFlagScheduler (the frame carries its slot's batch),
//            kFlagStop (the sender asks everyone to stop, e.g. rank 0's
//            self-check failed), kFlagDrain (the sender got a stop signal,
//            SIGTERM: everyone ends the run cleanly here)
//   word 3   number of requests n (<= kMaxRequestsPerStep)
//   then     kMaxRequestsPerStep triples (request id, first position, token
//            count); the first n are used, the rest are zero
//
// Only schedulers (stage 0, tensor index 0) carry a batch; everyone else
// reads its slot's batch from the agreed frames. From the same agreed
// frames each rank also derives the receive shape of pipeline transfers and
// the all_to_all_v counts of expert dispatch, so no other metadata travels.
#ifndef RANKD_EXAMPLES_SERVING_BATCH_AGREEMENT_H_
#define RANKD_EXAMPLES_SERVING_BATCH_AGREEMENT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "examples/serving/collectives.h"
#include "examples/serving/layout.h"
#include "examples/serving/request_stream.h"

namespace rankd::examples {

inline constexpr uint32_t kFrameMagic = 0x52414e4b;  // "RANK"
inline constexpr size_t kFrameHeaderWords = 4;
inline constexpr size_t kFrameWords =
    kFrameHeaderWords + 3 * kMaxRequestsPerStep;
inline constexpr uint32_t kFlagScheduler = 1;
inline constexpr uint32_t kFlagStop = 2;
inline constexpr uint32_t kFlagDrain = 4;

// What every rank agreed on for one step.
struct StepPlan {
  uint32_t step = 0;
  // The batch of every slot, by slot index.
  std::vector<SlotBatch> slots;
  // Ranks whose frame asked to stop (empty: keep serving).
  std::vector<uint32_t> stop_requested_by;
  // Ranks whose frame asked every rank to end the run cleanly (a stop
  // signal reached them); empty: keep serving.
  std::vector<uint32_t> drain_requested_by;

  size_t total_tokens() const;
  size_t max_slot_tokens() const;
};

// This rank's frame. `batch` is its slot's batch when it schedules one,
// nullptr otherwise; `stop` and `drain` set kFlagStop and kFlagDrain.
std::vector<uint32_t> EncodeFrame(uint32_t step, const SlotBatch* batch,
                                  bool stop, bool drain = false);

// The plan from the rank-major concatenation of every rank's frame.
// FailedPrecondition naming the ranks when frames disagree on the step,
// carry a batch they do not schedule, or are malformed.
absl::StatusOr<StepPlan> DecodeFrames(const ServingLayout& layout,
                                      uint32_t step,
                                      absl::Span<const uint32_t> words);

// The same for the `count` ranks from `first_rank` on (one data-parallel
// replica under recovery by domain: replica_round.h), whose frames start
// every `stride` words of `words` (stride >= kFrameWords: longer frames
// carry more after the batch frame). The plan holds every slot; those of
// other ranks stay empty. Same errors, naming the ranks.
absl::StatusOr<StepPlan> DecodeRankFrames(const ServingLayout& layout,
                                          uint32_t step, uint32_t first_rank,
                                          uint32_t count, size_t stride,
                                          absl::Span<const uint32_t> words);

// One agreement round: encode, all_gather_words, decode.
absl::StatusOr<StepPlan> AgreeOnBatch(Collectives& collectives,
                                      const ServingLayout& layout,
                                      uint32_t step, const SlotBatch* batch,
                                      bool stop, bool drain);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_BATCH_AGREEMENT_H_
