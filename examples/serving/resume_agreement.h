// Resume agreement: after a loss (rankd --recovery=on), the ranks of the new
// epoch agree on the step to serve next with one world-wide
// all_gather_words round, the first round of the epoch. A survivor knows
// it: the step that failed, which it serves again with the same batch. A
// replacement process cannot know it and says so (kUnknownStep); it learns
// the step here and fast-forwards its request stream to it. Every rank
// contributes one frame:
//
//   word 0   kResumeMagic
//   word 1   the step this rank would serve next; kUnknownStep (0): none
//   word 2   the epoch the rank's session belongs to (low 32 bits)
//
// Pure: the round itself is the caller's Collectives.
#ifndef RANKD_EXAMPLES_SERVING_RESUME_AGREEMENT_H_
#define RANKD_EXAMPLES_SERVING_RESUME_AGREEMENT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "examples/serving/collectives.h"

namespace rankd::examples {

inline constexpr uint32_t kResumeMagic = 0x52534d45;  // "RSME"
inline constexpr size_t kResumeFrameWords = 3;
inline constexpr uint32_t kUnknownStep = 0;

// This rank's frame: `step` it would serve next (kUnknownStep for a
// replacement) at `epoch`.
std::vector<uint32_t> EncodeResumeFrame(uint32_t step, uint64_t epoch);

// The step every rank resumes at, from the rank-major concatenation of
// `world_size` ranks' frames, of ranks first_rank, first_rank + 1, ...
// (a replica's ranks when it resumes alone): the one step every rank that
// knows one named. Errors name job ranks, first_rank + the frame's index.
// FailedPrecondition when the frames are malformed or of another epoch
// (naming the ranks), when no rank knows the step (every rank is a
// replacement: the job lost all its state), or when ranks name different
// steps ("step 10 from ranks 0-3, 6; step 11 from rank 5").
absl::StatusOr<uint32_t> DecodeResumeFrames(uint32_t world_size, uint64_t epoch,
                                            absl::Span<const uint32_t> words,
                                            uint32_t first_rank = 0);

// One agreement round: encode, all_gather_words, decode. The round's own
// error (e.g. another loss) keeps its code.
absl::StatusOr<uint32_t> AgreeOnResume(Collectives& collectives,
                                       uint32_t world_size, uint32_t step);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_RESUME_AGREEMENT_H_
