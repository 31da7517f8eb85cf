// KvStore: the job's key-value broker (set, blocking get with deadline, add,
// delete), used for NCCL unique ids and Gloo rendezvous.
//
// One store belongs to one job incarnation on the coordinator, so keys are
// namespaced per job and incarnation by construction. Thread-safe. Depends
// on DeadlineTimer and absl.
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
#include "daemon/call_cancellation.h"
#include "daemon/deadline_timer.h"

namespace rankd {

class KvStore {
 public:
  static constexpr size_t kMaxKeyBytes = 512;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  static constexpr size_t kMaxKeys = 1 << 16;
  // Keys and values together: what one job can make the coordinator hold.
  static constexpr size_t kMaxTotalBytes = 256 << 20;

  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;

  // `timer` must outlive the store.
  explicit KvStore(DeadlineTimer* timer);

  // InvalidArgument for an empty or oversized key or an oversized value.
  static absl::Status ValidateKey(absl::string_view key);
  static absl::Status ValidateValue(absl::string_view value);

  // Stores `value`, releasing every Get waiting for `key`.
  // ResourceExhausted when the store would hold more than kMaxKeys keys or
  // kMaxTotalBytes bytes; the failure cause when Fail was called.
  absl::Status Set(absl::string_view key, absl::string_view value);

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
  // as for Set.
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta);

  // Removes `key`; returns whether it existed.
  absl::StatusOr<bool> Delete(absl::string_view key);

  // Fails every waiting Get and every later operation with `cause`.
  void Fail(absl::Status cause);

  size_t size() const;

 private:
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
  // Sets `key` to `value` within kMaxKeys and kMaxTotalBytes.
  absl::Status StoreLocked(absl::string_view key, std::string value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the Gets waiting for `key` (cancelling their timers) and
  // appends their callbacks to `released`, to be run without the lock.
  void TakeWaitersLocked(absl::string_view key,
                         std::vector<GetCallback>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DeadlineTimer* const timer_;
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> values_ ABSL_GUARDED_BY(mu_);
  // Sum of key and value sizes in values_.
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_KV_STORE_H_
