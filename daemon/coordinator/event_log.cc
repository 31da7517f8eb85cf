#include "daemon/coordinator/event_log.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace rankd {

EventLog::EventLog(size_t capacity) : capacity_(capacity) {}

v1::JobEvent EventLog::Append(v1::EventKind kind,
                              std::optional<uint32_t> node_index,
                              std::vector<uint32_t> ranks,
                              std::string message) {
  v1::JobEvent event;
  event.set_kind(kind);
  if (node_index.has_value()) event.set_node_index(*node_index);
  for (uint32_t r : ranks) event.add_ranks(r);
  event.set_message(std::move(message));
  return Append(std::move(event));
}

v1::JobEvent EventLog::Append(v1::JobEvent event) {
  absl::MutexLock lock(&mu_);
  event.set_sequence(++last_sequence_);
  event.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  DeliverLocked(event);
  return event;
}

bool EventLog::Mirror(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (event.sequence() <= last_sequence_) return false;
  last_sequence_ = event.sequence();
  DeliverLocked(event);
  return true;
}

void EventLog::DeliverLocked(const v1::JobEvent& event) {
  events_.push_back(event);
  while (events_.size() > capacity_) events_.pop_front();
  for (auto& [id, subscription] : subscribers_) {
    if (event.sequence() > subscription.after) subscription.deliver(event);
  }
}

uint64_t EventLog::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return last_sequence_;
}

std::vector<v1::JobEvent> EventLog::Since(uint64_t after) const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::JobEvent> out;
  for (const auto& e : events_) {
    if (e.sequence() > after) out.push_back(e);
  }
  return out;
}

EventLog::SubscriptionId EventLog::Subscribe(uint64_t after,
                                             Subscriber subscriber) {
  absl::MutexLock lock(&mu_);
  return SubscribeLocked(after, std::move(subscriber));
}

absl::StatusOr<EventLog::SubscriptionId> EventLog::Resume(
    uint64_t after, Subscriber subscriber) {
  absl::MutexLock lock(&mu_);
  const uint64_t first = FirstKeptLocked();
  // (after < first - 1: no wrap for an `after` of UINT64_MAX, which is
  // past every event and so no gap.)
  if (after > 0 && after < first - 1) {
    return absl::OutOfRangeError(absl::StrCat(
        "events ", after + 1, "-", first - 1,
        " are no longer kept (this daemon keeps the last ", capacity_,
        "; the oldest is #", first,
        "): read the job's state (rankctl status, members) and watch from "
        "sequence ",
        first - 1));
  }
  return SubscribeLocked(after, std::move(subscriber));
}

EventLog::SubscriptionId EventLog::SubscribeLocked(uint64_t after,
                                                   Subscriber subscriber) {
  for (const auto& e : events_) {
    if (e.sequence() > after) subscriber(e);
  }
  SubscriptionId id = next_subscription_++;
  subscribers_.emplace(id, Subscription{after, std::move(subscriber)});
  return id;
}

uint64_t EventLog::first_kept() const {
  absl::MutexLock lock(&mu_);
  return FirstKeptLocked();
}

uint64_t EventLog::FirstKeptLocked() const {
  return events_.empty() ? last_sequence_ + 1 : events_.front().sequence();
}

void EventLog::Unsubscribe(SubscriptionId id) {
  absl::MutexLock lock(&mu_);
  subscribers_.erase(id);
}

std::string EventKindName(v1::EventKind kind) {
  return std::string(
      absl::StripPrefix(v1::EventKind_Name(kind), "EVENT_KIND_"));
}

std::string DescribeEvent(const v1::JobEvent& event) {
  std::string out =
      absl::StrCat("#", event.sequence(), " ", EventKindName(event.kind()));
  if (event.has_node_index())
    absl::StrAppend(&out, " node=", event.node_index());
  if (event.ranks_size() > 0) {
    absl::StrAppend(&out, " ranks=", absl::StrJoin(event.ranks(), ","));
  }
  if (!event.message().empty()) absl::StrAppend(&out, " ", event.message());
  // Named once the job has recovered (epoch 1 is every job's first, and
  // the only one without --recovery=on): logs read as before otherwise.
  if (event.epoch() > 1) absl::StrAppend(&out, " (epoch ", event.epoch(), ")");
  return out;
}

}  // namespace rankd
