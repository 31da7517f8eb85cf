#include "dataplane/nccl/nccl_completion.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rankd::dataplane::nccl {

NcclOp::NcclOp(std::string operation, std::shared_ptr<CudaEvent> event,
               std::vector<std::shared_ptr<const void>> retained)
    : operation_(std::move(operation)),
      event_(std::move(event)),
      retained_(std::move(retained)) {}

std::shared_ptr<NcclOp> NcclOp::Pending(
    std::string operation, std::shared_ptr<CudaEvent> event,
    std::vector<std::shared_ptr<const void>> retained) {
  auto op = std::make_shared<NcclOp>(std::move(operation), std::move(event),
                                     std::move(retained));
  absl::MutexLock lock(&op->mu_);
  op->recorded_ = false;
  return op;
}

void NcclOp::MarkRecorded() {
  absl::MutexLock lock(&mu_);
  recorded_ = true;
}

void NcclOp::SetVerifier(std::function<absl::Status()> verify) {
  absl::MutexLock lock(&mu_);
  verify_ = std::move(verify);
}

void NcclOp::Refuse(absl::Status refusal) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return;
  status_ = std::move(refusal);
  refused_ = true;
}

bool NcclOp::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

bool NcclOp::Done() {
  absl::MutexLock lock(&mu_);
  if (done_) return true;
  if (event_ == nullptr || !recorded_) return false;
  absl::StatusOr<bool> finished = event_->Query();
  if (!finished.ok()) {
    done_ = true;
    if (status_.ok()) {
      status_ = absl::Status(
          finished.status().code(),
          absl::StrCat("nccl backend: ", operation_,
                       " failed on the device: ", finished.status().message()));
    }
    return true;
  }
  if (*finished) FinishLocked();
  return done_;
}

void NcclOp::FinishLocked() {
  done_ = true;
  if (verify_ && status_.ok()) status_ = verify_();
  verify_ = nullptr;
}

absl::Status NcclOp::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void NcclOp::FailIfRunning(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  if (event_ != nullptr && recorded_) {
    absl::StatusOr<bool> finished = event_->Query();
    if (finished.ok() && *finished) {
      FinishLocked();  // finished work is still verified
      return;
    }
  }
  if (status_.ok()) {
    status_ = cause.ok() ? absl::AbortedError(absl::StrCat(
                               "nccl backend: ", operation_, " was aborted"))
                         : cause;
  }
}

void NcclOp::ReleaseIfDone() {
  std::vector<std::shared_ptr<const void>> released;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) return;
    released.swap(retained_);
  }
  // Destructors (stream-ordered frees) run here, outside the lock.
}

void NcclOp::Abandon() {
  absl::MutexLock lock(&mu_);
  if (retained_.empty()) return;
  // Deliberately leaked: the GPU may still use these buffers.
  new std::vector<std::shared_ptr<const void>>(std::move(retained_));
  retained_.clear();
}

namespace {

// An operation as the Completion a Quarantine polls.
class OpFinished final : public Completion {
 public:
  explicit OpFinished(std::shared_ptr<NcclOp> op) : op_(std::move(op)) {}
  bool IsComplete() const override { return op_->Done(); }
  absl::Status Wait() override {
    while (!op_->Done()) absl::SleepFor(absl::Milliseconds(1));
    return op_->status();
  }

 private:
  const std::shared_ptr<NcclOp> op_;
};

}  // namespace

void NcclOp::QuarantineIn(Quarantine& quarantine) {
  std::vector<std::shared_ptr<const void>> held;
  {
    absl::MutexLock lock(&mu_);
    if (quarantined_) return;
    quarantined_ = true;
    held.swap(retained_);
  }
  quarantine.Admit(std::make_shared<OpFinished>(shared_from_this()),
                   std::move(held), operation_);
}

namespace {

// Owner of session-less operations. Leaked singleton; its quarantine's
// reaper thread starts on first use.
class LocalOwner final : public NcclOpOwner {
 public:
  absl::Status PoisonStatus() const override { return absl::OkStatus(); }
  void Poison(const absl::Status&) override {}
  bool SupportsNativeCancel() const override { return false; }
  void CancelNative(const absl::Status&) override {}
  void Quarantine(std::shared_ptr<NcclOp> op) override {
    op->QuarantineIn(quarantine_);
  }
  absl::Duration AbortGrace() const override { return absl::ZeroDuration(); }

 private:
  dataplane::Quarantine quarantine_{absl::Milliseconds(20)};
};

}  // namespace

std::shared_ptr<NcclOpOwner> LocalOpOwner() {
  static auto* owner =
      new std::shared_ptr<NcclOpOwner>(std::make_shared<LocalOwner>());
  return *owner;
}

NcclCompletion::NcclCompletion(std::shared_ptr<NcclOp> op,
                               std::shared_ptr<NcclOpOwner> owner)
    : op_(std::move(op)), owner_(std::move(owner)) {}

NcclCompletion::~NcclCompletion() {
  if (!op_->Done()) owner_->Quarantine(op_);
}

bool NcclCompletion::Poll() const {
  if (!op_->Done()) return false;
  // Finished work needs nothing it retained: released here, in the thread
  // that asked (never the watchdog, which holds locks), so a loop's scratch
  // and agreement buffers are back in their pools when Wait returns.
  op_->ReleaseIfDone();
  absl::Status status = op_->status();
  if (!status.ok() && !op_->refused()) owner_->Poison(status);
  return true;
}

bool NcclCompletion::IsComplete() const { return Poll(); }

absl::Status NcclCompletion::Wait() {
  absl::Duration sleep = absl::Microseconds(5);
  while (!Poll()) {
    absl::SleepFor(sleep);
    sleep = std::min(sleep * 2, absl::Milliseconds(1));
  }
  return op_->status();
}

bool NcclCompletion::SupportsCancellation(CancellationMode mode) const {
  switch (mode) {
    case CancellationMode::kNativeCancel:
      return owner_->SupportsNativeCancel();
    case CancellationMode::kQuarantineUntilComplete:
      return true;
  }
  return false;
}

absl::StatusOr<WaitOutcome> NcclCompletion::WaitBounded(absl::Duration timeout,
                                                        CancellationMode mode) {
  absl::Status valid = CheckBoundedWait(*this, timeout, mode, "nccl");
  if (!valid.ok()) return valid;
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration sleep = absl::Microseconds(5);
  while (!Poll()) {
    absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::SleepFor(std::min(sleep, deadline - now));
    sleep = std::min(sleep * 2, absl::Milliseconds(1));
  }
  if (Poll()) {
    absl::Status status = op_->status();
    if (!status.ok()) return status;
    return WaitOutcome::Completed();
  }
  const absl::Status cause = absl::DeadlineExceededError(absl::StrCat(
      "nccl backend: ", op_->operation(), " did not complete within ",
      absl::FormatDuration(timeout), "; ",
      mode == CancellationMode::kNativeCancel
          ? "the session's communicators were aborted (NativeCancel)"
          : "its work was quarantined until it completes "
            "(QuarantineUntilComplete)",
      " and the session is poisoned"));
  if (mode == CancellationMode::kNativeCancel) {
    owner_->CancelNative(cause);
    const absl::Time grace_end = absl::Now() + owner_->AbortGrace();
    while (!op_->Done() && absl::Now() < grace_end) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    op_->FailIfRunning(cause);
    if (!op_->Done()) owner_->Quarantine(op_);
  } else {
    owner_->Poison(cause);
    op_->FailIfRunning(cause);
    owner_->Quarantine(op_);
  }
  return WaitOutcome::DeadlineExceeded(mode);
}

}  // namespace rankd::dataplane::nccl
