#include "daemon/kv_store.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/monotonic_clock.h"

namespace rankd {

KvStore::KvStore(DeadlineTimer* timer, KvLimits limits)
    : timer_(timer), limits_(limits) {}

absl::Status KvStore::ValidateKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key is ", key.size(), " bytes; the limit is ", kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status KvStore::ValidateValue(absl::string_view value) {
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value is ", value.size(), " bytes; the limit is ", kMaxValueBytes));
  }
  return absl::OkStatus();
}

absl::Status KvStore::Set(absl::string_view key, absl::string_view value,
                          uint32_t rank) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  if (auto s = ValidateValue(value); !s.ok()) return s;
  std::vector<GetCallback> released;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    if (auto s = StoreLocked(key, std::string(value), rank); !s.ok()) return s;
    TakeWaitersLocked(key, &released);
  }
  for (auto& done : released) done(std::string(value));
  return absl::OkStatus();
}

void KvStore::Get(absl::string_view key, absl::Time deadline, GetCallback done,
                  const CancellationRef& cancellation) {
  if (auto s = ValidateKey(key); !s.ok()) return done(s);
  absl::StatusOr<std::string> immediate;
  uint64_t parked = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) {
      immediate = failure_;
    } else if (auto it = values_.find(key); it != values_.end()) {
      immediate = it->second.value;
    } else if (deadline <= MonotonicNow()) {
      immediate =
          absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
    } else {
      uint64_t id = next_waiter_++;
      absl::Duration waited = deadline - MonotonicNow();
      Waiter& w = waiters_[id];
      w.key = std::string(key);
      w.done = std::move(done);
      w.timer = timer_->Schedule(deadline,
                                 [this, id, waited] { Expire(id, waited); });
      parked = id;
    }
  }
  if (parked != 0) {
    // Outside the lock: an already cancelled call releases at once.
    if (cancellation != nullptr) {
      cancellation->OnCancel([this, parked] { CancelWait(parked); });
    }
    return;
  }
  done(std::move(immediate));
}

void KvStore::CancelWait(uint64_t waiter_id) {
  std::optional<Waiter> waiter = TakeWaiter(waiter_id);
  if (!waiter.has_value()) return;
  timer_->Cancel(waiter->timer);
  waiter->done(absl::CancelledError(absl::StrCat(
      "the wait for key '", waiter->key, "' was cancelled by its caller")));
}

std::optional<KvStore::Waiter> KvStore::TakeWaiter(uint64_t waiter_id) {
  absl::MutexLock lock(&mu_);
  auto it = waiters_.find(waiter_id);
  if (it == waiters_.end()) return std::nullopt;
  Waiter waiter = std::move(it->second);
  waiters_.erase(it);
  return waiter;
}

size_t KvStore::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

void KvStore::TakeWaitersLocked(absl::string_view key,
                                std::vector<GetCallback>* released) {
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    if (w->second.key == key) {
      timer_->Cancel(w->second.timer);
      released->push_back(std::move(w->second.done));
      w = waiters_.erase(w);
    } else {
      ++w;
    }
  }
}

void KvStore::Expire(uint64_t waiter_id, absl::Duration waited) {
  std::optional<Waiter> waiter = TakeWaiter(waiter_id);
  if (!waiter.has_value()) return;
  waiter->done(absl::DeadlineExceededError(
      absl::StrFormat("key '%s' was not set within %d ms", waiter->key,
                      absl::ToInt64Milliseconds(waited))));
}

std::optional<std::string> KvStore::Peek(absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second.value;
}

absl::StatusOr<int64_t> KvStore::Add(absl::string_view key, int64_t delta,
                                     uint32_t rank) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  int64_t updated = 0;
  std::vector<GetCallback> released;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    int64_t current = 0;
    auto it = values_.find(key);
    if (it != values_.end() && !absl::SimpleAtoi(it->second.value, &current)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "key '", key, "' holds a value that is not a decimal counter"));
    }
    if ((delta > 0 && current > std::numeric_limits<int64_t>::max() - delta) ||
        (delta < 0 && current < std::numeric_limits<int64_t>::min() - delta)) {
      return absl::OutOfRangeError(absl::StrCat("adding ", delta,
                                                " to counter '", key, "' (",
                                                current, ") overflows int64"));
    }
    updated = current + delta;
    if (auto s = StoreLocked(key, absl::StrCat(updated), rank); !s.ok()) {
      return s;
    }
    TakeWaitersLocked(key, &released);
  }
  for (auto& done : released) done(absl::StrCat(updated));
  return updated;
}

absl::StatusOr<bool> KvStore::Delete(absl::string_view key) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  bytes_ -= it->first.size() + it->second.value.size();
  if (it->second.creator != kNoRank) {
    auto count = keys_of_rank_.find(it->second.creator);
    if (--count->second == 0) keys_of_rank_.erase(count);
  }
  values_.erase(it);
  return true;
}

absl::Status KvStore::StoreLocked(absl::string_view key, std::string value,
                                  uint32_t rank) {
  auto it = values_.find(key);
  const bool created = it == values_.end();
  const size_t held = created ? 0 : key.size() + it->second.value.size();
  if (created && values_.size() >= limits_.max_keys) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key-value broker holds ", limits_.max_keys,
        " keys already (--kv_max_keys); delete keys that are no longer "
        "needed"));
  }
  if (created && rank != kNoRank) {
    auto count = keys_of_rank_.find(rank);
    if (count != keys_of_rank_.end() &&
        count->second >= limits_.max_keys_per_rank) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", rank, " created ", count->second,
          " keys that still exist; the limit is ", limits_.max_keys_per_rank,
          " per rank (--kv_max_keys_per_rank); delete keys that are no "
          "longer needed"));
    }
  }
  if (bytes_ - held + key.size() + value.size() > limits_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key-value broker would hold more than ", limits_.max_bytes,
        " bytes of keys and values (--kv_max_bytes; it holds ", bytes_,
        "); delete keys that are no longer needed"));
  }
  bytes_ += key.size() + value.size() - held;
  if (created) {
    values_.emplace(std::string(key), Entry{std::move(value), rank});
    if (rank != kNoRank) ++keys_of_rank_[rank];
  } else {
    it->second.value = std::move(value);
  }
  return absl::OkStatus();
}

void KvStore::Fail(absl::Status cause) {
  std::map<uint64_t, Waiter> failed;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = cause;
    failed.swap(waiters_);
    for (auto& [id, w] : failed) timer_->Cancel(w.timer);
  }
  for (auto& [id, w] : failed) w.done(cause);
}

size_t KvStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

size_t KvStore::keys_of(uint32_t rank) const {
  absl::MutexLock lock(&mu_);
  auto it = keys_of_rank_.find(rank);
  return it == keys_of_rank_.end() ? 0 : it->second;
}

}  // namespace rankd
