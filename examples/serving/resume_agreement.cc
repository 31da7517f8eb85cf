// The step to resume at after a loss (see resume_agreement.h).
#include "examples/serving/resume_agreement.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::examples {
namespace {

// "rank 5" / "ranks 0-3, 6".
std::string Ranks(const std::vector<uint32_t>& ranks) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(ranks[i])
                           : absl::StrCat(ranks[i], "-", ranks[j]));
    i = j + 1;
  }
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(parts, ", "));
}

}  // namespace

std::vector<uint32_t> EncodeResumeFrame(uint32_t step, uint64_t epoch) {
  return {kResumeMagic, step, static_cast<uint32_t>(epoch)};
}

absl::StatusOr<uint32_t> DecodeResumeFrames(uint32_t world_size, uint64_t epoch,
                                            absl::Span<const uint32_t> words,
                                            uint32_t first_rank) {
  const auto fail = [&](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "agreeing on the step to resume at epoch ", epoch, ": ", what));
  };
  if (words.size() != size_t{world_size} * kResumeFrameWords) {
    return fail(absl::StrCat("got ", words.size(), " words; expected ",
                             world_size, " frames of ", kResumeFrameWords));
  }
  std::vector<uint32_t> bad, other_epoch;
  std::map<uint32_t, std::vector<uint32_t>> ranks_by_step;
  for (uint32_t r = 0; r < world_size; ++r) {
    const uint32_t* f = &words[r * kResumeFrameWords];
    if (f[0] != kResumeMagic) {
      bad.push_back(first_rank + r);
    } else if (f[2] != static_cast<uint32_t>(epoch)) {
      other_epoch.push_back(first_rank + r);
    } else if (f[1] != kUnknownStep) {
      ranks_by_step[f[1]].push_back(first_rank + r);
    }
  }
  if (!bad.empty())
    return fail(absl::StrCat("malformed frames from ", Ranks(bad)));
  if (!other_epoch.empty()) {
    return fail(absl::StrCat(Ranks(other_epoch), " are at another epoch"));
  }
  if (ranks_by_step.empty()) {
    return fail(
        "no rank knows the step (every rank is a replacement: nothing "
        "survived the loss to resume from)");
  }
  if (ranks_by_step.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [step, ranks] : ranks_by_step) {
      parts.push_back(absl::StrCat("step ", step, " from ", Ranks(ranks)));
    }
    return fail(absl::StrCat("the survivors name different steps: ",
                             absl::StrJoin(parts, "; ")));
  }
  return ranks_by_step.begin()->first;
}

absl::StatusOr<uint32_t> AgreeOnResume(Collectives& collectives,
                                       uint32_t world_size, uint32_t step) {
  const uint64_t epoch = collectives.epoch();
  auto words = collectives.AllGatherWords(EncodeResumeFrame(step, epoch));
  if (!words.ok()) return words.status();
  return DecodeResumeFrames(world_size, epoch, *words);
}

}  // namespace rankd::examples
