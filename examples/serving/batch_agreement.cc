// Per-step batch agreement over all_gather_words (see batch_agreement.h).
#include "examples/serving/batch_agreement.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::examples {

size_t StepPlan::total_tokens() const {
  size_t n = 0;
  for (const SlotBatch& s : slots) n += s.tokens();
  return n;
}

size_t StepPlan::max_slot_tokens() const {
  size_t n = 0;
  for (const SlotBatch& s : slots) n = std::max(n, s.tokens());
  return n;
}

std::vector<uint32_t> EncodeFrame(uint32_t step, const SlotBatch* batch,
                                  bool stop, bool drain) {
  std::vector<uint32_t> frame(kFrameWords, 0);
  frame[0] = kFrameMagic;
  frame[1] = step;
  frame[2] = (batch != nullptr ? kFlagScheduler : 0) | (stop ? kFlagStop : 0) |
             (drain ? kFlagDrain : 0);
  if (batch != nullptr) {
    const size_t n =
        std::min<size_t>(batch->requests.size(), kMaxRequestsPerStep);
    frame[3] = static_cast<uint32_t>(n);
    for (size_t i = 0; i < n; ++i) {
      const RequestSlice& r = batch->requests[i];
      frame[kFrameHeaderWords + 3 * i] = r.request_id;
      frame[kFrameHeaderWords + 3 * i + 1] = r.start;
      frame[kFrameHeaderWords + 3 * i + 2] = r.count;
    }
  }
  return frame;
}

absl::StatusOr<StepPlan> DecodeFrames(const ServingLayout& layout,
                                      uint32_t step,
                                      absl::Span<const uint32_t> words) {
  return DecodeRankFrames(layout, step, 0, layout.world_size, kFrameWords,
                          words);
}

absl::StatusOr<StepPlan> DecodeRankFrames(const ServingLayout& layout,
                                          uint32_t step, uint32_t first_rank,
                                          uint32_t count, size_t stride,
                                          absl::Span<const uint32_t> words) {
  const auto fail = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("batch agreement for step ", step, ": ", what));
  };
  if (stride < kFrameWords || words.size() != size_t{count} * stride ||
      first_rank + count > layout.world_size) {
    return fail(absl::StrCat(
        "got ", words.size(), " words; expected ", count, " frames of ",
        std::max(stride, kFrameWords), " (ranks ", first_rank, "-",
        first_rank + count - 1, " of world ", layout.world_size, ")"));
  }
  StepPlan plan;
  plan.step = step;
  plan.slots.resize(layout.num_slots());
  std::vector<uint32_t> other_step, bad;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t r = first_rank + i;
    absl::Span<const uint32_t> f = words.subspan(i * stride, kFrameWords);
    if (f[0] != kFrameMagic || f[3] > kMaxRequestsPerStep) {
      bad.push_back(r);
      continue;
    }
    if (f[1] != step) other_step.push_back(r);
    if (f[2] & kFlagStop) plan.stop_requested_by.push_back(r);
    if (f[2] & kFlagDrain) plan.drain_requested_by.push_back(r);
    const RankCoordinates c = CoordinatesOf(layout.topology, r);
    const uint32_t slot = layout.SlotOf(c.data, c.expert);
    const bool scheduler = layout.SchedulerOf(slot) == r;
    if (((f[2] & kFlagScheduler) != 0) != scheduler) {
      bad.push_back(r);
      continue;
    }
    if (!scheduler) continue;
    SlotBatch& batch = plan.slots[slot];
    for (uint32_t i = 0; i < f[3]; ++i) {
      const uint32_t* t = &f[kFrameHeaderWords + 3 * i];
      if (t[2] == 0) {
        bad.push_back(r);
        break;
      }
      batch.requests.push_back({t[0], t[1], t[2]});
    }
  }
  if (!bad.empty()) {
    return fail(
        absl::StrCat("malformed frames from ranks ", absl::StrJoin(bad, ", ")));
  }
  if (!other_step.empty()) {
    return fail(absl::StrCat("ranks ", absl::StrJoin(other_step, ", "),
                             " are at a different step (the ranks run "
                             "different programs or configurations)"));
  }
  return plan;
}

absl::StatusOr<StepPlan> AgreeOnBatch(Collectives& collectives,
                                      const ServingLayout& layout,
                                      uint32_t step, const SlotBatch* batch,
                                      bool stop, bool drain) {
  auto words =
      collectives.AllGatherWords(EncodeFrame(step, batch, stop, drain));
  if (!words.ok()) return words.status();
  return DecodeFrames(layout, step, *words);
}

}  // namespace rankd::examples
