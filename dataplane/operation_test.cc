// Unit tests for dataplane/operation.h: both ways an operation's end is
// reported (pushed, probed), retention until the work finished, outcomes
// (refusal, FailIfRunning, verifier, probe error), and OperationCompletion's
// waits, bounded waits and drops through a recording owner.
#include "dataplane/operation.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

using OwnerRef = OperationCompletion::OwnerRef;

class RecordingOwner final : public OperationOwner {
 public:
  void Poison(const absl::Status& cause) override {
    absl::MutexLock lock(&mu_);
    if (poison_.ok()) poison_ = cause;
  }
  bool SupportsCancellation(CancellationMode mode) const override {
    return mode == CancellationMode::kQuarantineUntilComplete;
  }
  absl::StatusOr<bool> ApplyCancellation(const std::shared_ptr<Operation>& op,
                                         CancellationMode mode,
                                         absl::Duration missed) override {
    absl::MutexLock lock(&mu_);
    ++cancellations_;
    missed_ = missed;
    if (op->Done()) return false;
    return apply_result_;
  }
  void Unattended(const std::shared_ptr<Operation>& op) override {
    absl::MutexLock lock(&mu_);
    unattended_.push_back(op);
  }

  absl::Status poison() const {
    absl::MutexLock lock(&mu_);
    return poison_;
  }
  int cancellations() const {
    absl::MutexLock lock(&mu_);
    return cancellations_;
  }
  absl::Duration missed() const {
    absl::MutexLock lock(&mu_);
    return missed_;
  }
  size_t unattended() const {
    absl::MutexLock lock(&mu_);
    return unattended_.size();
  }
  void set_apply_result(absl::StatusOr<bool> r) {
    absl::MutexLock lock(&mu_);
    apply_result_ = std::move(r);
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status poison_;
  int cancellations_ = 0;
  absl::Duration missed_;
  absl::StatusOr<bool> apply_result_ = true;
  std::vector<std::shared_ptr<Operation>> unattended_;
};

std::vector<std::shared_ptr<const void>> Holding(std::shared_ptr<int> r) {
  return {std::move(r)};
}

TEST(OperationTest, PushedEndReleasesResourcesBeforeItIsDone) {
  auto resource = std::make_shared<int>(7);
  std::weak_ptr<int> watch = resource;
  auto op = std::make_shared<Operation>("all_reduce_sum on world",
                                        Holding(std::move(resource)));
  EXPECT_FALSE(op->Done());
  EXPECT_EQ(op->retained(), 1u);
  EXPECT_FALSE(op->WaitFor(absl::Milliseconds(5)));
  absl::Notification done;
  std::thread waiter([&] {
    EXPECT_TRUE(op->Wait().ok());
    // Released before the waiter was woken.
    EXPECT_TRUE(watch.expired());
    done.Notify();
  });
  op->Finish(absl::OkStatus());
  done.WaitForNotification();
  waiter.join();
  // Only the first Finish counts.
  op->Finish(absl::InternalError("late"));
  EXPECT_TRUE(op->status().ok());
  EXPECT_EQ(op->retained(), 0u);
}

TEST(OperationTest, ProbedOperationIsDoneOnlyOnceQueuedAndTheProbeSaysSo) {
  std::atomic<bool> finished{true};
  auto op = Operation::Pending("send to 1", {}, [&]() -> absl::StatusOr<bool> {
    return finished.load();
  });
  // Not queued yet: the probe does not cover the work.
  EXPECT_FALSE(op->Done());
  op->MarkQueued();
  finished = false;
  EXPECT_FALSE(op->Done());
  finished = true;
  EXPECT_TRUE(op->WaitFor(absl::Seconds(5)));
  EXPECT_TRUE(op->status().ok());
}

TEST(OperationTest, ProbeErrorIsTheOutcome) {
  auto op = std::make_shared<Operation>(
      "all_gather on world", std::vector<std::shared_ptr<const void>>{},
      []() -> absl::StatusOr<bool> {
        return absl::InternalError("device fault");
      });
  EXPECT_TRUE(op->Done());
  EXPECT_EQ(op->status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(op->status().message(), "device fault");
}

TEST(OperationTest, VerifierDecidesTheOutcomeOfFinishedWork) {
  auto op = std::make_shared<Operation>(
      "broadcast on world", std::vector<std::shared_ptr<const void>>{});
  op->SetVerifier(
      [] { return absl::InvalidArgumentError("rank 1 submitted all_gather"); });
  op->Finish(absl::OkStatus());
  EXPECT_EQ(op->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OperationTest, FailIfRunningKeepsTheFirstCauseAndSparesFinishedWork) {
  std::atomic<bool> finished{false};
  auto op = std::make_shared<Operation>(
      "all_reduce_sum on world", std::vector<std::shared_ptr<const void>>{},
      [&]() -> absl::StatusOr<bool> { return finished.load(); });
  op->FailIfRunning(absl::AbortedError("job failed: rank 2 lost"));
  op->FailIfRunning(absl::InternalError("later"));
  EXPECT_FALSE(op->Done());  // failed, but its work has not left yet
  EXPECT_EQ(op->status().code(), absl::StatusCode::kAborted);
  finished = true;
  EXPECT_TRUE(op->Done());
  EXPECT_EQ(op->status().code(), absl::StatusCode::kAborted);

  auto done = std::make_shared<Operation>(
      "barrier on world", std::vector<std::shared_ptr<const void>>{},
      []() -> absl::StatusOr<bool> { return true; });
  done->FailIfRunning(absl::AbortedError("too late"));
  EXPECT_TRUE(done->status().ok());
}

TEST(OperationTest, QuarantineHoldsWhatTheWorkUsesUntilItFinished) {
  auto resource = std::make_shared<int>(1);
  std::weak_ptr<int> watch = resource;
  auto op = std::make_shared<Operation>("receive from 0",
                                        Holding(std::move(resource)));
  Quarantine quarantine(absl::Milliseconds(1));
  op->QuarantineIn(quarantine);
  op->QuarantineIn(quarantine);  // once only
  EXPECT_EQ(quarantine.size(), 1u);
  EXPECT_EQ(op->retained(), 0u);
  EXPECT_FALSE(watch.expired());
  op->Finish(absl::OkStatus());
  quarantine.Notify();
  EXPECT_TRUE(quarantine.WaitUntilEmpty(absl::Seconds(5)));
  // The reaper releases what it took out of the list just after.
  const absl::Time until = MonotonicNow() + absl::Seconds(5);
  while (!watch.expired() && MonotonicNow() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(watch.expired());
}

TEST(OperationCompletionTest, RefusalDoesNotPoisonAnyOtherFailureDoes) {
  auto owner = std::make_shared<RecordingOwner>();
  auto refused = std::make_shared<Operation>(
      "send to 1", std::vector<std::shared_ptr<const void>>{});
  OperationCompletion a(refused, owner, OwnerRef::kShared, "test");
  refused->Refuse(absl::InvalidArgumentError("rank 1 expects i32[4]"));
  refused->Finish(absl::OkStatus());
  EXPECT_EQ(a.Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(owner->poison().ok());

  auto failed = std::make_shared<Operation>(
      "send to 1", std::vector<std::shared_ptr<const void>>{});
  OperationCompletion b(failed, owner, OwnerRef::kShared, "test");
  failed->Finish(absl::UnavailableError("connection reset"));
  EXPECT_TRUE(b.IsComplete());
  EXPECT_EQ(owner->poison().code(), absl::StatusCode::kUnavailable);
}

TEST(OperationCompletionTest, ADeviceErrorAfterARefusalStillPoisons) {
  // A partly refused batch still moves the transfers that agree; when the
  // device then fails, the session is broken whatever was refused.
  auto owner = std::make_shared<RecordingOwner>();
  auto op = std::make_shared<Operation>(
      "batch_send_receive on world", std::vector<std::shared_ptr<const void>>{},
      []() -> absl::StatusOr<bool> {
        return absl::InternalError("device fault");
      });
  op->Refuse(absl::InvalidArgumentError("rank 1 expects i32[4]"));
  OperationCompletion c(op, owner, OwnerRef::kShared, "test");
  EXPECT_EQ(c.Wait().code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(op->refused());
  EXPECT_EQ(owner->poison().code(), absl::StatusCode::kInternal);
}

TEST(OperationCompletionTest, BoundedWaitArgumentsAreCheckedBeforeWaiting) {
  auto owner = std::make_shared<RecordingOwner>();
  auto op = std::make_shared<Operation>(
      "all_reduce_sum on world", std::vector<std::shared_ptr<const void>>{});
  OperationCompletion c(op, owner, OwnerRef::kShared, "test");
  EXPECT_EQ(c.WaitBounded(absl::ZeroDuration(),
                          CancellationMode::kQuarantineUntilComplete)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto unsupported =
      c.WaitBounded(absl::Seconds(10), CancellationMode::kNativeCancel);
  EXPECT_EQ(unsupported.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(unsupported.status().message(), "test"));
  EXPECT_EQ(owner->cancellations(), 0);
  op->Finish(absl::OkStatus());
}

TEST(OperationCompletionTest, MissedDeadlineAppliesTheModeThroughTheOwner) {
  auto owner = std::make_shared<RecordingOwner>();
  auto op = std::make_shared<Operation>(
      "all_reduce_sum on world", std::vector<std::shared_ptr<const void>>{});
  OperationCompletion c(op, owner, OwnerRef::kShared, "test");
  const absl::Time start = MonotonicNow();
  auto outcome = c.WaitBounded(absl::Milliseconds(30),
                               CancellationMode::kQuarantineUntilComplete);
  EXPECT_GE(MonotonicNow() - start, absl::Milliseconds(30));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->completed());
  EXPECT_EQ(outcome->mode(), CancellationMode::kQuarantineUntilComplete);
  EXPECT_EQ(owner->cancellations(), 1);
  EXPECT_EQ(owner->missed(), absl::Milliseconds(30));

  // The owner could not complete the mode: its error, nothing else.
  owner->set_apply_result(absl::InternalError("teardown unconfirmed"));
  EXPECT_EQ(c.WaitBounded(absl::Milliseconds(1),
                          CancellationMode::kQuarantineUntilComplete)
                .status()
                .code(),
            absl::StatusCode::kInternal);
  op->Finish(absl::OkStatus());
  auto completed = c.WaitBounded(absl::Milliseconds(1),
                                 CancellationMode::kQuarantineUntilComplete);
  ASSERT_TRUE(completed.ok());
  EXPECT_TRUE(completed->completed());
}

TEST(OperationCompletionTest, WorkThatFinishesDuringTheCancellationCompletes) {
  auto owner = std::make_shared<RecordingOwner>();
  owner->set_apply_result(false);
  auto op = std::make_shared<Operation>(
      "all_reduce_sum on world", std::vector<std::shared_ptr<const void>>{});
  OperationCompletion c(op, owner, OwnerRef::kShared, "test");
  std::thread finisher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    op->Finish(absl::OkStatus());
  });
  auto outcome = c.WaitBounded(absl::Milliseconds(10),
                               CancellationMode::kQuarantineUntilComplete);
  finisher.join();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(outcome->completed());
}

TEST(OperationCompletionTest, DroppingUnfinishedWorkHandsItToTheOwner) {
  auto owner = std::make_shared<RecordingOwner>();
  auto op = std::make_shared<Operation>(
      "receive from 0", std::vector<std::shared_ptr<const void>>{});
  { OperationCompletion c(op, owner, OwnerRef::kShared, "test"); }
  EXPECT_EQ(owner->unattended(), 1u);
  op->Finish(absl::OkStatus());
  { OperationCompletion c(op, owner, OwnerRef::kShared, "test"); }
  EXPECT_EQ(owner->unattended(), 1u);  // finished work is nobody's concern
}

TEST(OperationCompletionTest, WeakOwnerGoneMeansNothingLeftToCancel) {
  auto owner = std::make_shared<RecordingOwner>();
  auto op = std::make_shared<Operation>(
      "all_reduce_sum on world", std::vector<std::shared_ptr<const void>>{});
  OperationCompletion c(op, owner, OwnerRef::kWeak, "test");
  EXPECT_FALSE(c.SupportsCancellation(CancellationMode::kNativeCancel));
  owner.reset();
  EXPECT_TRUE(c.SupportsCancellation(CancellationMode::kNativeCancel));
  op->Finish(absl::UnavailableError("peer closed"));
  EXPECT_EQ(c.WaitBounded(absl::Seconds(1), CancellationMode::kNativeCancel)
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace rankd::dataplane
