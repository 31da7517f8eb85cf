#include "dataplane/operation.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"

namespace rankd::dataplane {
namespace {

// How often a waiter asks a probe: soon at first (most work is short),
// then at most every millisecond.
constexpr absl::Duration kFirstProbe = absl::Microseconds(5);
constexpr absl::Duration kLongestProbe = absl::Milliseconds(1);

// An operation as the Completion a Quarantine polls.
class OperationFinished final : public Completion {
 public:
  explicit OperationFinished(std::shared_ptr<Operation> op)
      : op_(std::move(op)) {}
  bool IsComplete() const override { return op_->Done(); }
  absl::Status Wait() override { return op_->Wait(); }

 private:
  const std::shared_ptr<Operation> op_;
};

// One poll's pause: lets a sibling hyperthread run.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

absl::Duration ComputeHandOffSpin() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int usable = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                         ? CPU_COUNT(&cpus)
                         : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return usable >= 2 ? absl::Microseconds(30) : absl::ZeroDuration();
}

}  // namespace

absl::Duration HandOffSpin() {
  static const absl::Duration spin = ComputeHandOffSpin();
  return spin;
}

bool SpinUntil(absl::Duration spin, const std::function<bool()>& ready,
               SpinMode mode) {
  if (ready()) return true;
  if (spin <= absl::ZeroDuration()) return false;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until =
      Clock::now() + std::chrono::nanoseconds(absl::ToInt64Nanoseconds(spin));
  while (Clock::now() < until) {
    if (mode == SpinMode::kYield) {
      sched_yield();
      if (ready()) return true;
      continue;
    }
    // The clock is read every 32 polls: a poll is a load, a clock read
    // tens of nanoseconds.
    for (int i = 0; i < 32; ++i) {
      CpuRelax();
      if (ready()) return true;
    }
  }
  return false;
}

Operation::Operation(std::string operation,
                     std::vector<std::shared_ptr<const void>> retained,
                     Probe probe)
    : operation_(std::move(operation)),
      probe_(std::move(probe)),
      retained_(std::move(retained)) {}

std::shared_ptr<Operation> Operation::Pending(
    std::string operation, std::vector<std::shared_ptr<const void>> retained,
    Probe probe) {
  auto op = std::make_shared<Operation>(std::move(operation),
                                        std::move(retained), std::move(probe));
  absl::MutexLock lock(&op->mu_);
  op->queued_ = false;
  return op;
}

void Operation::MarkQueued() {
  absl::MutexLock lock(&mu_);
  queued_ = true;
}

void Operation::SetVerifier(std::function<absl::Status()> verify) {
  absl::MutexLock lock(&mu_);
  verify_ = std::move(verify);
}

void Operation::Refuse(absl::Status refusal) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok() || done_ || finishing_) return;
  status_ = std::move(refusal);
  refused_ = true;
}

bool Operation::refused() const {
  if (finished_.load(std::memory_order_acquire)) return final_refused();
  absl::MutexLock lock(&mu_);
  return refused_;
}

void Operation::Finish(absl::Status status) {
  std::vector<std::shared_ptr<const void>> release;
  {
    absl::MutexLock lock(&mu_);
    if (finishing_ || done_) return;
    finishing_ = true;
    release.swap(retained_);
  }
  release.clear();
  absl::MutexLock lock(&mu_);
  if (status_.ok()) status_ = std::move(status);
  FinishLocked();
}

void Operation::FinishLocked() {
  done_ = true;
  if (verify_ && status_.ok()) status_ = verify_();
  verify_ = nullptr;
  finished_.store(true, std::memory_order_release);
}

void Operation::ProbeLocked() {
  if (done_ || probe_ == nullptr || !queued_) return;
  absl::StatusOr<bool> finished = probe_();
  if (!finished.ok()) {
    done_ = true;
    verify_ = nullptr;
    // A device error outranks a refusal (a partly refused batch still moved
    // the transfers that agreed): the session is broken, so it poisons.
    if (status_.ok() || refused_) status_ = finished.status();
    refused_ = false;
    finished_.store(true, std::memory_order_release);
    return;
  }
  if (*finished) FinishLocked();
}

bool Operation::Done() {
  if (finished_.load(std::memory_order_acquire)) return true;
  absl::MutexLock lock(&mu_);
  ProbeLocked();
  return done_;
}

absl::Status Operation::status() const {
  if (finished_.load(std::memory_order_acquire)) return final_status();
  absl::MutexLock lock(&mu_);
  return status_;
}

bool Operation::WaitFor(absl::Duration timeout) {
  if (probe_ == nullptr) {
    // Pushed: poll briefly first, so that work finishing soon (most work
    // of a few microseconds) wakes no sleeping waiter.
    if (SpinUntil(std::min(timeout, HandOffSpin()), [this] {
          return finished_.load(std::memory_order_acquire);
        })) {
      return true;
    }
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
  }
  const absl::Time deadline = MonotonicNow() + timeout;
  absl::Duration sleep = kFirstProbe;
  while (!Done()) {
    const absl::Time now = MonotonicNow();
    if (now >= deadline) return false;
    absl::SleepFor(std::min(sleep, deadline - now));
    sleep = std::min(sleep * 2, kLongestProbe);
  }
  return true;
}

absl::Status Operation::Wait() {
  WaitFor(absl::InfiniteDuration());
  return status();
}

void Operation::FailIfRunning(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  ProbeLocked();  // finished work is still verified
  if (done_ || finishing_) return;
  if (status_.ok()) {
    status_ = cause.ok()
                  ? absl::AbortedError(absl::StrCat(operation_, " was aborted"))
                  : cause;
  }
}

void Operation::ReleaseIfDone() {
  std::vector<std::shared_ptr<const void>> released;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) return;
    released.swap(retained_);
  }
  // Destructors (say, stream-ordered frees) run here, outside the lock.
}

size_t Operation::retained() const {
  absl::MutexLock lock(&mu_);
  return retained_.size();
}

void Operation::QuarantineIn(Quarantine& quarantine) {
  std::vector<std::shared_ptr<const void>> held;
  {
    absl::MutexLock lock(&mu_);
    if (quarantined_) return;
    quarantined_ = true;
    held.swap(retained_);
  }
  quarantine.Admit(std::make_shared<OperationFinished>(shared_from_this()),
                   std::move(held), operation_);
}

void Operation::Abandon() {
  absl::MutexLock lock(&mu_);
  if (retained_.empty()) return;
  // Deliberately leaked: a device may still use these buffers.
  new std::vector<std::shared_ptr<const void>>(std::move(retained_));
  retained_.clear();
}

OperationCompletion::OperationCompletion(
    std::shared_ptr<Operation> op, const std::shared_ptr<OperationOwner>& owner,
    OwnerRef ref, const char* backend)
    : op_(std::move(op)),
      shared_owner_(ref == OwnerRef::kShared ? owner : nullptr),
      weak_owner_(owner),
      backend_(backend) {}

OperationCompletion::~OperationCompletion() {
  if (op_->Done()) return;
  if (std::shared_ptr<OperationOwner> owner = Owner()) owner->Unattended(op_);
}

std::shared_ptr<OperationOwner> OperationCompletion::Owner() const {
  if (shared_owner_ != nullptr) return shared_owner_;
  return weak_owner_.lock();
}

bool OperationCompletion::Settle() const {
  if (!op_->Done()) {
    // A poll must not wait for a caller that may never run the work.
    if (std::shared_ptr<OperationOwner> owner = Owner()) owner->StartHeld(op_);
    return false;
  }
  op_->ReleaseIfDone();
  absl::Status status = op_->status();
  if (!status.ok() && !op_->refused()) {
    if (std::shared_ptr<OperationOwner> owner = Owner()) owner->Poison(status);
  }
  return true;
}

bool OperationCompletion::IsComplete() const { return Settle(); }

absl::Status OperationCompletion::Wait() {
  if (!op_->Done()) {
    if (std::shared_ptr<OperationOwner> owner = Owner()) owner->RunIfNext(op_);
  }
  op_->Wait().IgnoreError();
  Settle();
  return op_->status();
}

bool OperationCompletion::WaitFor(absl::Duration timeout) const {
  if (!op_->Done()) {
    if (std::shared_ptr<OperationOwner> owner = Owner()) owner->StartHeld(op_);
  }
  return op_->WaitFor(timeout) && Settle();
}

bool OperationCompletion::SupportsCancellation(CancellationMode mode) const {
  std::shared_ptr<OperationOwner> owner = Owner();
  // Without an owner the work has already finished (kWeak): nothing to
  // cancel, and any mode is trivially honoured.
  return owner == nullptr || owner->SupportsCancellation(mode);
}

absl::StatusOr<WaitOutcome> OperationCompletion::WaitBounded(
    absl::Duration timeout, CancellationMode mode) {
  if (absl::Status s = CheckBoundedWait(*this, timeout, mode, backend_);
      !s.ok()) {
    return s;
  }
  if (!op_->Done()) {
    // A bounded wait never runs the work itself (it could not return at
    // its deadline): the owner's executor must.
    if (std::shared_ptr<OperationOwner> owner = Owner()) owner->StartHeld(op_);
  }
  if (!op_->WaitFor(timeout)) {
    if (std::shared_ptr<OperationOwner> owner = Owner()) {
      absl::StatusOr<bool> applied =
          owner->ApplyCancellation(op_, mode, timeout);
      if (!applied.ok()) return applied.status();
      if (*applied) return WaitOutcome::DeadlineExceeded(mode);
    }
    // Finished in the meantime.
    op_->Wait().IgnoreError();
  }
  Settle();
  absl::Status status = op_->status();
  if (!status.ok()) return status;
  return WaitOutcome::Completed();
}

}  // namespace rankd::dataplane
