// Unit tests of CancellingOwner: the one policy both backends apply when a
// bounded wait misses its deadline, with a recording owner and operations
// a test finishes by hand.
#include "dataplane/cancellation.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "dataplane/operation.h"
#include "dataplane/quarantine.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

class RecordingOwner final : public CancellingOwner {
 public:
  // `finish_on_abort`: CancelNative ends the operation (the native abort
  // worked); otherwise the work stays in flight past the grace.
  explicit RecordingOwner(std::shared_ptr<Operation> finish_on_abort = nullptr)
      : finish_on_abort_(std::move(finish_on_abort)) {}
  ~RecordingOwner() override { quarantine.Abandon(); }

  void Poison(const absl::Status& cause) override {
    if (poison.ok()) poison = cause;
  }
  void Unattended(const std::shared_ptr<Operation>&) override {}
  const char* backend_name() const override { return "test"; }
  bool SupportsNativeCancel() const override { return native; }
  bool SupportsQuarantine() const override { return quarantines; }
  bool CancelNative(const absl::Status& cause) override {
    Poison(cause);
    ++cancels;
    if (finish_on_abort_ != nullptr) {
      finish_on_abort_->Finish(absl::AbortedError("context aborted"));
    }
    return tears_down;
  }
  std::string abort_effect() const override {
    return "every test context was aborted";
  }
  absl::Duration AbortGrace() const override { return absl::Milliseconds(5); }
  void Quarantine(std::shared_ptr<Operation> op) override {
    op->QuarantineIn(quarantine);
  }

  bool native = true;
  bool quarantines = true;
  bool tears_down = true;  // CancelNative's answer
  absl::Status poison;
  int cancels = 0;
  dataplane::Quarantine quarantine{absl::Milliseconds(1)};

 private:
  std::shared_ptr<Operation> finish_on_abort_;
};

std::shared_ptr<Operation> Running(std::shared_ptr<int> resource = nullptr) {
  return std::make_shared<Operation>(
      "all_reduce_sum on world",
      std::vector<std::shared_ptr<const void>>{std::move(resource)});
}

// Whether `watch` is freed within 5 s (the quarantine's reaper frees it).
bool Released(const std::weak_ptr<int>& watch) {
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (!watch.expired() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return watch.expired();
}

constexpr char kMissed[] =
    "test backend: all_reduce_sum on world missed its WaitBounded deadline "
    "of 20ms; ";

TEST(CancellationTest, SupportFollowsTheHooks) {
  RecordingOwner owner;
  EXPECT_TRUE(owner.SupportsCancellation(CancellationMode::kNativeCancel));
  EXPECT_TRUE(
      owner.SupportsCancellation(CancellationMode::kQuarantineUntilComplete));
  owner.native = false;
  owner.quarantines = false;
  EXPECT_FALSE(owner.SupportsCancellation(CancellationMode::kNativeCancel));
  EXPECT_FALSE(
      owner.SupportsCancellation(CancellationMode::kQuarantineUntilComplete));
}

TEST(CancellationTest, WorkThatFinishedMeanwhileIsLeftAlone) {
  RecordingOwner owner;
  auto op = Running();
  op->Finish(absl::OkStatus());
  for (CancellationMode mode : {CancellationMode::kNativeCancel,
                                CancellationMode::kQuarantineUntilComplete}) {
    auto applied = owner.ApplyCancellation(op, mode, absl::Milliseconds(20));
    ASSERT_TRUE(applied.ok()) << applied.status();
    EXPECT_FALSE(*applied);
  }
  EXPECT_TRUE(owner.poison.ok());
  EXPECT_EQ(owner.cancels, 0);
  EXPECT_TRUE(op->status().ok());
}

TEST(CancellationTest, QuarantinePoisonsFailsAndHoldsTheResources) {
  RecordingOwner owner;
  auto resource = std::make_shared<int>(7);
  std::weak_ptr<int> watch = resource;
  auto op = Running(std::move(resource));
  auto applied = owner.ApplyCancellation(
      op, CancellationMode::kQuarantineUntilComplete, absl::Milliseconds(20));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_TRUE(*applied);
  const std::string cause = std::string(kMissed) +
                            "its resources are quarantined until it completes "
                            "(QuarantineUntilComplete)";
  EXPECT_EQ(owner.poison, absl::DeadlineExceededError(cause));
  EXPECT_EQ(owner.cancels, 0);  // nothing torn down: the work runs on
  EXPECT_EQ(owner.quarantine.size(), 1u);
  EXPECT_FALSE(watch.expired());
  // The work ends later; its outcome stays the deadline, and only now are
  // its resources freed.
  op->Finish(absl::OkStatus());
  EXPECT_EQ(op->status(), owner.poison);
  EXPECT_TRUE(Released(watch));
}

TEST(CancellationTest, NativeCancelAbortsAndReturnsOnceTheWorkLeft) {
  auto op = Running();
  RecordingOwner owner(op);
  auto applied = owner.ApplyCancellation(op, CancellationMode::kNativeCancel,
                                         absl::Milliseconds(20));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_TRUE(*applied);
  EXPECT_EQ(owner.cancels, 1);
  EXPECT_EQ(owner.poison,
            absl::DeadlineExceededError(
                std::string(kMissed) +
                "cancelled natively (NativeCancel): every test context was "
                "aborted"));
  EXPECT_TRUE(op->Done());
  EXPECT_EQ(owner.quarantine.size(), 0u);
}

// Torn down, but the work has not ended within the grace (a kernel queued
// behind other work on its stream): the mode is applied and the work is
// quarantined, never freed while it runs.
TEST(CancellationTest, WorkStillQueuedAfterTheTeardownIsQuarantined) {
  RecordingOwner owner;  // the abort does not end the work
  auto resource = std::make_shared<int>(7);
  std::weak_ptr<int> watch = resource;
  auto op = Running(std::move(resource));
  auto applied = owner.ApplyCancellation(op, CancellationMode::kNativeCancel,
                                         absl::Milliseconds(20));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_TRUE(*applied);
  EXPECT_EQ(owner.cancels, 1);
  EXPECT_EQ(owner.quarantine.size(), 1u);
  EXPECT_FALSE(watch.expired());
  op->Finish(absl::OkStatus());
  EXPECT_EQ(op->status(), owner.poison);
  EXPECT_TRUE(Released(watch));
}

TEST(CancellationTest, ATeardownThatDoesNotFinishIsInternalAndQuarantined) {
  RecordingOwner owner;
  owner.tears_down = false;
  auto resource = std::make_shared<int>(7);
  std::weak_ptr<int> watch = resource;
  auto op = Running(std::move(resource));
  auto applied = owner.ApplyCancellation(op, CancellationMode::kNativeCancel,
                                         absl::Milliseconds(20));
  EXPECT_EQ(applied.status(),
            absl::InternalError(
                std::string(kMissed) +
                "NativeCancel could not confirm the native teardown; the "
                "work's resources are quarantined until it completes"));
  EXPECT_EQ(owner.cancels, 1);
  EXPECT_EQ(owner.quarantine.size(), 1u);
  EXPECT_FALSE(watch.expired());  // never freed under running work
  op->Finish(absl::OkStatus());
  EXPECT_EQ(op->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Released(watch));
}

}  // namespace
}  // namespace rankd::dataplane
