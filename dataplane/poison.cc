#include "dataplane/poison.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

absl::Status AsPoisonCause(absl::Status cause) {
  if (cause.code() != absl::StatusCode::kInvalidArgument) return cause;
  return absl::FailedPreconditionError(cause.message());
}

bool PoisonLatch::Poison(absl::Status cause) {
  if (cause.ok()) return false;
  absl::MutexLock lock(&mu_);
  if (!cause_.ok()) return false;
  cause_ = AsPoisonCause(std::move(cause));
  poisoned_.store(true, std::memory_order_release);
  return true;
}

absl::Status PoisonLatch::cause() const {
  absl::MutexLock lock(&mu_);
  return cause_;
}

absl::Status PoisonLatch::Check(const char* backend, const char* what) const {
  if (!poisoned()) return absl::OkStatus();
  absl::Status cause = this->cause();
  return absl::Status(
      cause.code(),
      absl::StrCat(backend, " backend: ", what,
                   " refused: session poisoned by an earlier failure: ",
                   cause.message()));
}

}  // namespace rankd::dataplane
