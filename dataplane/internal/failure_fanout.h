// FailureFanout: one job-failure notice fanned out to every registration of
// a control plane (ClientControlPlane's OnJobFailure), per job epoch.
// Private to dataplane/. Depends on absl.
#ifndef RANKD_DATAPLANE_INTERNAL_FAILURE_FANOUT_H_
#define RANKD_DATAPLANE_INTERNAL_FAILURE_FANOUT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace rankd::dataplane::internal {

// Thread-safe. Shared (std::shared_ptr) with whatever notifies it, which may
// outlive its owner: Close() ends it.
class FailureFanout {
 public:
  using Callback = std::function<void(const absl::Status&)>;

  explicit FailureFanout(uint64_t epoch) : epoch_(epoch) {}

  // Runs `callback` once with the epoch's failure: at once, on this thread
  // and outside the lock, when the epoch failed already; else from the
  // thread that calls Fire. Nothing after Close.
  void Register(Callback callback);
  // Register, for a callback that does nothing once `owner` is gone: it is
  // dropped then (and never runs), so that a process that opens and closes
  // sessions in one healthy epoch keeps no registration per closed one.
  // Registrations stay within twice the live ones (or 64).
  void RegisterOwned(Callback callback, std::weak_ptr<const void> owner);

  // The epoch's failure: runs every registration once, on this thread,
  // outside the lock, unless the epoch failed already or Close ran.
  void Fire(const absl::Status& status);

  // A later epoch: its failure starts afresh, and the ended epoch's
  // registrations (which ran with its failure) are dropped. Returns false,
  // changing nothing, unless `epoch` is past the current one.
  bool StartEpoch(uint64_t epoch);

  uint64_t epoch() const;
  // Registrations waiting for the epoch's failure (for tests).
  size_t registrations() const;

  // No callback runs after this returns, except on this thread (a callback
  // that closes the control plane cannot wait for itself).
  void Close();

 private:
  struct Registration {
    Callback callback;
    std::weak_ptr<const void> owner;
    bool owned = false;
  };

  void Add(Registration registration);

  mutable absl::Mutex mu_;
  std::vector<Registration> registrations_ ABSL_GUARDED_BY(mu_);
  // Registrations at which those of owners gone are dropped next (at
  // least kMinPruneAt, twice the registrations kept by the last pruning).
  static constexpr size_t kMinPruneAt = 64;
  size_t prune_at_ ABSL_GUARDED_BY(mu_) = kMinPruneAt;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // The job epoch `failure_` and `registrations_` belong to.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_);
  // Threads running callbacks now (one per Fire in progress).
  std::vector<std::thread::id> firing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd::dataplane::internal

#endif  // RANKD_DATAPLANE_INTERNAL_FAILURE_FANOUT_H_
