// PoisonLatch: the "poisoned session" state of the data-plane contract
// (docs/contract.md, Rules for every backend): after a native failure or a
// missed deadline, every later operation fails at once with the original cause
// and submits no native work. The first cause wins and is kept forever.
// Thread-safe. Depends on absl only.
#ifndef RANKD_DATAPLANE_POISON_H_
#define RANKD_DATAPLANE_POISON_H_

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace rankd::dataplane {

// What `cause` answers once it poisons a session. The contract keeps
// InvalidArgument for "refused, the session is still usable"
// (docs/contract.md), so a poisoning InvalidArgument (a disagreement found
// after the payload moved, or by op_timeout's diagnosis) keeps its message
// and becomes FailedPrecondition: the session must be reopened. Any other
// cause is returned as is.
absl::Status AsPoisonCause(absl::Status cause);

class PoisonLatch {
 public:
  PoisonLatch() = default;
  PoisonLatch(const PoisonLatch&) = delete;
  PoisonLatch& operator=(const PoisonLatch&) = delete;

  // Poisons with AsPoisonCause(`cause`) (an error) unless already poisoned.
  // Returns true when this call poisoned. An OK `cause` is ignored (returns
  // false).
  bool Poison(absl::Status cause);

  // True once poisoned. Never blocks on other threads for long.
  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }

  // OK while healthy; the original cause (as AsPoisonCause left it) once
  // poisoned: never InvalidArgument.
  absl::Status cause() const;

  // OK while healthy. Once poisoned, an error with the cause's code whose
  // message says `what` was refused because of the cause, e.g.
  // "gloo backend: all_reduce_sum refused: session poisoned by an earlier
  // failure: <cause>".
  absl::Status Check(const char* backend, const char* what) const;

 private:
  mutable absl::Mutex mu_;
  absl::Status cause_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> poisoned_{false};
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_POISON_H_
