// KvStore: the job's key-value broker (set, blocking get with deadline, add,
// delete), used for NCCL unique ids and Gloo rendezvous.
//
// One store belongs to one job incarnation on the coordinator, so keys are
// namespaced per job and incarnation by construction. What it holds is
// bounded (KvLimits): keys, bytes, and keys per rank. Thread-safe. Depends
// on DeadlineTimer, common/limits and absl.
#ifndef RANKD_DAEMON_KV_STORE_H_
#define RANKD_DAEMON_KV_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "daemon/call_cancellation.h"
#include "daemon/deadline_timer.h"

namespace rankd {

// What one store may hold (the --kv_max_* flags; common/limits.h has the
// defaults).
struct KvLimits {
  // Keys and values together: what one job can make the coordinator hold.
  size_t max_bytes = kMaxKvBytes;
  size_t max_keys = kMaxKvKeys;
  // Keys one rank created that still exist.
  size_t max_keys_per_rank = kMaxKvKeysPerRank;
};

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 512;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  // The creator of a key set for no rank (callers that act for no rank,
  // such as unit tests): it counts toward max_keys and max_bytes only. The
  // coordinator always passes the calling rank.
  static constexpr uint32_t kNoRank = UINT32_MAX;

  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;

  // `timer` must outlive the store.
  explicit KvStore(DeadlineTimer* timer, KvLimits limits = {});

  // InvalidArgument for an empty or oversized key or an oversized value.
  static absl::Status ValidateKey(absl::string_view key);
  static absl::Status ValidateValue(absl::string_view value);

  // Stores `value`, releasing every Get waiting for `key`. A new key counts
  // against `rank` (its creator) until it is deleted; replacing a value
  // keeps the creator. ResourceExhausted, naming the limit, when the store
  // would hold more than max_keys keys or max_bytes bytes, or `rank` more
  // than max_keys_per_rank keys; the failure cause when Fail was called.
  absl::Status Set(absl::string_view key, absl::string_view value,
                   uint32_t rank = kNoRank);

  // Calls `done` with the value once `key` exists (at once if it does), or
  // with DeadlineExceeded naming the key at `deadline`, or with the failure
  // cause if the store fails first, or with Cancelled as soon as
  // `cancellation` (may be null) is cancelled. `done` runs exactly once,
  // possibly on the calling thread, without the store's lock held. The
  // store must outlive `cancellation`'s last Cancel().
  void Get(absl::string_view key, absl::Time deadline, GetCallback done,
           const CancellationRef& cancellation = nullptr);

  // Blocking Gets waiting now.
  size_t waiting() const;

  // Current value, without waiting.
  std::optional<std::string> Peek(absl::string_view key) const;

  // Adds `delta` to the decimal int64 counter at `key` (absent = 0) and
  // returns the new value. FailedPrecondition if the key holds something
  // that is not a decimal int64; OutOfRange on overflow; ResourceExhausted
  // as for Set (a new counter counts against `rank`).
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta,
                              uint32_t rank = kNoRank);

  // Removes `key` (its creator's count drops); returns whether it existed.
  absl::StatusOr<bool> Delete(absl::string_view key);

  // Fails every waiting Get and every later operation with `cause`.
  void Fail(absl::Status cause);

  size_t size() const;
  // Keys `rank` created that still exist.
  size_t keys_of(uint32_t rank) const;

 private:
  struct Entry {
    std::string value;
    uint32_t creator = kNoRank;
  };
  struct Waiter {
    std::string key;
    GetCallback done;
    DeadlineTimer::TimerId timer = 0;
  };

  void Expire(uint64_t waiter_id, absl::Duration waited);
  // Releases a waiting Get whose caller cancelled it.
  void CancelWait(uint64_t waiter_id);
  // Removes and returns waiter `waiter_id`, if it still waits.
  std::optional<Waiter> TakeWaiter(uint64_t waiter_id);
  // Sets `key` to `value` within limits_, a new key counting against
  // `rank`.
  absl::Status StoreLocked(absl::string_view key, std::string value,
                           uint32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the Gets waiting for `key` (cancelling their timers) and
  // appends their callbacks to `released`, to be run without the lock.
  void TakeWaitersLocked(absl::string_view key,
                         std::vector<GetCallback>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DeadlineTimer* const timer_;
  const KvLimits limits_;
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Entry, std::less<>> values_ ABSL_GUARDED_BY(mu_);
  // Keys per creating rank (ranks with none are absent; kNoRank untracked).
  std::map<uint32_t, size_t> keys_of_rank_ ABSL_GUARDED_BY(mu_);
  // Sum of key and value sizes in values_.
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_KV_STORE_H_
