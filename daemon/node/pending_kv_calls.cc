#include "daemon/node/pending_kv_calls.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rankd {

absl::StatusOr<uint64_t> PendingKvCalls::Add(absl::Time deadline,
                                             KvReply& reply) {
  absl::MutexLock lock(&mu_);
  if (abandoned_) return 0;
  if (pending_.size() >= max_in_flight_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        link_, ": ", max_in_flight_,
        " key-value calls of this node are already waiting for the "
        "coordinator (the limit, kMaxKvCallsPerRoundLink)"));
  }
  const uint64_t id = next_id_++;
  pending_.emplace(id, Pending{deadline, std::move(reply)});
  return id;
}

bool PendingKvCalls::Answer(v1::KvLinkReply reply) {
  KvReply answered;
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(reply.id());
    if (it == pending_.end()) return false;
    answered = std::move(it->second.reply);
    pending_.erase(it);
  }
  answered(std::move(reply));
  return true;
}

bool PendingKvCalls::Waiting(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return pending_.contains(id);
}

void PendingKvCalls::ExpireOverdue(absl::Time now) {
  std::vector<KvReply> overdue;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      overdue.push_back(std::move(it->second.reply));
      it = pending_.erase(it);
    }
  }
  for (KvReply& reply : overdue) {
    reply(absl::DeadlineExceededError(
        absl::StrCat(link_,
                     ": the coordinator did not answer a key-value call within "
                     "its timeout")));
  }
}

void PendingKvCalls::Abandon(const absl::Status& why) {
  std::map<uint64_t, Pending> abandoned;
  {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
    abandoned.swap(pending_);
  }
  for (auto& [id, p] : abandoned) p.reply(why);
}

size_t PendingKvCalls::size() {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

}  // namespace rankd
