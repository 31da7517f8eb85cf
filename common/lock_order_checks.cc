#include "common/lock_order_checks.h"

#include "absl/synchronization/mutex.h"

namespace rankd {

void UseReleaseLockOrderChecks() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace rankd
