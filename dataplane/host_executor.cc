#include "dataplane/host_executor.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"
#include "dataplane/execution_host.h"

namespace rankd::dataplane {
namespace {

// Task bodies catch their native library's exceptions themselves; this
// catches anything else (e.g. std::bad_alloc while staging buffers) so that
// nothing escapes the executor thread.
TaskResult RunTask(const char* backend, const HostExecutor::Task& task,
                   const std::string& operation) {
  try {
    return task(operation);
  } catch (const std::exception& e) {
    return TaskResult::Native(absl::InternalError(
        absl::StrCat(backend, " backend: unexpected exception: ", e.what())));
  } catch (...) {
    return TaskResult::Native(absl::UnknownError(
        absl::StrCat(backend, " backend: unexpected exception")));
  }
}

// kPromptWait for the steady clock (absl's conversion is an out-of-line
// call, and RunIfNext compares with it every operation).
constexpr std::chrono::microseconds kPromptWaitChrono{100};
static_assert(absl::Microseconds(kPromptWaitChrono.count()) ==
              HostExecutor::kPromptWait);

}  // namespace

HostExecutor::HostExecutor(const char* backend, uint32_t lane)
    : backend_(backend), lane_(lane), thread_([this] { Loop(); }) {}

HostExecutor::~HostExecutor() {
  Shutdown(absl::CancelledError(
      absl::StrCat(backend_, " backend: the session was destroyed")));
}

void HostExecutor::Bind(std::weak_ptr<ExecutionHost> host) {
  absl::MutexLock lock(&mu_);
  host_ = std::move(host);
}

absl::StatusOr<std::shared_ptr<OperationCompletion>> HostExecutor::Submit(
    const char* kind, std::string operation,
    std::vector<std::shared_ptr<const void>> resources, Task task, bool local) {
  std::weak_ptr<ExecutionHost> weak;
  {
    absl::MutexLock lock(&mu_);
    weak = host_;
  }
  std::shared_ptr<ExecutionHost> host = weak.lock();
  if (host == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        backend_, " backend: ", kind, " refused: the executor is shut down"));
  }
  if (absl::Status s = host->Admission(kind); !s.ok()) return s;
  auto op =
      std::make_shared<Operation>(std::move(operation), std::move(resources));
  auto completion = std::make_shared<OperationCompletion>(
      op, host, OperationCompletion::OwnerRef::kWeak, backend_);
  Item item{std::move(op), std::move(task), std::chrono::steady_clock::now()};
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return absl::FailedPreconditionError(absl::StrCat(
          backend_, " backend: ", kind, " refused: the executor is shut down"));
    }
    host->Track(item.op);
    ++submitted_;
    if (!local || running_ || !queue_.empty()) {
      // Held for a caller that waits at once ("Held work" in the header).
      // An executor thread asleep without a deadline still wakes for it,
      // and then looks again within kHeldStartBound.
      item.held = !local && prompt_waiter_;
      item.submitted_held = item.held;
      queue_.push_back(std::move(item));
      NotifyLocked();
      return completion;
    }
    // Nothing ahead of it: run it here. running_ holds later work (and
    // Shutdown's join) back until it finished, as on the executor thread.
    running_ = true;
  }
  RunItem(backend_, item, absl::OkStatus(), host);
  absl::MutexLock lock(&mu_);
  running_ = false;
  NotifyLocked();
  return completion;
}

bool HostExecutor::RunIfNext(const std::shared_ptr<Operation>& op) {
  Item item;
  std::shared_ptr<ExecutionHost> host;
  {
    absl::MutexLock lock(&mu_);
    if (running_ || stopping_ || queue_.empty() || queue_.front().op != op) {
      // The caller will sleep until `op` finished: whatever is queued ahead
      // of it must not wait for a caller.
      if (std::any_of(queue_.begin(), queue_.end(),
                      [&op](const Item& i) { return i.op == op; })) {
        ReleaseHeld(std::chrono::steady_clock::duration::zero());
        NotifyLocked();
      }
      return false;
    }
    item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    waiter_started_ = std::chrono::steady_clock::now();
    // Won against the woken executor thread, or took held work at once.
    prompt_waiter_ = !item.submitted_held ||
                     waiter_started_ - item.queued <= kPromptWaitChrono;
    taken_by_waiters_.fetch_add(1, std::memory_order_release);
    host = host_.lock();
  }
  RunItem(backend_, item, absl::OkStatus(), host);
  host.reset();
  absl::MutexLock lock(&mu_);
  running_ = false;
  NotifyLocked();
  return true;
}

void HostExecutor::StartHeld() {
  absl::MutexLock lock(&mu_);
  ReleaseHeld(std::chrono::steady_clock::duration::zero());
  NotifyLocked();
}

size_t HostExecutor::held() const {
  absl::MutexLock lock(&mu_);
  return std::count_if(queue_.begin(), queue_.end(),
                       [](const Item& i) { return i.held; });
}

bool HostExecutor::FrontReady() const {
  return !running_ && !queue_.empty() && !queue_.front().held;
}

void HostExecutor::ReleaseHeld(std::chrono::steady_clock::duration age) {
  const auto now = std::chrono::steady_clock::now();
  for (Item& i : queue_) {
    if (i.held && now - i.queued >= age) i.held = false;
  }
}

void HostExecutor::Shutdown(const absl::Status& cause) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      shutdown_cause_ = cause;
      NotifyLocked();
    }
  }
  if (thread_.joinable()) thread_.join();
}

bool HostExecutor::idle() const {
  absl::MutexLock lock(&mu_);
  return queue_.empty() && !running_;
}

void HostExecutor::NotifyLocked() {
  bool due = false;
  switch (awaiting_) {
    case Awaiting::kNothing:
      break;
    case Awaiting::kWork:
      due = !running_ && (stopping_ || !queue_.empty());
      break;
    case Awaiting::kEnd:
      due = !running_;
      break;
    case Awaiting::kReady:
      due = stopping_ ? !running_ : FrontReady();
      break;
  }
  if (due) thread_cv_.Signal();
  if (queue_.empty() && !running_) idle_cv_.SignalAll();
}

bool HostExecutor::WaitIdle(absl::Duration timeout) const {
  const absl::Time deadline = MonotonicNow() + timeout;
  absl::MutexLock lock(&mu_);
  while (!queue_.empty() || running_) {
    const absl::Time now = MonotonicNow();
    if (now >= deadline) return false;
    idle_cv_.WaitWithTimeout(&mu_, deadline - now);
  }
  return true;
}

void HostExecutor::RunItem(const char* backend, Item& item,
                           const absl::Status& shutdown,
                           const std::shared_ptr<ExecutionHost>& host) {
  // Everything here but the task (which RunTask guards) may still throw
  // std::bad_alloc while building a message. Escaping, it would end the
  // executor thread's process, or leave a submitter's or waiter's running_
  // set for good (every later operation then waits forever): so the item
  // is finished with the failure instead, and the executor goes on.
  try {
    absl::Status status;
    const std::string& operation = item.op->operation();
    if (!shutdown.ok()) {
      status = absl::Status(shutdown.code(),
                            absl::StrCat(backend, " ", operation,
                                         " not run: ", shutdown.message()));
    } else if (host == nullptr) {
      status = absl::CancelledError(absl::StrCat(
          backend, " ", operation, " not run: the session is gone"));
    } else {
      status = host->BeforeRun(operation);
      if (status.ok()) {
        TaskResult result = RunTask(backend, item.task, operation);
        status = std::move(result.status);
        if (!status.ok() && result.native_failure) {
          status = host->OnNativeFailure(operation, status, result.explained);
        } else if (!status.ok()) {
          item.op->Refuse(status);
        }
      }
    }
    item.task = nullptr;  // drop the body's references first
    item.op->Finish(std::move(status));
    if (host != nullptr) host->WorkFinished();
  } catch (...) {
    // A fixed message: building another could throw again. Finish is a
    // no-op when the throw came after it.
    item.task = nullptr;
    try {
      item.op->Finish(absl::InternalError(
          "host executor: an unexpected exception while running the "
          "operation; it did not complete"));
      if (host != nullptr) host->WorkFinished();
    } catch (...) {
      // Out of memory twice: the operation stays unfinished, and its
      // waiters end at their own deadlines.
    }
  }
}

void HostExecutor::Loop() {
  using Clock = std::chrono::steady_clock;
  // How long fresh work is left to a submitter that waits for it at once
  // (RunIfNext): it is there a microsecond or two after its submission,
  // while this thread, woken by the submission, often gets there first and
  // then costs the waiter a sleep and a wake. Zero on one CPU
  // (HandOffSpin).
  const Clock::duration grace =
      std::chrono::nanoseconds(absl::ToInt64Nanoseconds(HandOffSpin()));
  const Clock::duration held_bound = absl::ToChronoNanoseconds(kHeldStartBound);
  // No work came for a whole kHeldStartBound: sleep without a deadline.
  bool paused = false;
  while (true) {
    Item item;
    absl::Status shutdown;
    std::weak_ptr<ExecutionHost> weak;
    Clock::duration leave_to_waiter = Clock::duration::zero();
    uint64_t taken = 0;
    {
      absl::MutexLock lock(&mu_);
      // Not while work runs on a caller's thread: one item at a time, in
      // order. Held items wait for their callers.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ ? !running_ : FrontReady();
      };
      while (!ready()) {
        const auto held = std::find_if(queue_.begin(), queue_.end(),
                                       [](const Item& i) { return i.held; });
        if (held == queue_.end() && (paused || !prompt_waiter_)) {
          // Nothing held: sleep until work is queued (held or not).
          awaiting_ = Awaiting::kWork;
          while (running_ || (!stopping_ && queue_.empty())) {
            thread_cv_.Wait(&mu_);
          }
          awaiting_ = Awaiting::kNothing;
          paused = false;
          continue;
        }
        const Clock::time_point now = Clock::now();
        if (running_ && now - waiter_started_ >= held_bound) {
          // A caller has been running its work for a while (a large
          // operation): nothing starts before it ends, so sleep until then
          // instead of looking every kHeldStartBound.
          awaiting_ = Awaiting::kEnd;
          while (running_) thread_cv_.Wait(&mu_);
          awaiting_ = Awaiting::kNothing;
          continue;
        }
        // Work is (or will be) held for callers that wait at once: look
        // again when the oldest held item is due, rather than be woken for
        // every submission.
        const Clock::duration due =
            held == queue_.end() ? held_bound
                                 : std::max(held->queued + held_bound - now,
                                            Clock::duration::zero());
        const uint64_t submitted = submitted_;
        const Clock::time_point until = now + due;
        awaiting_ = Awaiting::kReady;
        bool became_ready = ready();
        for (Clock::time_point t = now; !became_ready && t < until;
             t = Clock::now()) {
          thread_cv_.WaitWithTimeout(&mu_, absl::FromChrono(until - t));
          became_ready = ready();
        }
        awaiting_ = Awaiting::kNothing;
        if (became_ready) break;
        // Nobody took what is due: its caller does not wait for it.
        ReleaseHeld(held_bound / 2);
        paused = !running_ && queue_.empty() && submitted_ == submitted;
      }
      if (queue_.empty()) return;  // stopping and drained
      const Clock::duration age = Clock::now() - queue_.front().queued;
      if (!stopping_ && age < grace) {
        leave_to_waiter = grace - age;
        taken = taken_by_waiters_.load(std::memory_order_relaxed);
      } else {
        item = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
        // Nobody waited for it at once: wake this thread for the next one.
        if (!stopping_) prompt_waiter_ = false;
        shutdown = shutdown_cause_;
        weak = host_;
      }
    }
    if (leave_to_waiter > Clock::duration::zero()) {
      // Then look again: gone (run by its waiter), or old enough to take.
      // Yielding: the submitter may be waiting for this very CPU.
      SpinUntil(
          absl::FromChrono(leave_to_waiter),
          [this, taken] {
            return taken_by_waiters_.load(std::memory_order_acquire) != taken;
          },
          SpinMode::kYield);
      continue;
    }
    RunItem(backend_, item, shutdown, weak.lock());
    absl::MutexLock lock(&mu_);
    running_ = false;
    NotifyLocked();
  }
}

}  // namespace rankd::dataplane
