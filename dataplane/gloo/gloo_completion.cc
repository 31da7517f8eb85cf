#include "dataplane/gloo/gloo_completion.h"

#include <utility>

namespace rankd::dataplane::gloo {

GlooCompletion::GlooCompletion(
    std::string operation, std::weak_ptr<ExecutionHost> host,
    std::vector<std::shared_ptr<const void>> resources)
    : operation_(std::move(operation)),
      host_(std::move(host)),
      resources_(std::move(resources)) {}

bool GlooCompletion::IsComplete() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

absl::Status GlooCompletion::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

bool GlooCompletion::WaitFor(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
}

size_t GlooCompletion::retained() const {
  absl::MutexLock lock(&mu_);
  return resources_.size();
}

bool GlooCompletion::SupportsCancellation(CancellationMode mode) const {
  auto host = host_.lock();
  // Without a host the work has already finished (the executor finishes
  // everything before its communicator goes away): nothing to cancel, and
  // any mode is trivially honoured.
  return host == nullptr || host->SupportsCancellation(mode);
}

absl::StatusOr<WaitOutcome> GlooCompletion::WaitBounded(absl::Duration timeout,
                                                        CancellationMode mode) {
  if (absl::Status s = CheckBoundedWait(*this, timeout, mode, "gloo");
      !s.ok()) {
    return s;
  }
  if (!WaitFor(timeout)) {
    std::shared_ptr<ExecutionHost> host = host_.lock();
    if (host != nullptr) {
      auto applied = host->ApplyCancellation(shared_from_this(), mode, timeout);
      if (!applied.ok()) return applied.status();
      if (*applied) return WaitOutcome::DeadlineExceeded(mode);
    }
    // Completed in the meantime (or the host is gone, which happens only
    // after every piece of work finished).
    Wait().IgnoreError();
  }
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  return WaitOutcome::Completed();
}

void GlooCompletion::Finish(absl::Status status) {
  // The native work is over, so the resources may go. They go before the
  // completion is marked done (outside the lock): a waiter that drops its
  // own references and allocates again must find the buffers back in the
  // pool (host_buffer_pool.h), not still held here.
  std::vector<std::shared_ptr<const void>> release;
  {
    absl::MutexLock lock(&mu_);
    if (finishing_ || done_) return;
    finishing_ = true;
    release.swap(resources_);
  }
  release.clear();
  absl::MutexLock lock(&mu_);
  done_ = true;
  status_ = std::move(status);
}

std::vector<std::shared_ptr<const void>> GlooCompletion::TakeResources() {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<const void>> out;
  out.swap(resources_);
  return out;
}

}  // namespace rankd::dataplane::gloo
