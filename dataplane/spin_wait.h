// SpinUntil: polls a condition for a bounded time before the caller goes to
// sleep on it. A thread woken through a futex on an idle core waits tens of
// microseconds for that core to wake; the Gloo executor and a waiter on a
// pushed operation (dataplane/operation.h) poll first, so that work handed
// over within the spin costs no wake-up. Each poll yields the core, so where
// cores are oversubscribed the spin gives way to threads that have work.
//
// Header only. Depends on absl.
#ifndef RANKD_DATAPLANE_SPIN_WAIT_H_
#define RANKD_DATAPLANE_SPIN_WAIT_H_

#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rankd::dataplane {

// Returns true as soon as `done()` is, false once `spin` passed without it
// (at once when `spin` is not positive). `done` must be cheap and safe to
// call from any thread (an atomic load).
template <typename Done>
bool SpinUntil(const Done& done, absl::Duration spin) {
  if (done()) return true;
  if (spin <= absl::ZeroDuration()) return false;
  const absl::Time until = absl::Now() + spin;
  do {
    std::this_thread::yield();
    if (done()) return true;
  } while (absl::Now() < until);
  return false;
}

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SPIN_WAIT_H_
