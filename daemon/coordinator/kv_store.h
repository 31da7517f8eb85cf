// KvStore: the job's key-value broker (set, blocking get with deadline, add,
// delete), used for NCCL unique ids and Gloo rendezvous.
//
// One store belongs to one job incarnation on the coordinator, so keys are
// namespaced per job and incarnation by construction. What it holds is
// bounded (KvLimits): keys, bytes, and keys and bytes per rank, so that one
// rank cannot fill it and deny the others.
//
// Every key has an owner, so that one rank cannot poison another's keys
// (docs/operations.md, "Key-value ownership"):
//   - "r<N>/..." (N a rank of the job, in canonical decimal) belongs to
//     rank N from the start: only rank N creates, sets, adds to or deletes
//     it, so nobody can set it first either. The data plane's own keys
//     (Gloo rendezvous, NCCL unique ids, session counters, mismatch
//     reports) are all named so, after the rank the protocol names as
//     their writer.
//   - a key under a prefix the job declares shared (KvRules) belongs to no
//     one: any rank sets it with compare-and-set (an expected value, or
//     create-only), deletes it with an expected value, and adds to it;
//   - any other key belongs to the rank that created it until it is
//     deleted.
// Everyone reads every key. Calls for no rank (kNoRank: the daemon itself,
// unit tests) are not held to owners.
//
// A blocking get is fenced by its reader's epoch (KvReader): when that
// epoch ends (EndEpoch, a loss), every get waiting from it ends with the
// loss, and a later get from it is answered with the loss too, so a reader
// of an ended epoch never waits on past the loss nor reads what the next
// epoch writes. Thread-safe. Depends on DeadlineTimer, common/limits and
// absl.
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
  // Bytes of keys and values charged to one rank (the last writer of each
  // key) that still exist; 0: only max_bytes applies.
  size_t max_bytes_per_rank = 0;
};

// Who may write which key (see the file comment).
struct KvRules {
  // Ranks are 0..world_size-1: "r<N>/" keys with N outside are refused.
  // 0: no rank-owned keys (tests of the store alone).
  uint32_t world_size = 0;
  // Prefixes of keys that belong to no rank (--kv_shared_prefixes).
  std::vector<std::string> shared_prefixes;
  // --recovery=on: a key "epoch/<N>/<rest>" is owned as <rest> would be,
  // so no rank can create another's "epoch/<N>/r<M>/" rendezvous keys.
  bool epoch_scoped = false;
};

// When a write happens: always (the default), only when the key holds
// `expected`, or only when it does not exist.
struct KvCondition {
  std::optional<std::string> expected;
  bool if_absent = false;
  bool conditional() const { return expected.has_value() || if_absent; }
};

// Who reads: the fence group the reader's epochs count in (its
// data-parallel domain with recovery by domain, else 0) and the epoch it
// acts in. Epoch 0: not fenced (the daemon itself, unit tests).
struct KvReader {
  uint32_t group = 0;
  uint64_t epoch = 0;
};

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = kMaxKvKeyBytes;
  static constexpr size_t kMaxValueBytes = kMaxKvValueBytes;
  // The creator of a key set for no rank (callers that act for no rank,
  // such as unit tests): it counts toward max_keys and max_bytes only. The
  // coordinator always passes the calling rank.
  static constexpr uint32_t kNoRank = UINT32_MAX;

  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;

  // `timer` must outlive the store.
  explicit KvStore(DeadlineTimer* timer, KvLimits limits = {},
                   KvRules rules = {});

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
  // Set as `rank`, under the key's owner rules and `condition`: true when
  // stored, false when the condition did not hold (nothing stored).
  // PermissionDenied naming the rank, the key and the rule when `rank` may
  // not write the key; InvalidArgument for an "r<N>/" key naming no rank
  // of the job; EndEpoch's `why` when `writer`'s epoch has ended (checked
  // with the write, so a writer admitted just before a loss cannot land
  // after it); otherwise as Set.
  absl::StatusOr<bool> SetAs(absl::string_view key, absl::string_view value,
                             uint32_t rank, const KvCondition& condition = {},
                             KvReader writer = {});

  // Calls `done` with the value once `key` exists (at once if it does), or
  // with DeadlineExceeded naming the key at `deadline`, or with the failure
  // cause if the store fails first, or with Cancelled as soon as
  // `cancellation` (may be null) is cancelled, or with EndEpoch's `why`
  // once `reader`'s epoch has ended (at once if it has: before the value,
  // which may be the next epoch's). `done` runs exactly once, possibly on
  // the calling thread, without the store's lock held. The store must
  // outlive `cancellation`'s last Cancel().
  void Get(absl::string_view key, absl::Time deadline, GetCallback done,
           const CancellationRef& cancellation = nullptr, KvReader reader = {});

  // The gets an EndEpoch ended, answered by Send (once, without any lock
  // the callbacks' owner takes). Move-only; dropping it unsent loses the
  // answers, so the caller always sends.
  class EndedGets {
   public:
    EndedGets() = default;
    EndedGets(EndedGets&&) = default;
    EndedGets& operator=(EndedGets&&) = default;
    void Send();
    size_t size() const { return done_.size(); }

   private:
    friend class KvStore;
    std::vector<GetCallback> done_;
    absl::Status why_;
  };
  // Epoch `epoch` of fence group `group` (and every earlier one of it)
  // ended: takes every get waiting from a reader of such an epoch (their
  // timers cancelled) to be answered with `why` (an error) by the returned
  // EndedGets, and answers every later get of such a reader with `why` at
  // once. A group's ended epochs only grow: ending one at or below the last
  // ended takes the gets of nothing more. Safe under the caller's own lock
  // (it runs no callback), so that the caller can end an epoch in the same
  // step that moves its readers to the next one. Nothing after Fail.
  [[nodiscard]] EndedGets EndEpoch(uint32_t group, uint64_t epoch,
                                   absl::Status why);

  // Blocking Gets waiting now.
  size_t waiting() const;

  // Current value, without waiting.
  std::optional<std::string> Peek(absl::string_view key) const;

  // Adds `delta` to the decimal int64 counter at `key` (absent = 0) and
  // returns the new value. FailedPrecondition if the key holds something
  // that is not a decimal int64; OutOfRange on overflow; ResourceExhausted
  // as for Set (a new counter counts against `rank`); PermissionDenied when
  // `rank` may not write the key; EndEpoch's `why` as for SetAs.
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta,
                              uint32_t rank = kNoRank, KvReader writer = {});

  // Removes `key` (its creator's count drops); returns whether it existed.
  // With `expected`, only when the key holds it (false otherwise).
  // PermissionDenied when `rank` may not delete the key; EndEpoch's `why`
  // as for SetAs.
  absl::StatusOr<bool> Delete(
      absl::string_view key, uint32_t rank = kNoRank,
      const std::optional<std::string>& expected = std::nullopt,
      KvReader writer = {});

  // The number of keys that start with `prefix` (an empty prefix: every
  // key). InvalidArgument for a prefix longer than a key may be; the
  // failure cause when Fail was called. Takes time linear in the keys
  // counted (at most max_keys), under the store's lock; constant for the
  // empty prefix.
  absl::StatusOr<uint64_t> Count(absl::string_view prefix) const;

  // Removes every key that starts with `prefix` (a non-empty prefix; their
  // creators' counts drop) and ends every Get waiting for such a key with
  // `why`, outside the store's lock. Returns how many keys it removed.
  // Linear in the keys removed and the gets ended. Nothing after Fail.
  size_t DropPrefix(absl::string_view prefix, const absl::Status& why);

  // Fails every waiting Get and every later operation with `cause`.
  void Fail(absl::Status cause);

  size_t size() const;
  // Keys `rank` created that still exist.
  size_t keys_of(uint32_t rank) const;
  // Bytes of keys and values charged to `rank`.
  size_t bytes_of(uint32_t rank) const;

 private:
  struct Entry {
    std::string value;
    // The rank the key and its bytes count against: its creator, or the
    // last rank that wrote a shared key.
    uint32_t creator = kNoRank;
  };
  enum class Write { kSet, kAdd, kDelete };
  // Waiting gets by key (id of each), so that a write finds its key's
  // waiters without walking every waiting get.
  using WaitersByKey = std::multimap<std::string, uint64_t, std::less<>>;
  struct Waiter {
    std::string key;
    GetCallback done;
    DeadlineTimer::TimerId timer = 0;
    KvReader reader;
    WaitersByKey::iterator by_key;  // its entry in waiters_by_key_
  };
  // The last epoch EndEpoch ended in a fence group, and why.
  struct EndedEpoch {
    uint64_t epoch = 0;
    absl::Status why;
  };
  // Why `reader`'s epoch ended; nullopt while it has not (or for an
  // unfenced reader).
  std::optional<absl::Status> EndedLocked(const KvReader& reader) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Expire(uint64_t waiter_id, absl::Duration waited);
  // Releases a waiting Get whose caller cancelled it.
  void CancelWait(uint64_t waiter_id);
  // Removes and returns waiter `waiter_id`, if it still waits.
  std::optional<Waiter> TakeWaiter(uint64_t waiter_id);
  // Removes waiter `it` (and its entry by key); returns the next one.
  std::map<uint64_t, Waiter>::iterator EraseWaiterLocked(
      std::map<uint64_t, Waiter>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `key` to `value` within limits_, a new key counting against
  // `rank`.
  absl::Status StoreLocked(absl::string_view key, std::string value,
                           uint32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `rank` may `write` `key` (with `conditional`: an expected value
  // or create-only), whose entry is `existing` (null: absent).
  absl::Status CheckOwnerLocked(absl::string_view key, uint32_t rank,
                                Write write, bool conditional,
                                const Entry* existing) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a key's count and bytes from one rank's tally to another's.
  void ChargeLocked(uint32_t rank, int64_t keys, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the Gets waiting for `key` (cancelling their timers) and
  // appends their callbacks to `released`, to be run without the lock.
  void TakeWaitersLocked(absl::string_view key,
                         std::vector<GetCallback>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same for the waiting gets in [first, last) of waiters_by_key_.
  void TakeWaitersLocked(WaitersByKey::iterator first,
                         WaitersByKey::iterator last,
                         std::vector<GetCallback>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DeadlineTimer* const timer_;
  const KvLimits limits_;
  const KvRules rules_;
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Entry, std::less<>> values_ ABSL_GUARDED_BY(mu_);
  // Keys and bytes per charged rank (ranks with none are absent; kNoRank
  // untracked).
  std::map<uint32_t, size_t> keys_of_rank_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, size_t> bytes_of_rank_ ABSL_GUARDED_BY(mu_);
  // Sum of key and value sizes in values_.
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  WaitersByKey waiters_by_key_ ABSL_GUARDED_BY(mu_);
  // By fence group: one entry per data-parallel domain at most.
  std::map<uint32_t, EndedEpoch> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_KV_STORE_H_
