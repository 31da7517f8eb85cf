// Unit tests for dataplane/watchdog.h over a fake session, a real
// OperationLedger and a MismatchDiagnosis on the in-process control plane:
// deadlines (with and without room for the native layer, with the
// diagnosis naming who submitted what), job failures notified or only
// polled, native health, Detach, and a callback that outlives the
// watchdog.
#include "dataplane/watchdog.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

using testing::InProcessJob;

// Records what the watchdog asks of it; JobHealth() reads the job, as a
// backend's does.
class FakeSession final : public NativeSession {
 public:
  explicit FakeSession(ControlPlane* control_plane)
      : control_plane_(control_plane) {}
  absl::Status JobHealth() override {
    health_calls_.fetch_add(1);
    return control_plane_->JobHealth();
  }
  absl::Status NativeHealth() override {
    absl::MutexLock lock(&mu_);
    return native_;
  }
  void Abort(const absl::Status& cause) override {
    absl::MutexLock lock(&mu_);
    aborts_.push_back(cause);
  }
  bool aborted() const override {
    absl::MutexLock lock(&mu_);
    return !aborts_.empty();
  }

  void SetNativeHealth(absl::Status s) {
    absl::MutexLock lock(&mu_);
    native_ = std::move(s);
  }
  std::vector<absl::Status> aborts() const {
    absl::MutexLock lock(&mu_);
    return aborts_;
  }
  // Waits up to `timeout` for the first Abort.
  bool AwaitAbort(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto any = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !aborts_.empty();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&any), timeout);
  }
  int health_calls() const { return health_calls_.load(); }

 private:
  ControlPlane* const control_plane_;
  mutable absl::Mutex mu_;
  absl::Status native_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> aborts_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> health_calls_{0};
};

std::shared_ptr<Operation> Running(const char* name) {
  return std::make_shared<Operation>(
      name, std::vector<std::shared_ptr<const void>>{});
}

SubmittedOperation What(uint32_t self, const char* canonical) {
  SubmittedOperation what;
  what.scope_key = "world";
  what.scope_name = "world";
  what.canonical = canonical;
  what.members = {0, 1};
  what.self = self;
  return what;
}

class WatchdogTest : public ::testing::Test {
 protected:
  WatchdogTest()
      : job_(InProcessJob::Create(2)),
        plane_(job_->ForRank(0)),
        diagnosis_(plane_.get(), "test/diagnosis/", absl::Seconds(5)),
        session_(plane_.get()) {}

  Watchdog::Options Options(
      absl::Duration native_first = absl::ZeroDuration()) const {
    Watchdog::Options options;
    options.backend = "gloo";
    options.interval = absl::Milliseconds(10);
    options.op_timeout = absl::Seconds(3);
    options.abort_effect = "every Gloo context of the session was aborted";
    options.native_first = native_first;
    return options;
  }

  std::shared_ptr<InProcessJob> job_;
  std::unique_ptr<ControlPlane> plane_;
  MismatchDiagnosis diagnosis_;
  OperationLedger ledger_;
  FakeSession session_;
};

TEST_F(WatchdogTest, AnOperationPastItsDeadlineAbortsNamingIt) {
  Watchdog watchdog(Options(), &ledger_, &diagnosis_, &session_);
  const absl::Time now = MonotonicNow();
  auto done = Running("barrier on world");
  auto late = Running("all_reduce_sum on world");
  ledger_.Add(done, now - absl::Seconds(2), SubmittedOperation{});
  ledger_.Add(late, now - absl::Seconds(1), SubmittedOperation{});
  done->Finish(absl::OkStatus());

  watchdog.EnforceDeadlines(now);
  std::vector<absl::Status> aborts = session_.aborts();
  ASSERT_EQ(aborts.size(), 1u);
  EXPECT_EQ(aborts[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(aborts[0].message(),
            "gloo backend: all_reduce_sum on world did not complete within "
            "3s (op_timeout); every Gloo context of the session was aborted "
            "and the session is poisoned");
  // Once aborted, it aborts no more; finished work has left the ledger.
  watchdog.EnforceDeadlines(now + absl::Hours(1));
  EXPECT_EQ(session_.aborts().size(), 1u);
  EXPECT_EQ(ledger_.size(), 1u);
  late->Finish(absl::OkStatus());
}

TEST_F(WatchdogTest, WorkBeforeItsDeadlineOrFinishedIsLeftAlone) {
  Watchdog watchdog(Options(), &ledger_, &diagnosis_, &session_);
  const absl::Time now = MonotonicNow();
  auto due = Running("all_gather on world");
  auto finished = Running("barrier on world");
  ledger_.Add(due, now + absl::Seconds(1), SubmittedOperation{});
  ledger_.Add(finished, now - absl::Seconds(1), SubmittedOperation{});
  finished->Finish(absl::OkStatus());
  watchdog.EnforceDeadlines(now);
  EXPECT_TRUE(session_.aborts().empty());
  EXPECT_EQ(ledger_.size(), 1u);  // the finished one was pruned
  due->Finish(absl::OkStatus());
}

TEST_F(WatchdogTest, NativeFirstLeavesTheNativeLayerItsOwnTimeout) {
  Watchdog watchdog(Options(absl::Seconds(10)), &ledger_, &diagnosis_,
                    &session_);
  const absl::Time now = MonotonicNow();
  auto late = Running("all_reduce_sum on world");
  ledger_.Add(late, now - absl::Seconds(1), SubmittedOperation{});
  watchdog.EnforceDeadlines(now);
  EXPECT_TRUE(session_.aborts().empty());
  watchdog.EnforceDeadlines(now + absl::Seconds(10));
  ASSERT_EQ(session_.aborts().size(), 1u);
  EXPECT_EQ(session_.aborts()[0].code(), absl::StatusCode::kDeadlineExceeded);
  late->Finish(absl::OkStatus());
}

TEST_F(WatchdogTest, AnOrderedOperationIsExplainedByWhatTheOthersSubmitted) {
  // Member 1 submitted f32[8] where member 0 submitted f32[4]; both reach
  // their deadline. Member 0's watchdog names who submitted what.
  auto plane1 = job_->ForRank(1);
  MismatchDiagnosis diagnosis1(plane1.get(), "test/diagnosis/",
                               absl::Seconds(5));
  std::thread member1([&] {
    SubmittedOperation what = What(1, "all_reduce_sum f32[8]");
    what.sequence = 3;
    diagnosis1.Explain(what, absl::DeadlineExceededError("gloo: Timed out"))
        .status.IgnoreError();
  });
  Watchdog watchdog(Options(), &ledger_, &diagnosis_, &session_);
  auto late = Running("all_reduce_sum on world");
  OperationLedger::SequenceCell cell =
      ledger_.Add(late, MonotonicNow() - absl::Seconds(1),
                  What(0, "all_reduce_sum f32[4]"));
  cell->store(3);
  watchdog.EnforceDeadlines(MonotonicNow());
  member1.join();
  std::vector<absl::Status> aborts = session_.aborts();
  ASSERT_EQ(aborts.size(), 1u);
  EXPECT_EQ(aborts[0].code(), absl::StatusCode::kInvalidArgument) << aborts[0];
  EXPECT_TRUE(absl::StrContains(aborts[0].message(), "all_reduce_sum f32[4]"))
      << aborts[0];
  EXPECT_TRUE(absl::StrContains(aborts[0].message(), "all_reduce_sum f32[8]"))
      << aborts[0];
  late->Finish(absl::OkStatus());
}

TEST_F(WatchdogTest, ANotifiedJobFailureAbortsAtOnce) {
  Watchdog::Options options = Options();
  options.interval = absl::Hours(1);  // only the notice can wake it
  Watchdog watchdog(options, &ledger_, &diagnosis_, &session_);
  watchdog.Start();
  const absl::Time start = MonotonicNow();
  watchdog.JobFailureCallback()(absl::AbortedError("job failed: rank 1 lost"));
  ASSERT_TRUE(session_.AwaitAbort(absl::Seconds(5)));
  EXPECT_LT(MonotonicNow() - start, absl::Seconds(1));
  EXPECT_EQ(session_.aborts()[0],
            absl::AbortedError("job failed: rank 1 lost"));
  EXPECT_EQ(watchdog.notified_failure(),
            absl::AbortedError("job failed: rank 1 lost"));
  watchdog.Stop();
  EXPECT_EQ(session_.aborts().size(), 1u);
}

TEST_F(WatchdogTest, AJobFailureWithoutANoticeIsFoundByPolling) {
  Watchdog watchdog(Options(), &ledger_, &diagnosis_, &session_);
  watchdog.Start();
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(session_.aborts().empty());
  job_->FailWithoutNotice(absl::AbortedError("job failed: node 2 lost"));
  ASSERT_TRUE(session_.AwaitAbort(absl::Seconds(5)));
  EXPECT_TRUE(absl::StrContains(session_.aborts()[0].message(), "node 2 lost"))
      << session_.aborts()[0];
  EXPECT_TRUE(watchdog.notified_failure().ok());
}

TEST_F(WatchdogTest, ANativeErrorAborts) {
  Watchdog watchdog(Options(), &ledger_, &diagnosis_, &session_);
  watchdog.Start();
  session_.SetNativeHealth(absl::InternalError("ncclRemoteError"));
  ASSERT_TRUE(session_.AwaitAbort(absl::Seconds(5)));
  EXPECT_EQ(session_.aborts()[0], absl::InternalError("ncclRemoteError"));
}

TEST_F(WatchdogTest, AfterDetachTheControlPlaneIsNeverCalled) {
  Watchdog watchdog(Options(), &ledger_, &diagnosis_, &session_);
  watchdog.Start();
  const absl::Time until = MonotonicNow() + absl::Seconds(5);
  while (session_.health_calls() == 0 && MonotonicNow() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GT(session_.health_calls(), 0);
  watchdog.Detach();
  const int calls = session_.health_calls();
  absl::SleepFor(absl::Milliseconds(100));  // about ten ticks
  EXPECT_EQ(session_.health_calls(), calls);
  // Deadlines still hold, without the diagnosis (it reads the control
  // plane): the abort names the operation only.
  auto late = Running("all_reduce_sum on world");
  ledger_
      .Add(late, MonotonicNow() - absl::Seconds(1),
           What(0, "all_reduce_sum f32[4]"))
      ->store(1);
  ASSERT_TRUE(session_.AwaitAbort(absl::Seconds(5)));
  EXPECT_EQ(session_.aborts()[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(session_.health_calls(), calls);
  late->Finish(absl::OkStatus());
}

// A crash test (meaningful under AddressSanitizer, as the suite runs): the
// callback must not reach the destroyed watchdog.
TEST_F(WatchdogTest, ACallbackThatOutlivesTheWatchdogDoesNothing) {
  std::function<void(const absl::Status&)> callback;
  {
    Watchdog watchdog(Options(), &ledger_, &diagnosis_, &session_);
    watchdog.Start();
    callback = watchdog.JobFailureCallback();
  }
  callback(absl::AbortedError("late notice"));
  EXPECT_TRUE(session_.aborts().empty());
}

}  // namespace
}  // namespace rankd::dataplane
