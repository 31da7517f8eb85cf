#include "dataplane/quarantine.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

Quarantine::Quarantine(absl::Duration poll_interval)
    : poll_interval_(poll_interval) {}

Quarantine::~Quarantine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    nudged_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
}

void Quarantine::Admit(std::shared_ptr<const Completion> completion,
                       std::vector<std::shared_ptr<const void>> resources,
                       std::string description) {
  absl::MutexLock lock(&mu_);
  items_.push_back(Item{std::move(completion), std::move(resources),
                        std::move(description)});
  held_.store(items_.size(), std::memory_order_release);
  ++admitted_;
  nudged_ = true;
  if (!reaper_.joinable()) reaper_ = std::thread([this] { ReaperLoop(); });
}

void Quarantine::Notify() {
  // Nothing quarantined: nothing for the reaper to look at (an Admit that
  // races with this nudges it itself).
  if (held_.load(std::memory_order_acquire) == 0) return;
  absl::MutexLock lock(&mu_);
  nudged_ = true;
}

size_t Quarantine::size() const {
  absl::MutexLock lock(&mu_);
  return items_.size();
}

size_t Quarantine::admitted() const {
  absl::MutexLock lock(&mu_);
  return admitted_;
}

absl::Status Quarantine::Fence(const char* backend) const {
  // Every admission asks, and almost always nothing is quarantined.
  if (held_.load(std::memory_order_acquire) == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (items_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(backend, " backend: ", items_.size(),
                   " operation(s) quarantined after a missed deadline (first: ",
                   items_.front().description,
                   "); the communicator refuses new work until they complete"));
}

bool Quarantine::WaitUntilEmpty(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return items_.empty();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
}

size_t Quarantine::Abandon() {
  std::vector<Item> items;
  {
    absl::MutexLock lock(&mu_);
    items.swap(items_);
    held_.store(0, std::memory_order_release);
  }
  size_t abandoned = 0;
  for (Item& item : items) {
    if (item.completion->IsComplete()) continue;  // released below
    // Deliberately leaked: the work may still use these.
    new std::vector<std::shared_ptr<const void>>(std::move(item.resources));
    new std::shared_ptr<const Completion>(std::move(item.completion));
    ++abandoned;
  }
  return abandoned;
}

void Quarantine::ReaperLoop() {
  while (true) {
    // Completions are polled without the lock (polling may be slow: an
    // NCCL operation verifies its agreement record when it finishes), so
    // Admit never waits behind it.
    std::vector<std::shared_ptr<const Completion>> polled;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&nudged_), poll_interval_);
      nudged_ = false;
      stopping = stopping_;
      for (const Item& item : items_) polled.push_back(item.completion);
    }
    absl::flat_hash_set<const Completion*> finished;
    for (const auto& completion : polled) {
      if (completion->IsComplete()) finished.insert(completion.get());
    }
    std::vector<Item> done;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = items_.begin(); it != items_.end();) {
        if (finished.contains(it->completion.get())) {
          done.push_back(std::move(*it));
          it = items_.erase(it);
        } else {
          ++it;
        }
      }
      held_.store(items_.size(), std::memory_order_release);
      if (stopping && items_.empty() && done.empty()) return;
    }
    // Release outside the lock: resources first, then the completion.
    for (Item& item : done) {
      item.resources.clear();
      item.completion.reset();
    }
  }
}

}  // namespace rankd::dataplane
