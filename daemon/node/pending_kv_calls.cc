#include "daemon/node/pending_kv_calls.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd {

absl::StatusOr<uint64_t> PendingKvCalls::Add(absl::Time deadline,
                                             KvReply& reply) {
  const auto added = pending_.Add(
      [&] {
        return Pending{deadline, std::move(reply)};
      },
      max_in_flight_);
  if (added.full) {
    return absl::ResourceExhaustedError(absl::StrCat(
        link_, ": ", max_in_flight_,
        " key-value calls of this node are already waiting for the "
        "coordinator (the limit, kMaxKvCallsPerRoundLink)"));
  }
  return added.id;
}

bool PendingKvCalls::Answer(v1::KvLinkReply reply) {
  std::optional<Pending> answered = pending_.Take(reply.id());
  if (!answered.has_value()) return false;
  answered->reply(std::move(reply));
  return true;
}

bool PendingKvCalls::Waiting(uint64_t id) { return pending_.Contains(id); }

std::vector<uint64_t> PendingKvCalls::ExpireOverdue(absl::Time now) {
  std::vector<uint64_t> expired;
  for (auto& [id, p] : pending_.TakeOverdue(now)) {
    expired.push_back(id);
    p.reply(absl::DeadlineExceededError(
        absl::StrCat(link_,
                     ": the coordinator did not answer a key-value call within "
                     "its timeout")));
  }
  return expired;
}

void PendingKvCalls::Abandon(const absl::Status& why) {
  for (Pending& p : pending_.Abandon()) p.reply(why);
}

size_t PendingKvCalls::size() { return pending_.size(); }

}  // namespace rankd
