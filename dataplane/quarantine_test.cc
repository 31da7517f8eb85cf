// Unit tests of Quarantine: resources are released only after exact
// completion, the fence holds while anything is quarantined, and abandoned
// work is leaked, never freed.
#include "dataplane/quarantine.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

// A completion a test completes by hand.
class ManualCompletion final : public Completion {
 public:
  bool IsComplete() const override { return done_.load(); }
  absl::Status Wait() override { return absl::OkStatus(); }
  void Complete() { done_ = true; }

 private:
  std::atomic<bool> done_{false};
};

TEST(QuarantineTest, EmptyFenceIsOpen) {
  Quarantine q;
  EXPECT_EQ(q.size(), 0u);
  EXPECT_TRUE(q.Fence("gloo").ok());
}

TEST(QuarantineTest, HoldsResourcesUntilCompletion) {
  Quarantine q(absl::Milliseconds(1));
  auto completion = std::make_shared<ManualCompletion>();
  auto buffer = std::make_shared<int>(42);
  std::weak_ptr<int> watch = buffer;
  q.Admit(completion, {buffer}, "all_reduce_sum on group 3");
  buffer.reset();
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.admitted(), 1u);
  absl::Status fence = q.Fence("gloo");
  EXPECT_EQ(fence.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fence.message(), "all_reduce_sum on group 3"));
  EXPECT_TRUE(absl::StrContains(fence.message(), "refuses new work"));
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_FALSE(watch.expired()) << "released before completion";
  completion->Complete();
  EXPECT_TRUE(q.WaitUntilEmpty(absl::Seconds(5)));
  // Released by the reaper after the item left the list.
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!watch.expired() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(watch.expired());
  EXPECT_TRUE(q.Fence("gloo").ok());
}

// Work that may never finish (an NCCL kernel waiting on a dead peer) is
// given up on: leaked, never freed, and the destructor no longer waits.
TEST(QuarantineTest, AbandonLeaksWhatNeverFinishes) {
  auto buffer = std::make_shared<int>(7);
  std::weak_ptr<int> watch = buffer;
  {
    Quarantine q(absl::Milliseconds(1));
    q.Admit(std::make_shared<ManualCompletion>(), {std::move(buffer)},
            "send to member 1");
    EXPECT_FALSE(q.WaitUntilEmpty(absl::Milliseconds(10)));
    EXPECT_EQ(q.Abandon(), 1u);
    EXPECT_EQ(q.size(), 0u);
    EXPECT_TRUE(q.Fence("nccl").ok());
  }
  EXPECT_FALSE(watch.expired()) << "abandoned resources were freed";
}

TEST(QuarantineTest, CompletedWorkIsReleasedAtOnce) {
  Quarantine q;
  auto completion = std::make_shared<ManualCompletion>();
  completion->Complete();
  q.Admit(completion, {std::make_shared<int>(1)}, "done");
  q.Notify();
  EXPECT_TRUE(q.WaitUntilEmpty(absl::Seconds(5)));
}

TEST(QuarantineTest, DestructorWaitsForCompletion) {
  auto completion = std::make_shared<ManualCompletion>();
  auto buffer = std::make_shared<int>(1);
  std::weak_ptr<int> watch = buffer;
  absl::Time start = absl::Now();
  {
    Quarantine q(absl::Milliseconds(1));
    q.Admit(completion, {std::move(buffer)}, "slow");
    std::thread finisher([completion] {
      absl::SleepFor(absl::Milliseconds(100));
      completion->Complete();
    });
    finisher.detach();
  }
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace rankd::dataplane
