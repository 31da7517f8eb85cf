// HostExecutor unit tests, on a host that records what the executor asks:
// local work runs on its submitter only when nothing is ahead of it, a
// waiter runs only the operation that is next, work held for a caller that
// waits at once still starts when nobody takes it (or a poll, a waiter
// behind it or shutdown needs it), and either way every operation runs
// once, in submission order.
#include "dataplane/host_executor.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dataplane/execution_host.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

// A healthy session that forwards waiters to its one executor.
class FakeHost final : public ExecutionHost {
 public:
  explicit FakeHost(HostExecutor* executor) : executor_(executor) {}
  absl::Status Admission(const char*) const override {
    return absl::OkStatus();
  }
  absl::Status BeforeRun(const std::string&) const override {
    if (throw_before_run_.exchange(false)) throw std::bad_alloc();
    return absl::OkStatus();
  }
  absl::Status OnNativeFailure(const std::string&, const absl::Status& error,
                               bool) override {
    return error;
  }
  void Track(const std::shared_ptr<Operation>&) override {}
  void WorkFinished() override {}
  void Poison(const absl::Status&) override {}
  const char* backend_name() const override { return "test"; }
  bool SupportsNativeCancel() const override { return false; }
  bool SupportsQuarantine() const override { return false; }
  bool CancelNative(const absl::Status&) override { return true; }
  std::string abort_effect() const override { return "nothing"; }
  absl::Duration AbortGrace() const override { return absl::ZeroDuration(); }
  void Quarantine(std::shared_ptr<Operation>) override {}
  void Unattended(const std::shared_ptr<Operation>&) override {}
  void RunIfNext(const std::shared_ptr<Operation>& op) override {
    executor_->RunIfNext(op);
  }
  void StartHeld(const std::shared_ptr<Operation>&) override {
    executor_->StartHeld();
  }

  // The next BeforeRun throws std::bad_alloc (outside the task, which the
  // executor guards separately).
  void ThrowBeforeNextRun() { throw_before_run_.store(true); }

 private:
  mutable std::atomic<bool> throw_before_run_{false};
  HostExecutor* const executor_;
};

class ExecutorTest : public ::testing::Test {
 protected:
  ExecutorTest() : host_(std::make_shared<FakeHost>(&executor_)) {
    executor_.Bind(host_);
  }
  ~ExecutorTest() override {
    executor_.Shutdown(absl::CancelledError("test over"));
  }

  // A task that records its number and thread.
  HostExecutor::Task Record(int n) {
    return [this, n](const std::string&) {
      absl::MutexLock lock(&mu_);
      order_.push_back(n);
      threads_.push_back(std::this_thread::get_id());
      return TaskResult::Ok();
    };
  }
  std::vector<int> order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }
  std::vector<std::thread::id> threads() {
    absl::MutexLock lock(&mu_);
    return threads_;
  }

  // Submits `task` once the executor holds it for this thread. The executor
  // holds the next submission after its caller ran the previous one itself
  // at once: until then, each submission is a no-op that this thread waits
  // for at once.
  std::shared_ptr<OperationCompletion> SubmitHeld(HostExecutor::Task task) {
    for (int i = 0; i < 1000; ++i) {
      auto armed = std::make_shared<std::atomic<bool>>(false);
      auto done = executor_.Submit(
          "test", "op", {}, [armed, task](const std::string& op) {
            return armed->load() ? task(op) : TaskResult::Ok();
          });
      if (!done.ok()) {
        ADD_FAILURE() << done.status();
        return nullptr;
      }
      // Held work waits kHeldStartBound for this thread: arming it now is
      // in time.
      if (executor_.held() == 1) {
        armed->store(true);
        return *std::move(done);
      }
      EXPECT_TRUE((*done)->Wait().ok());
    }
    ADD_FAILURE() << "the executor never held a submission";
    return nullptr;
  }

  HostExecutor executor_{"test"};
  std::shared_ptr<FakeHost> host_;
  absl::Mutex mu_;
  std::vector<int> order_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ExecutorTest, LocalWorkRunsOnTheSubmitterWhenIdle) {
  auto done = executor_.Submit("test", "local op", {}, Record(1),
                               /*local=*/true);
  ASSERT_TRUE(done.ok()) << done.status();
  // Finished before Submit returned, here.
  EXPECT_TRUE((*done)->IsComplete());
  EXPECT_TRUE((*done)->Wait().ok());
  EXPECT_EQ(order(), std::vector<int>{1});
  EXPECT_EQ(threads(),
            std::vector<std::thread::id>{std::this_thread::get_id()});
  EXPECT_TRUE(executor_.idle());
}

TEST_F(ExecutorTest, LocalWorkWaitsBehindEarlierWork) {
  absl::Notification release;
  auto blocker = executor_.Submit("test", "blocker", {},
                                  [this, &release](const std::string& op) {
                                    release.WaitForNotification();
                                    return Record(1)(op);
                                  });
  ASSERT_TRUE(blocker.ok());
  auto local = executor_.Submit("test", "local op", {}, Record(2),
                                /*local=*/true);
  ASSERT_TRUE(local.ok());
  // Queued, not run on this thread ahead of the blocker.
  EXPECT_FALSE((*local)->IsComplete());
  release.Notify();
  EXPECT_TRUE((*local)->Wait().ok());
  EXPECT_TRUE((*blocker)->Wait().ok());
  EXPECT_EQ(order(), (std::vector<int>{1, 2}));
}

TEST_F(ExecutorTest, WaiterRunsOnlyTheNextOperation) {
  absl::Notification started, release;
  auto a = executor_.Submit("test", "a", {}, [&, this](const std::string& op) {
    started.Notify();
    release.WaitForNotification();
    return Record(1)(op);
  });
  ASSERT_TRUE(a.ok());
  started.WaitForNotification();  // a runs on the executor thread
  auto b = executor_.Submit("test", "b", {}, Record(2));
  auto c = executor_.Submit("test", "c", {}, Record(3));
  ASSERT_TRUE(b.ok() && c.ok());
  // c is not next and a runs: the waiter must not run it (out of order) and
  // simply waits; the executor thread then runs b and c.
  std::thread waiter([&] { EXPECT_TRUE((*c)->Wait().ok()); });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE((*c)->IsComplete());
  release.Notify();
  waiter.join();
  EXPECT_TRUE((*b)->Wait().ok());
  EXPECT_TRUE((*a)->Wait().ok());
  EXPECT_EQ(order(), (std::vector<int>{1, 2, 3}));
}

TEST_F(ExecutorTest, SubmitThenWaitRunsEveryOperationOnceInOrder) {
  // Whether the waiter or the executor thread runs each one is a race (the
  // executor leaves fresh work to the waiter for HandOffSpin()); the order
  // and outcomes never depend on it.
  std::vector<int> expected;
  for (int i = 0; i < 200; ++i) {
    auto done = executor_.Submit("test", "op", {}, Record(i));
    ASSERT_TRUE(done.ok());
    if (i % 3 != 0) {
      EXPECT_TRUE((*done)->Wait().ok());
    } else {
      // A bounded wait never runs the work itself.
      EXPECT_TRUE((*done)->WaitFor(absl::Seconds(10)));
    }
    expected.push_back(i);
  }
  EXPECT_TRUE(executor_.WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(order(), expected);
  int on_waiter = 0;
  for (std::thread::id id : threads()) {
    if (id == std::this_thread::get_id()) ++on_waiter;
  }
  // Informational: how often the waiter won.
  std::printf("ran on the waiting thread: %d of 200\n", on_waiter);
}

TEST_F(ExecutorTest, HeldWorkRunsOnItsWaiter) {
  auto held = SubmitHeld(Record(1));
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(executor_.held(), 1u);
  EXPECT_TRUE(held->Wait().ok());
  EXPECT_EQ(order(), std::vector<int>{1});
  EXPECT_EQ(threads(),
            std::vector<std::thread::id>{std::this_thread::get_id()});
  EXPECT_TRUE(executor_.idle());
}

TEST_F(ExecutorTest, HeldWorkNobodyTakesStartsOnTheExecutorThread) {
  absl::Notification ran;
  auto held = SubmitHeld([this, &ran](const std::string& op) {
    TaskResult r = Record(1)(op);
    ran.Notify();
    return r;
  });
  ASSERT_NE(held, nullptr);
  // Nobody waits, polls or submits: the executor thread starts it once it
  // is HostExecutor::kHeldStartBound old.
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_NE(threads(),
            std::vector<std::thread::id>{std::this_thread::get_id()});
  EXPECT_TRUE(held->Wait().ok());
  EXPECT_EQ(order(), std::vector<int>{1});
}

TEST_F(ExecutorTest, APollOrABoundedWaitStartsHeldWork) {
  auto polled = SubmitHeld(Record(1));
  ASSERT_NE(polled, nullptr);
  // IsComplete (and WaitFor, WaitBounded) hand it to the executor thread
  // through the host (OperationOwner::StartHeld).
  polled->IsComplete();
  EXPECT_EQ(executor_.held(), 0u);
  EXPECT_TRUE(polled->WaitFor(absl::Seconds(10)));

  auto bounded = SubmitHeld(Record(2));
  ASSERT_NE(bounded, nullptr);
  EXPECT_TRUE(bounded->WaitFor(absl::Seconds(10)));
  EXPECT_EQ(order(), (std::vector<int>{1, 2}));
}

TEST_F(ExecutorTest, AWaiterBehindHeldWorkStartsIt) {
  auto first = SubmitHeld(Record(1));
  ASSERT_NE(first, nullptr);
  auto second = executor_.Submit("test", "second", {}, Record(2));
  ASSERT_TRUE(second.ok());
  // The second is not next: its waiter must not run it, nor wait for
  // someone to take the first.
  EXPECT_TRUE((*second)->Wait().ok());
  EXPECT_TRUE(first->Wait().ok());
  EXPECT_EQ(order(), (std::vector<int>{1, 2}));
}

TEST_F(ExecutorTest, ShutdownFinishesHeldWorkWithoutRunningIt) {
  auto held = SubmitHeld(Record(1));
  ASSERT_NE(held, nullptr);
  executor_.Shutdown(absl::CancelledError("stopping"));
  const absl::Status s = held->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_TRUE(order().empty());
}

TEST_F(ExecutorTest,
       AnExceptionOutsideTheTaskFinishesItsItemAndTheExecutorGoesOn) {
  // On the submitter (local work), on a waiter (RunIfNext) and on the
  // executor thread: the item ends with an internal error, nothing escapes,
  // and the next operation still runs (running_ was cleared).
  host_->ThrowBeforeNextRun();
  auto local = executor_.Submit("test", "local op", {}, Record(1),
                                /*local=*/true);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->Wait().code(), absl::StatusCode::kInternal);

  // Held for this thread, so that its waiter runs it (RunIfNext); the
  // throw is armed after SubmitHeld's own no-op submissions ran.
  auto waited = SubmitHeld(Record(2));
  ASSERT_NE(waited, nullptr);
  host_->ThrowBeforeNextRun();
  EXPECT_EQ(waited->Wait().code(), absl::StatusCode::kInternal);

  host_->ThrowBeforeNextRun();
  auto unwaited = executor_.Submit("test", "unwaited op", {}, Record(3));
  ASSERT_TRUE(unwaited.ok()) << unwaited.status();
  // A bounded wait leaves it to the executor thread.
  ASSERT_TRUE((*unwaited)->WaitFor(absl::Seconds(10)));
  EXPECT_EQ((*unwaited)->Wait().code(), absl::StatusCode::kInternal);

  auto next = executor_.Submit("test", "next op", {}, Record(4));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE((*next)->Wait().ok());
  EXPECT_EQ(order(), std::vector<int>{4});
  EXPECT_TRUE(executor_.WaitIdle(absl::Seconds(10)));
}

}  // namespace
}  // namespace rankd::dataplane
