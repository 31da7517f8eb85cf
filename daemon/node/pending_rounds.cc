#include "daemon/node/pending_rounds.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rankd {

uint64_t PendingRounds::Add(uint64_t round, absl::Time deadline,
                            RoundReply& reply) {
  absl::MutexLock lock(&mu_);
  if (abandoned_) return 0;
  const uint64_t tag = next_tag_++;
  pending_[tag] = Pending{round, deadline, std::move(reply)};
  return tag;
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
  RoundReply reply;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(outcome.tag());
    if (it == pending_.end()) return false;
    reply = std::move(it->second.reply);
    pending_.erase(it);
  }
  if (outcome.code() == 0) {
    reply(TakeOutcomeWords(outcome));
  } else {
    reply(absl::Status(static_cast<absl::StatusCode>(outcome.code()),
                       outcome.message()));
  }
  return true;
}

void PendingRounds::ExpireOverdue(absl::Time now) {
  std::vector<Pending> overdue;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      overdue.push_back(std::move(it->second));
      it = pending_.erase(it);
    }
  }
  for (Pending& p : overdue) {
    p.reply(absl::DeadlineExceededError(
        absl::StrCat("coordinator at ", coordinator_,
                     " did not answer all_gather_words round ", p.round,
                     " within its timeout")));
  }
}

void PendingRounds::Abandon(const absl::Status& why) {
  std::map<uint64_t, Pending> abandoned;
  {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
    abandoned.swap(pending_);
  }
  for (auto& [tag, p] : abandoned) p.reply(why);
}

}  // namespace rankd
