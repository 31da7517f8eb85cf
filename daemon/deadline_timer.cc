#include "daemon/deadline_timer.h"

#include <utility>

#include "common/monotonic_clock.h"

namespace rankd {

DeadlineTimer::DeadlineTimer() : thread_([this] { Run(); }) {}

DeadlineTimer::~DeadlineTimer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    changed_.notify_one();
  }
  thread_.join();
}

DeadlineTimer::TimerId DeadlineTimer::Schedule(absl::Time when,
                                               std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  TimerId id = next_id_++;
  auto [it, inserted] =
      queue_.emplace(std::make_pair(when, id), std::move(callback));
  when_.emplace(id, when);
  // The thread sleeps until the earliest deadline; only a new earliest one
  // needs to wake it (most do not: each round's deadline is later than the
  // open rounds'), which saves a thread wake-up per round.
  if (it == queue_.begin()) changed_.notify_one();
  return id;
}

bool DeadlineTimer::Cancel(TimerId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  queue_.erase(std::make_pair(it->second, id));
  when_.erase(it);
  return true;
}

void DeadlineTimer::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      changed_.wait(lock);
      continue;
    }
    auto first = queue_.begin();
    if (first->first.first > MonotonicNow()) {
      // Woken early by a new (possibly earlier) timer or by stop.
      changed_.wait_until(lock, ToSteadyTime(first->first.first));
      continue;
    }
    std::function<void()> callback = std::move(first->second);
    when_.erase(first->first.second);
    queue_.erase(first);
    lock.unlock();
    callback();
    lock.lock();
  }
}

}  // namespace rankd
