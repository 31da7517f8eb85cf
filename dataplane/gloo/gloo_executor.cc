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
    std::vector<std::shared_ptr<const void>> resources, Task task) {
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
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gloo backend: ", kind, " refused: the executor is shut down"));
  }
  host->Track(op);
  queue_.push_back(Item{std::move(op), std::move(task)});
  return completion;
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

void GlooExecutor::Loop() {
  while (true) {
    Item item;
    absl::Status shutdown;
    std::weak_ptr<internal::ExecutionHost> weak;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      shutdown = shutdown_cause_;
      weak = host_;
    }
    absl::Status status;
    const std::string& operation = item.op->operation();
    {
      std::shared_ptr<internal::ExecutionHost> host = weak.lock();
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
    absl::MutexLock lock(&mu_);
    running_ = false;
  }
}

}  // namespace rankd::dataplane::gloo
