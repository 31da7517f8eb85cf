#include "dataplane/internal/failure_fanout.h"

#include <algorithm>
#include <utility>

namespace rankd::dataplane::internal {

void FailureFanout::Register(Callback callback) {
  Add({std::move(callback), {}, false});
}

void FailureFanout::RegisterOwned(Callback callback,
                                  std::weak_ptr<const void> owner) {
  Add({std::move(callback), std::move(owner), true});
}

void FailureFanout::Add(Registration registration) {
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    if (failure_.ok()) {
      if (registrations_.size() >= prune_at_) {
        registrations_.erase(
            std::remove_if(registrations_.begin(), registrations_.end(),
                           [](const Registration& r) {
                             return r.owned && r.owner.expired();
                           }),
            registrations_.end());
        prune_at_ = std::max(kMinPruneAt, 2 * registrations_.size());
      }
      registrations_.push_back(std::move(registration));
      return;
    }
    failure = failure_;
  }
  // Already failed: at once, outside the lock.
  registration.callback(failure);
}

void FailureFanout::Fire(const absl::Status& status) {
  std::vector<Registration> to_run;
  const std::thread::id self = std::this_thread::get_id();
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || !failure_.ok()) return;
    failure_ = status;
    to_run.swap(registrations_);
    prune_at_ = kMinPruneAt;
    firing_.push_back(self);
  }
  // Taken off `firing_` however the callbacks end (one that throws too),
  // or Close would wait for this thread for good.
  struct Fired {
    FailureFanout& fanout;
    std::thread::id self;
    ~Fired() {
      absl::MutexLock lock(&fanout.mu_);
      fanout.firing_.erase(
          std::find(fanout.firing_.begin(), fanout.firing_.end(), self));
    }
  } fired{*this, self};
  for (Registration& r : to_run) {
    if (r.owned && r.owner.expired()) continue;
    r.callback(status);
  }
}

bool FailureFanout::StartEpoch(uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch <= epoch_) return false;
  epoch_ = epoch;
  failure_ = absl::OkStatus();
  registrations_.clear();
  prune_at_ = kMinPruneAt;
  return true;
}

uint64_t FailureFanout::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

size_t FailureFanout::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_.size();
}

void FailureFanout::Close() {
  const std::thread::id self = std::this_thread::get_id();
  absl::MutexLock lock(&mu_);
  closed_ = true;
  registrations_.clear();
  auto only_this_thread = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::all_of(firing_.begin(), firing_.end(),
                       [&](std::thread::id id) { return id == self; });
  };
  mu_.Await(absl::Condition(&only_this_thread));
}

}  // namespace rankd::dataplane::internal
