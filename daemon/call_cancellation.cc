#include "daemon/call_cancellation.h"

#include <utility>

namespace rankd {

void CallCancellation::OnCancel(std::function<void()> release) {
  {
    absl::MutexLock lock(&mu_);
    if (!cancelled_) {
      releases_.push_back(std::move(release));
      return;
    }
  }
  release();
}

void CallCancellation::Cancel() {
  std::vector<std::function<void()>> releases;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    releases.swap(releases_);
  }
  for (auto& release : releases) release();
}

bool CallCancellation::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

}  // namespace rankd
