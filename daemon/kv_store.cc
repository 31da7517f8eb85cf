#include "daemon/kv_store.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rankd {

KvStore::KvStore(DeadlineTimer* timer) : timer_(timer) {}

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

absl::Status KvStore::Set(absl::string_view key, absl::string_view value) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  if (auto s = ValidateValue(value); !s.ok()) return s;
  std::vector<GetCallback> released;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    if (auto s = StoreLocked(key, std::string(value)); !s.ok()) return s;
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
      immediate = it->second;
    } else if (deadline <= absl::Now()) {
      immediate =
          absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
    } else {
      uint64_t id = next_waiter_++;
      absl::Duration waited = deadline - absl::Now();
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
  return it->second;
}

absl::StatusOr<int64_t> KvStore::Add(absl::string_view key, int64_t delta) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  int64_t updated = 0;
  std::vector<GetCallback> released;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    int64_t current = 0;
    auto it = values_.find(key);
    if (it != values_.end() && !absl::SimpleAtoi(it->second, &current)) {
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
    if (auto s = StoreLocked(key, absl::StrCat(updated)); !s.ok()) return s;
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
  bytes_ -= it->first.size() + it->second.size();
  values_.erase(it);
  return true;
}

absl::Status KvStore::StoreLocked(absl::string_view key, std::string value) {
  auto it = values_.find(key);
  const size_t held = it == values_.end() ? 0 : key.size() + it->second.size();
  if (it == values_.end() && values_.size() >= kMaxKeys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key-value broker holds ", kMaxKeys,
                     " keys already; delete keys that are no longer needed"));
  }
  if (bytes_ - held + key.size() + value.size() > kMaxTotalBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("key-value broker would hold more than ", kMaxTotalBytes,
                     " bytes of keys and values (it holds ", bytes_,
                     "); delete keys that are no longer needed"));
  }
  bytes_ += key.size() + value.size() - held;
  if (it == values_.end()) {
    values_.emplace(std::string(key), std::move(value));
  } else {
    it->second = std::move(value);
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

}  // namespace rankd
