#include "dataplane/gloo/gloo_executor.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/gloo/internal/execution_host.h"

namespace rankd::dataplane::gloo {
namespace {

// Task bodies catch Gloo's exceptions themselves; this catches anything
// else (e.g. std::bad_alloc while staging buffers) so that nothing escapes
// the executor thread.
TaskResult RunTask(const GlooExecutor::Task& task) {
  try {
    return task();
  } catch (const std::exception& e) {
    return TaskResult::Native(absl::InternalError(
        absl::StrCat("gloo backend: unexpected exception: ", e.what())));
  } catch (...) {
    return TaskResult::Native(
        absl::UnknownError("gloo backend: unexpected exception"));
  }
}

}  // namespace

GlooExecutor::GlooExecutor(uint32_t lane)
    : lane_(lane), thread_([this] { Loop(); }) {}

GlooExecutor::~GlooExecutor() {
  Shutdown(absl::CancelledError("gloo backend: the session was destroyed"));
}

void GlooExecutor::Bind(std::weak_ptr<internal::ExecutionHost> host) {
  absl::MutexLock lock(&mu_);
  host_ = std::move(host);
}

absl::StatusOr<std::shared_ptr<GlooCompletion>> GlooExecutor::Submit(
    const char* kind, std::string operation,
    std::vector<std::shared_ptr<const void>> resources, Task task, bool local) {
  std::weak_ptr<internal::ExecutionHost> weak;
  {
    absl::MutexLock lock(&mu_);
    weak = host_;
  }
  std::shared_ptr<internal::ExecutionHost> host = weak.lock();
  if (host == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gloo backend: ", kind, " refused: the executor is shut down"));
  }
  if (absl::Status s = host->Admission(kind); !s.ok()) return s;
  auto op =
      std::make_shared<Operation>(std::move(operation), std::move(resources));
  auto completion = std::make_shared<GlooCompletion>(
      op, host, GlooCompletion::OwnerRef::kWeak, "gloo");
  Item item{std::move(op), std::move(task), std::chrono::steady_clock::now()};
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gloo backend: ", kind, " refused: the executor is shut down"));
    }
    host->Track(item.op);
    if (!local || running_ || !queue_.empty()) {
      queue_.push_back(std::move(item));
      return completion;
    }
    // Nothing ahead of it: run it here. running_ holds later work (and
    // Shutdown's join) back until it finished, as on the executor thread.
    running_ = true;
  }
  RunItem(item, absl::OkStatus(), host);
  absl::MutexLock lock(&mu_);
  running_ = false;
  return completion;
}

bool GlooExecutor::RunIfNext(const std::shared_ptr<Operation>& op) {
  Item item;
  std::shared_ptr<internal::ExecutionHost> host;
  {
    absl::MutexLock lock(&mu_);
    if (running_ || stopping_ || queue_.empty() || queue_.front().op != op) {
      return false;
    }
    item = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    taken_by_waiters_.fetch_add(1, std::memory_order_release);
    host = host_.lock();
  }
  RunItem(item, absl::OkStatus(), host);
  host.reset();
  absl::MutexLock lock(&mu_);
  running_ = false;
  return true;
}

void GlooExecutor::Shutdown(const absl::Status& cause) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      shutdown_cause_ = cause;
    }
  }
  if (thread_.joinable()) thread_.join();
}

bool GlooExecutor::idle() const {
  absl::MutexLock lock(&mu_);
  return queue_.empty() && !running_;
}

bool GlooExecutor::WaitIdle(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && !running_;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void GlooExecutor::RunItem(
    Item& item, const absl::Status& shutdown,
    const std::shared_ptr<internal::ExecutionHost>& host) {
  absl::Status status;
  const std::string& operation = item.op->operation();
  if (!shutdown.ok()) {
    status = absl::Status(
        shutdown.code(),
        absl::StrCat("gloo ", operation, " not run: ", shutdown.message()));
  } else if (host == nullptr) {
    status = absl::CancelledError(
        absl::StrCat("gloo ", operation, " not run: the session is gone"));
  } else {
    status = host->BeforeRun(operation);
    if (status.ok()) {
      TaskResult result = RunTask(item.task);
      status = std::move(result.status);
      if (!status.ok() && result.native_failure) {
        status = host->OnNativeFailure(operation, status, result.explained);
      } else if (!status.ok()) {
        item.op->Refuse(status);
      }
    }
  }
  item.task = nullptr;  // drop the body's references first
  item.op->Finish(status);
  if (host != nullptr) host->WorkFinished();
}

void GlooExecutor::Loop() {
  using Clock = std::chrono::steady_clock;
  // How long fresh work is left to a submitter that waits for it at once
  // (RunIfNext): it is there a microsecond or two after its submission,
  // while this thread, woken by the submission, often gets there first and
  // then costs the waiter a sleep and a wake. Zero on one CPU
  // (HandOffSpin).
  const Clock::duration grace =
      std::chrono::nanoseconds(absl::ToInt64Nanoseconds(HandOffSpin()));
  while (true) {
    Item item;
    absl::Status shutdown;
    std::weak_ptr<internal::ExecutionHost> weak;
    Clock::duration leave_to_waiter = Clock::duration::zero();
    uint64_t taken = 0;
    {
      absl::MutexLock lock(&mu_);
      // Not while local work runs on its submitter's thread: one item at a
      // time, in order.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !running_ && (!queue_.empty() || stopping_);
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      const Clock::duration age = Clock::now() - queue_.front().queued;
      if (!stopping_ && age < grace) {
        leave_to_waiter = grace - age;
        taken = taken_by_waiters_.load(std::memory_order_relaxed);
      } else {
        item = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
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
    RunItem(item, shutdown, weak.lock());
    absl::MutexLock lock(&mu_);
    running_ = false;
  }
}

}  // namespace rankd::dataplane::gloo
