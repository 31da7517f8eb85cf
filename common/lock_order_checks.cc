#include "common/lock_order_checks.h"

#include <cstdlib>
#include <cstring>

#include "absl/base/call_once.h"
#include "absl/synchronization/mutex.h"

namespace rankd {

void UseReleaseLockOrderChecks() {
#ifdef NDEBUG
  static absl::once_flag once;
  absl::call_once(once, [] {
    const char* keep = std::getenv(kLockOrderChecksEnvVar);
    if (keep != nullptr && std::strcmp(keep, "keep") == 0) return;
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  });
#endif
}

}  // namespace rankd
