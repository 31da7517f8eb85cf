// PendingCalls: the bookkeeping PendingRounds and PendingKvCalls share: calls a
// node has sent on a stream (the Rounds stream, the round link) and not yet had
// answered, by a number of this side's choosing (never 0), each an `Entry` with
// an `absl::Time deadline`. It hands entries out and never runs them, so that
// their replies run outside its lock. Thread-safe. Depends on absl only.
#ifndef RANKD_DAEMON_PENDING_CALLS_H_
#define RANKD_DAEMON_PENDING_CALLS_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rankd {

template <typename Entry>
class PendingCalls {
 public:
  // What Add did: the new call's id, or 0 with why not.
  struct Added {
    uint64_t id = 0;
    bool full = false;  // `limit` calls wait already
  };

  // Adds the entry `make()` returns (called only when it is added, under
  // the lock, so the caller keeps what it would move into a refused entry)
  // and returns its id. Refused (id 0) once Abandon has run, or with `full`
  // when `limit` calls wait already.
  template <typename Make>
  Added Add(Make make, size_t limit = std::numeric_limits<size_t>::max()) {
    absl::MutexLock lock(&mu_);
    if (abandoned_) return Added{};
    if (entries_.size() >= limit) return Added{0, true};
    const uint64_t id = next_id_++;
    entries_.emplace(id, make());
    return Added{id, false};
  }

  // Removes and returns call `id`'s entry; nullopt when no call has it.
  std::optional<Entry> Take(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    Entry entry = std::move(it->second);
    entries_.erase(it);
    return entry;
  }

  // True while call `id` waits.
  bool Contains(uint64_t id) {
    absl::MutexLock lock(&mu_);
    return entries_.contains(id);
  }

  // Removes and returns the entries whose deadline is at or before `now`,
  // with their ids.
  std::vector<std::pair<uint64_t, Entry>> TakeOverdue(absl::Time now) {
    std::vector<std::pair<uint64_t, Entry>> overdue;
    absl::MutexLock lock(&mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      overdue.emplace_back(it->first, std::move(it->second));
      it = entries_.erase(it);
    }
    return overdue;
  }

  // Removes and returns every entry, and refuses later Adds.
  std::vector<Entry> Abandon() {
    std::vector<Entry> all;
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
    for (auto& [id, entry] : entries_) all.push_back(std::move(entry));
    entries_.clear();
    return all;
  }

  size_t size() {
    absl::MutexLock lock(&mu_);
    return entries_.size();
  }

 private:
  absl::Mutex mu_;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_PENDING_CALLS_H_
