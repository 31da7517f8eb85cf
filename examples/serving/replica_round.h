// Replica rounds: the serving example's world all_gather_words round when
// the job recovers by data-parallel domain (rankd --recovery=domain, dp > 1;
// docs/contract.md, "Data-parallel domains"). Each replica (domain) serves
// its own request streams and counts its own steps; a loss ends only the
// hit replica's epoch while the others keep serving, so a round spans the
// replicas serving when it ran (Client::AllGatherWordsWithView) and
// replicas may be at different steps. Every rank contributes, every round,
// one frame: the batch frame of batch_agreement.h (kFrameWords) followed by
// kReplicaExtraWords:
//
//   batch frame  word 1 is the rank's step; word 2's flags as there, plus
//                kFlagIdle    no step this round: the replica served its
//                             steps (word 1: the last), or the run ends
//                kFlagResume  the replica re-enters after a recovery: word
//                             1 is the step this rank would serve next
//                             (kUnknownStep: a replacement), as in
//                             resume_agreement.h; no step this round
//                kFlagFresh   this process saw every round so far (it never
//                             recovered and replaces no one)
//                kFlagStop / kFlagDrain stay set once seen in any round, so
//                a replica re-entering later learns them too
//   +0           generation: the epoch this process joined at (1, or a
//                replacement's)
//   +1           the epoch of the rank's session (low 32 bits)
//   +2, +3       steps this process self-checked, passed and failed
//                (cumulative; last-stage ranks: replica_check.h)
//   +4, +5       values it checked (low, high word)
//   +6           the largest |error| it saw (float bits)
//   +7 ...       its end-of-run report (report.h, kReportWords)
//
// The ranks of one replica must agree on their frame's kind (step, idle or
// resume) and a step's batch as batch_agreement.h decodes it. Pure.
#ifndef RANKD_EXAMPLES_SERVING_REPLICA_ROUND_H_
#define RANKD_EXAMPLES_SERVING_REPLICA_ROUND_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "examples/serving/batch_agreement.h"
#include "examples/serving/collectives.h"
#include "examples/serving/layout.h"
#include "examples/serving/report.h"
#include "examples/serving/request_stream.h"

namespace rankd::examples {

inline constexpr uint32_t kFlagIdle = 8;
inline constexpr uint32_t kFlagResume = 16;
inline constexpr uint32_t kFlagFresh = 32;
inline constexpr size_t kReplicaExtraWords = 7 + kReportWords;
inline constexpr size_t kReplicaFrameWords = kFrameWords + kReplicaExtraWords;

// A process's own self-check counts (cumulative).
struct CheckCounts {
  uint32_t passed = 0;
  uint32_t failed = 0;
  uint64_t values = 0;
  float max_abs_error = 0;
};

// What a rank puts in its frame.
struct ReplicaFrame {
  enum class Kind { kStep, kIdle, kResume };
  Kind kind = Kind::kStep;
  // kStep: the step; kIdle: the last step served; kResume: the step it
  // would serve next, kUnknownStep for a replacement.
  uint32_t step = 0;
  // kStep on a scheduler: its slot's batch.
  const SlotBatch* batch = nullptr;
  bool stop = false;
  bool drain = false;
  bool fresh = false;
  uint64_t generation = 1;
  uint64_t epoch = 1;
  CheckCounts checks;
  const CollectiveStats* stats = nullptr;  // null: zeros
  uint64_t tokens = 0;
  bool failed = false;
};

std::vector<uint32_t> EncodeReplicaFrame(const ReplicaFrame& frame);

// One rank's frame in a decoded round.
struct RankInRound {
  uint32_t rank = 0;
  uint32_t flags = 0;
  uint32_t generation = 0;
  uint32_t epoch = 0;
  CheckCounts checks;
  RankReport report;
};

// One replica in a decoded round.
struct ReplicaInRound {
  uint32_t replica = 0;
  uint64_t epoch = 0;  // from the round's view
  ReplicaFrame::Kind kind = ReplicaFrame::Kind::kStep;
  // kStep: the agreed step (its slots filled, other replicas' empty).
  StepPlan plan;
  // kResume: the agreed step to resume at; kIdle: the last step served.
  uint32_t step = 0;
};

struct ReplicaRound {
  bool partial = false;
  std::vector<ReplicaInRound> replicas;  // the view's, ascending
  std::vector<RankInRound> ranks;        // theirs, ascending
  std::vector<uint32_t> stop_requested_by;
  std::vector<uint32_t> drain_requested_by;

  // Null when `replica` is not in the round.
  const ReplicaInRound* Find(uint32_t replica) const;
  // Every replica there, idle (the run may end when the round is whole).
  bool AllIdle() const;
  // Whether some replica served a step or re-entered.
  bool AnyActive() const;
};

// The round from AllGatherWordsWithView's result: `words` holds the frames
// of the ranks of `replicas` (ascending, with their epochs), rank-major.
// FailedPrecondition naming the replica and ranks when the frames are
// malformed, the ranks of one replica disagree on the kind or the step
// (batch_agreement.h's checks), or a resume names no or several steps
// (resume_agreement.h's).
absl::StatusOr<ReplicaRound> DecodeReplicaRound(
    const ServingLayout& layout, bool partial,
    absl::Span<const uint32_t> replicas, absl::Span<const uint64_t> epochs,
    absl::Span<const uint32_t> words);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_REPLICA_ROUND_H_
