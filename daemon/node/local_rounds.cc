#include "daemon/node/local_rounds.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "common/monotonic_clock.h"

namespace rankd {

absl::Duration LocalRounds::FlushMargin(absl::Duration timeout) {
  return std::min(timeout / 4, absl::Milliseconds(200));
}

LocalRounds::LocalRounds(uint32_t local_ranks, DeadlineTimer* timer, Send send)
    : local_ranks_(local_ranks), timer_(timer), send_(std::move(send)) {}

LocalRounds::~LocalRounds() {
  absl::MutexLock lock(&mu_);
  for (auto& [number, round] : rounds_) CancelTimersLocked(round);
}

uint32_t LocalRounds::ExpectedLocked(uint64_t round) const {
  uint32_t out = 0;
  for (const auto& [rank, from] : serves_from_) {
    if (round < from) ++out;
  }
  return local_ranks_ > out ? local_ranks_ - out : 1;
}

void LocalRounds::CancelTimersLocked(Round& round) {
  timer_->Cancel(round.flush_timer);
  timer_->Cancel(round.retire_timer);
  round.flush_timer = 0;
  round.retire_timer = 0;
}

void LocalRounds::Contribute(uint64_t number, v1::RankFrame frame,
                             Waiter waiter, absl::Duration timeout) {
  Batch batch;
  batch.round = number;
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (!closed_.ok()) {
      const absl::Status closed = closed_;
      lock.Release();
      return waiter.reply(closed);
    }
    if (number <= retired_ && rounds_.count(number) == 0) {
      // Late for a round this node already retired: on its own.
      lock.Release();
      batch.opened = MonotonicNow();
      batch.deadline = batch.opened + timeout;
      batch.frames.push_back(std::move(frame));
      batch.waiters.push_back(std::move(waiter));
      return send_(std::move(batch));
    }
    auto [it, inserted] = rounds_.try_emplace(number);
    Round& round = it->second;
    if (inserted) {
      round.opened = MonotonicNow();
      round.deadline = round.opened + timeout;
      round.flush_timer = timer_->Schedule(
          round.deadline - FlushMargin(timeout),
          [this, number, g = generation_] { Flush(number, g); });
    }
    batch.opened = round.opened;
    batch.deadline = round.deadline;
    ++round.contributed;
    if (round.flushed) {
      // Late after a partial flush: this frame on its own.
      batch.frames.push_back(std::move(frame));
      batch.waiters.push_back(std::move(waiter));
    } else {
      round.pending.push_back(std::move(frame));
      round.waiters.push_back(std::move(waiter));
      if (round.contributed >= ExpectedLocked(number)) {
        batch.frames = std::move(round.pending);
        batch.waiters = std::move(round.waiters);
      }
    }
    if (round.contributed >= ExpectedLocked(number)) {
      CancelTimersLocked(round);
      rounds_.erase(it);
      retired_ = std::max(retired_, number);
    }
  }
  if (!batch.frames.empty()) send_(std::move(batch));
}

void LocalRounds::Flush(uint64_t number, uint64_t generation) {
  Batch batch;
  batch.round = number;
  {
    absl::MutexLock lock(&mu_);
    if (generation != generation_) return;
    auto it = rounds_.find(number);
    if (it == rounds_.end()) return;
    Round& round = it->second;
    round.flush_timer = 0;
    round.flushed = true;
    round.retire_timer = timer_->Schedule(
        round.deadline,
        [this, number, generation] { Retire(number, generation); });
    batch.opened = round.opened;
    batch.deadline = round.deadline;
    batch.frames = std::move(round.pending);
    batch.waiters = std::move(round.waiters);
    round.pending.clear();
    round.waiters.clear();
  }
  if (!batch.frames.empty()) send_(std::move(batch));
}

void LocalRounds::Retire(uint64_t number, uint64_t generation) {
  absl::MutexLock lock(&mu_);
  if (generation != generation_) return;
  auto it = rounds_.find(number);
  if (it == rounds_.end()) return;
  // Nothing of it waits here: its flushed frames (and any late ones) went
  // to the coordinator, which answers them.
  rounds_.erase(it);
  retired_ = std::max(retired_, number);
}

bool LocalRounds::Withdraw(uint64_t number, uint32_t rank) {
  Waiter dropped;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  auto it = rounds_.find(number);
  if (it == rounds_.end()) return false;
  Round& round = it->second;
  for (size_t i = 0; i < round.waiters.size(); ++i) {
    if (round.waiters[i].rank != rank) continue;
    dropped = std::move(round.waiters[i]);
    round.waiters.erase(round.waiters.begin() + i);
    round.pending.erase(round.pending.begin() + i);
    --round.contributed;
    if (round.contributed == 0) {
      CancelTimersLocked(round);
      rounds_.erase(it);
    }
    return true;
  }
  return false;
}

size_t LocalRounds::Drop(const std::set<uint32_t>& ranks,
                         const absl::Status& status) {
  std::vector<Waiter> dropped;
  std::vector<Batch> ready;  // rounds that waited only for `ranks`
  {
    absl::MutexLock lock(&mu_);
    for (uint32_t rank : ranks) {
      serves_from_[rank] = std::numeric_limits<uint64_t>::max();
    }
    for (auto it = rounds_.begin(); it != rounds_.end();) {
      Round& round = it->second;
      for (size_t i = 0; i < round.waiters.size();) {
        if (!ranks.contains(round.waiters[i].rank)) {
          ++i;
          continue;
        }
        dropped.push_back(std::move(round.waiters[i]));
        round.waiters.erase(round.waiters.begin() + i);
        round.pending.erase(round.pending.begin() + i);
        --round.contributed;
      }
      if (round.contributed == 0) {
        CancelTimersLocked(round);
        it = rounds_.erase(it);
      } else if (!round.flushed &&
                 round.contributed >= ExpectedLocked(it->first)) {
        Batch batch;
        batch.round = it->first;
        batch.opened = round.opened;
        batch.deadline = round.deadline;
        batch.frames = std::move(round.pending);
        batch.waiters = std::move(round.waiters);
        ready.push_back(std::move(batch));
        CancelTimersLocked(round);
        retired_ = std::max(retired_, it->first);
        it = rounds_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& w : dropped) w.reply(status);
  for (auto& batch : ready) send_(std::move(batch));
  return dropped.size();
}

void LocalRounds::Resume(const std::set<uint32_t>& ranks,
                         uint64_t first_round) {
  absl::MutexLock lock(&mu_);
  for (uint32_t rank : ranks) serves_from_[rank] = first_round;
}

void LocalRounds::Close(const absl::Status& status) {
  std::vector<Waiter> waiters;
  absl::Status closing = status.ok() ? absl::CancelledError("closed") : status;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return;
    closed_ = closing;
    for (auto& [number, round] : rounds_) {
      CancelTimersLocked(round);
      for (auto& w : round.waiters) waiters.push_back(std::move(w));
    }
    rounds_.clear();
  }
  for (auto& w : waiters) w.reply(closing);
}

void LocalRounds::Restart(uint64_t epoch, const absl::Status& status) {
  std::vector<Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok() || epoch <= epoch_) return;
    epoch_ = epoch;
    for (auto& [number, round] : rounds_) {
      CancelTimersLocked(round);
      for (auto& w : round.waiters) waiters.push_back(std::move(w));
    }
    rounds_.clear();
    retired_ = 0;
    ++generation_;
  }
  for (auto& w : waiters) w.reply(status);
}

size_t LocalRounds::open() const {
  absl::MutexLock lock(&mu_);
  return rounds_.size();
}

}  // namespace rankd
