#include "daemon/node/pending_rounds.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd {

uint64_t PendingRounds::Add(uint64_t round, absl::Time deadline,
                            RoundReply& reply) {
  return pending_
      .Add([&] {
        return Pending{round, deadline, std::move(reply)};
      })
      .id;
}

absl::StatusOr<v1::AllGatherWordsResponse> TakeOutcomeWords(
    v1::RoundOutcome& outcome) {
  v1::AllGatherWordsResponse result = std::move(*outcome.mutable_result());
  const std::string& bytes = outcome.words_le();
  if (bytes.empty()) return result;
  if (bytes.size() % 4 != 0 || result.words_size() != 0) {
    return absl::InternalError(absl::StrCat(
        "round ", outcome.round(), ": the coordinator sent ", bytes.size(),
        " bytes of words_le (not whole 4-byte words) or words both ways"));
  }
  const size_t count = bytes.size() / 4;
  result.mutable_words()->Resize(static_cast<int>(count), 0);
  uint32_t* words = result.mutable_words()->mutable_data();
  const auto* in = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < count; ++i, in += 4) {
    words[i] = uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 |
               uint32_t{in[3]} << 24;
  }
  return result;
}

bool PendingRounds::Answer(v1::RoundOutcome& outcome) {
  std::optional<Pending> answered = pending_.Take(outcome.tag());
  if (!answered.has_value()) return false;
  if (outcome.code() == 0) {
    answered->reply(TakeOutcomeWords(outcome));
  } else {
    answered->reply(absl::Status(static_cast<absl::StatusCode>(outcome.code()),
                                 outcome.message()));
  }
  return true;
}

void PendingRounds::ExpireOverdue(absl::Time now) {
  for (auto& [tag, p] : pending_.TakeOverdue(now)) {
    p.reply(absl::DeadlineExceededError(
        absl::StrCat("coordinator at ", coordinator_,
                     " did not answer all_gather_words round ", p.round,
                     " within its timeout")));
  }
}

void PendingRounds::Abandon(const absl::Status& why) {
  for (Pending& p : pending_.Abandon()) p.reply(why);
}

}  // namespace rankd
