#include "daemon/coordinator/kv_store.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/monotonic_clock.h"

namespace rankd {

namespace {

// The rank an "r<N>/" key names: N; nullopt for other keys. N as written,
// which may be non-canonical ("r05/") or outside the job: the caller
// refuses those.
std::optional<std::pair<uint64_t, absl::string_view>> RankPrefix(
    absl::string_view key) {
  if (key.size() < 3 || key[0] != 'r' || !absl::ascii_isdigit(key[1])) {
    return std::nullopt;
  }
  size_t slash = key.find('/');
  if (slash == absl::string_view::npos) return std::nullopt;
  absl::string_view digits = key.substr(1, slash - 1);
  for (char c : digits) {
    if (!absl::ascii_isdigit(c)) return std::nullopt;
  }
  uint64_t rank = 0;
  if (digits.size() > 10 || !absl::SimpleAtoi(digits, &rank)) {
    rank = UINT64_MAX;
  }
  return std::make_pair(rank, key.substr(0, slash + 1));
}

// "epoch/<N>/<rest>" -> <rest>; other keys as they are.
absl::string_view WithoutEpochScope(absl::string_view key) {
  absl::string_view rest = key;
  if (!absl::ConsumePrefix(&rest, "epoch/")) return key;
  const size_t slash = rest.find('/');
  if (slash == 0 || slash == absl::string_view::npos) return key;
  for (char c : rest.substr(0, slash)) {
    if (!absl::ascii_isdigit(c)) return key;
  }
  return rest.substr(slash + 1);
}

const char* Verb(int write) {
  switch (write) {
    case 0:
      return "set";
    case 1:
      return "add to";
    default:
      return "delete";
  }
}

}  // namespace

KvStore::KvStore(DeadlineTimer* timer, KvLimits limits, KvRules rules)
    : timer_(timer), limits_(limits), rules_(std::move(rules)) {}

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
  return SetAs(key, value, rank).status();
}

absl::StatusOr<bool> KvStore::SetAs(absl::string_view key,
                                    absl::string_view value, uint32_t rank,
                                    const KvCondition& condition,
                                    KvReader writer) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  if (auto s = ValidateValue(value); !s.ok()) return s;
  if (condition.if_absent && condition.expected.has_value()) {
    // No key both is absent and holds a value: the caller mixed up two
    // writes, which must not pass as a condition that did not hold.
    return absl::InvalidArgumentError(absl::StrCat(
        "key '", key,
        "': a write is either create-only (if_absent) or compare-and-set "
        "(expected), not both"));
  }
  std::vector<GetCallback> released;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    if (std::optional<absl::Status> ended = EndedLocked(writer)) {
      return *std::move(ended);
    }
    auto it = values_.find(key);
    const Entry* existing = it == values_.end() ? nullptr : &it->second;
    if (auto s = CheckOwnerLocked(key, rank, Write::kSet,
                                  condition.conditional(), existing);
        !s.ok()) {
      return s;
    }
    if (condition.if_absent && existing != nullptr) return false;
    if (condition.expected.has_value() &&
        (existing == nullptr || existing->value != *condition.expected)) {
      return false;
    }
    if (auto s = StoreLocked(key, std::string(value), rank); !s.ok()) return s;
    TakeWaitersLocked(key, &released);
  }
  for (auto& done : released) done(std::string(value));
  return true;
}

absl::Status KvStore::CheckOwnerLocked(absl::string_view key, uint32_t rank,
                                       Write write, bool conditional,
                                       const Entry* existing) const {
  if (rank == kNoRank) return absl::OkStatus();
  const char* verb = Verb(static_cast<int>(write));
  const absl::string_view owned =
      rules_.epoch_scoped ? WithoutEpochScope(key) : key;
  if (rules_.world_size > 0) {
    if (auto owner = RankPrefix(owned); owner.has_value()) {
      const auto [n, prefix] = *owner;
      if (n >= rules_.world_size || absl::StrCat("r", n, "/") != prefix) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key '", key, "' starts with '", prefix,
            "', which names no rank of this job (keys under r<rank>/ belong "
            "to that rank; ranks are 0..",
            rules_.world_size - 1, ", without leading zeros)"));
      }
      if (n != rank) {
        return absl::PermissionDeniedError(
            absl::StrCat("rank ", rank, " cannot ", verb, " key '", key,
                         "': keys under '", prefix, "' belong to rank ", n));
      }
      return absl::OkStatus();
    }
  }
  for (const std::string& shared : rules_.shared_prefixes) {
    if (!absl::StartsWith(owned, shared)) continue;
    if (write != Write::kAdd && !conditional) {
      return absl::PermissionDeniedError(absl::StrCat(
          "rank ", rank, " cannot ", verb, " key '", key,
          "' unconditionally: it is under the shared prefix '", shared,
          "' (--kv_shared_prefixes), whose keys are written with "
          "compare-and-set (an expected value",
          write == Write::kSet ? ", or create-only" : "", ")"));
    }
    return absl::OkStatus();
  }
  if (existing != nullptr && existing->creator != kNoRank &&
      existing->creator != rank) {
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", rank, " cannot ", verb, " key '", key, "': rank ",
        existing->creator,
        " created it, and only its creator may change or "
        "delete it (keys several ranks write go under a shared prefix, "
        "--kv_shared_prefixes)"));
  }
  return absl::OkStatus();
}

void KvStore::Get(absl::string_view key, absl::Time deadline, GetCallback done,
                  const CancellationRef& cancellation, KvReader reader) {
  if (auto s = ValidateKey(key); !s.ok()) return done(s);
  absl::StatusOr<std::string> immediate;
  uint64_t parked = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) {
      immediate = failure_;
    } else if (std::optional<absl::Status> ended = EndedLocked(reader);
               ended.has_value()) {
      // Admitted before its epoch ended, arriving after: the same answer
      // as a get that waited across the end.
      immediate = *std::move(ended);
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
      w.by_key = waiters_by_key_.emplace(w.key, id);
      w.done = std::move(done);
      w.timer = timer_->Schedule(deadline,
                                 [this, id, waited] { Expire(id, waited); });
      w.reader = reader;
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

std::optional<absl::Status> KvStore::EndedLocked(const KvReader& reader) const {
  if (reader.epoch == 0) return std::nullopt;
  auto it = ended_.find(reader.group);
  if (it == ended_.end() || reader.epoch > it->second.epoch) {
    return std::nullopt;
  }
  return it->second.why;
}

KvStore::EndedGets KvStore::EndEpoch(uint32_t group, uint64_t epoch,
                                     absl::Status why) {
  EndedGets ended;
  ended.why_ = why;
  absl::MutexLock lock(&mu_);
  if (!failure_.ok() || epoch == 0) return ended;
  EndedEpoch& last = ended_[group];
  if (epoch <= last.epoch) return ended;
  last.epoch = epoch;
  last.why = std::move(why);
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    const KvReader& reader = w->second.reader;
    if (reader.epoch == 0 || reader.group != group || reader.epoch > epoch) {
      ++w;
      continue;
    }
    timer_->Cancel(w->second.timer);
    ended.done_.push_back(std::move(w->second.done));
    w = EraseWaiterLocked(w);
  }
  return ended;
}

void KvStore::EndedGets::Send() {
  std::vector<GetCallback> done;
  done.swap(done_);
  for (GetCallback& d : done) d(why_);
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
  EraseWaiterLocked(it);
  return waiter;
}

std::map<uint64_t, KvStore::Waiter>::iterator KvStore::EraseWaiterLocked(
    std::map<uint64_t, Waiter>::iterator it) {
  waiters_by_key_.erase(it->second.by_key);
  return waiters_.erase(it);
}

size_t KvStore::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

void KvStore::TakeWaitersLocked(absl::string_view key,
                                std::vector<GetCallback>* released) {
  auto [first, last] = waiters_by_key_.equal_range(key);
  TakeWaitersLocked(first, last, released);
}

void KvStore::TakeWaitersLocked(WaitersByKey::iterator first,
                                WaitersByKey::iterator last,
                                std::vector<GetCallback>* released) {
  std::vector<uint64_t> ids;
  for (auto k = first; k != last; ++k) ids.push_back(k->second);
  for (uint64_t id : ids) {
    auto w = waiters_.find(id);
    timer_->Cancel(w->second.timer);
    released->push_back(std::move(w->second.done));
    EraseWaiterLocked(w);
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
                                     uint32_t rank, KvReader writer) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  int64_t updated = 0;
  std::vector<GetCallback> released;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return failure_;
    if (std::optional<absl::Status> ended = EndedLocked(writer)) {
      return *std::move(ended);
    }
    int64_t current = 0;
    auto it = values_.find(key);
    if (auto s = CheckOwnerLocked(key, rank, Write::kAdd, false,
                                  it == values_.end() ? nullptr : &it->second);
        !s.ok()) {
      return s;
    }
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

absl::StatusOr<bool> KvStore::Delete(absl::string_view key, uint32_t rank,
                                     const std::optional<std::string>& expected,
                                     KvReader writer) {
  if (auto s = ValidateKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  if (std::optional<absl::Status> ended = EndedLocked(writer)) {
    return *std::move(ended);
  }
  auto it = values_.find(key);
  if (auto s = CheckOwnerLocked(key, rank, Write::kDelete, expected.has_value(),
                                it == values_.end() ? nullptr : &it->second);
      !s.ok()) {
    return s;
  }
  if (it == values_.end()) return false;
  if (expected.has_value() && it->second.value != *expected) return false;
  const size_t size = it->first.size() + it->second.value.size();
  bytes_ -= size;
  ChargeLocked(it->second.creator, -1, -static_cast<int64_t>(size));
  values_.erase(it);
  return true;
}

void KvStore::ChargeLocked(uint32_t rank, int64_t keys, int64_t bytes) {
  if (rank == kNoRank) return;
  if (keys != 0) {
    size_t& count = keys_of_rank_[rank];
    count += keys;
    if (count == 0) keys_of_rank_.erase(rank);
  }
  if (bytes != 0) {
    size_t& held = bytes_of_rank_[rank];
    held += bytes;
    if (held == 0) bytes_of_rank_.erase(rank);
  }
}

absl::Status KvStore::StoreLocked(absl::string_view key, std::string value,
                                  uint32_t rank) {
  auto it = values_.find(key);
  const bool created = it == values_.end();
  const size_t held = created ? 0 : key.size() + it->second.value.size();
  const size_t size = key.size() + value.size();
  // A shared key written by another rank moves to that rank's tally (a
  // write for no rank, the daemon's own, leaves it where it is).
  const uint32_t charged_before = created ? kNoRank : it->second.creator;
  const bool moves = !created && rank != kNoRank && charged_before != rank;
  if (created && values_.size() >= limits_.max_keys) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key-value broker holds ", limits_.max_keys,
        " keys already (--kv_max_keys); delete keys that are no longer "
        "needed"));
  }
  if ((created || moves) && rank != kNoRank) {
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
  // The rank whose byte tally the write changes: the writer, or (a write
  // for no rank to a rank's key) the rank the key is charged to, which the
  // write must not push past its quota either.
  const uint32_t payer = created || moves ? rank : charged_before;
  if (payer != kNoRank && limits_.max_bytes_per_rank > 0) {
    auto it_bytes = bytes_of_rank_.find(payer);
    const size_t mine = it_bytes == bytes_of_rank_.end() ? 0 : it_bytes->second;
    const size_t after = mine - (moves || created ? 0 : held) + size;
    if (after > limits_.max_bytes_per_rank) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", payer, " holds ", mine,
          " bytes of keys and values; setting key '", key, "' (", size,
          " bytes) would pass its quota of ", limits_.max_bytes_per_rank,
          " bytes (--kv_max_bytes_per_rank); delete keys it no longer "
          "needs"));
    }
  }
  if (bytes_ - held + size > limits_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "key-value broker would hold more than ", limits_.max_bytes,
        " bytes of keys and values (--kv_max_bytes; it holds ", bytes_,
        "); delete keys that are no longer needed"));
  }
  bytes_ += size - held;
  if (created) {
    values_.emplace(std::string(key), Entry{std::move(value), rank});
    ChargeLocked(rank, 1, static_cast<int64_t>(size));
  } else {
    if (moves) {
      ChargeLocked(charged_before, -1, -static_cast<int64_t>(held));
      ChargeLocked(rank, 1, static_cast<int64_t>(size));
      it->second.creator = rank;
    } else {
      // The key's holder: the writer, or (a write for no rank) whoever it
      // is charged to, whose tally must follow the value's size.
      ChargeLocked(charged_before, 0,
                   static_cast<int64_t>(size) - static_cast<int64_t>(held));
    }
    it->second.value = std::move(value);
  }
  return absl::OkStatus();
}

size_t KvStore::DropPrefix(absl::string_view prefix, const absl::Status& why) {
  if (prefix.empty()) return 0;
  std::vector<GetCallback> ended;
  size_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return 0;
    // Keys are ordered: those with the prefix form one run from its bound.
    auto it = values_.lower_bound(prefix);
    while (it != values_.end() && absl::StartsWith(it->first, prefix)) {
      const size_t size = it->first.size() + it->second.value.size();
      bytes_ -= size;
      ChargeLocked(it->second.creator, -1, -static_cast<int64_t>(size));
      it = values_.erase(it);
      ++dropped;
    }
    // Waiting gets by key are ordered too: one run from the same bound.
    auto first = waiters_by_key_.lower_bound(prefix);
    auto last = first;
    while (last != waiters_by_key_.end() &&
           absl::StartsWith(last->first, prefix)) {
      ++last;
    }
    TakeWaitersLocked(first, last, &ended);
  }
  for (GetCallback& done : ended) done(why);
  return dropped;
}

void KvStore::Fail(absl::Status cause) {
  std::map<uint64_t, Waiter> failed;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = cause;
    failed.swap(waiters_);
    waiters_by_key_.clear();
    for (auto& [id, w] : failed) timer_->Cancel(w.timer);
  }
  for (auto& [id, w] : failed) w.done(cause);
}

absl::StatusOr<uint64_t> KvStore::Count(absl::string_view prefix) const {
  if (prefix.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix is ", prefix.size(), " bytes; the limit is ", kMaxKeyBytes));
  }
  absl::MutexLock lock(&mu_);
  if (!failure_.ok()) return failure_;
  // Every key: no walk (torch's num_keys() asks this of the whole store).
  if (prefix.empty()) return values_.size();
  uint64_t count = 0;
  // Keys are ordered: those with the prefix form one run from its bound.
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && absl::StartsWith(it->first, prefix); ++it) {
    ++count;
  }
  return count;
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

size_t KvStore::bytes_of(uint32_t rank) const {
  absl::MutexLock lock(&mu_);
  auto it = bytes_of_rank_.find(rank);
  return it == bytes_of_rank_.end() ? 0 : it->second;
}

}  // namespace rankd
