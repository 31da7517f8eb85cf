// Failure semantics of the Gloo backend with ranks as threads: bounded waits
// in both cancellation modes, poisoning, job failures reported by the
// control plane, transport failures attributed to the lost rank, and
// session destruction with work in flight. Nothing here may hang: every
// wait is bounded well below the ops' 20 s timeout.
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/gloo/testing/gloo_test_cluster.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::gloo {
namespace {

using testing::GlooTestCluster;

HostTensor Ones(size_t n) {
  return *HostTensor::FromVector<float>({n}, std::vector<float>(n, 1.0f));
}

class FaultTest : public ::testing::Test {
 protected:
  FaultTest() : cluster_({1, 1, 1, 3}, 3) {}
  void SetUp() override {
    ASSERT_TRUE(cluster_.status().ok()) << cluster_.status();
  }
  GlooTestCluster cluster_;
};

TEST_F(FaultTest, QuarantineHoldsResourcesUntilTheWorkCompletes) {
  GlooSession& s0 = cluster_.session(0);
  HostTensor input = Ones(4);
  auto sum = s0.AllReduceSum(CollectiveScope::World(), input);
  ASSERT_TRUE(sum.ok()) << sum.status();
  absl::Time start = absl::Now();
  auto outcome = sum->completion->WaitBounded(
      absl::Milliseconds(100), CancellationMode::kQuarantineUntilComplete);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->completed());
  EXPECT_EQ(outcome->mode(), CancellationMode::kQuarantineUntilComplete);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE(sum->completion->IsComplete());
  EXPECT_EQ(s0.backend().quarantined(), 1u);
  // The session is poisoned: later work is refused at once, naming why.
  start = absl::Now();
  auto later = s0.AllReduceSum(CollectiveScope::World(), input);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(later.status().message(), "quarantined"))
      << later.status();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  HostTensor output = sum->output;
  // The peers arrive late; the quarantined work runs to its end (the right
  // sum), but its outcome is the deadline the caller gave up at.
  cluster_.Run([&](uint32_t r) {
    if (r == 0) return;
    auto peer =
        cluster_.session(r).AllReduceSum(CollectiveScope::World(), Ones(4));
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_TRUE(peer->completion->Wait().ok());
  });
  EXPECT_EQ(sum->completion->Wait(), s0.backend().poison());
  EXPECT_EQ(std::vector<float>(output.Values<float>()->begin(),
                               output.Values<float>()->end()),
            std::vector<float>(4, 3.0f));
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (s0.backend().quarantined() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(s0.backend().quarantined(), 0u);
  // Still poisoned with the original cause.
  EXPECT_EQ(s0.backend().poison().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(FaultTest, NativeCancelTearsDownBeforeReturning) {
  GlooSession& s0 = cluster_.session(0);
  auto sum = s0.AllReduceSum(CollectiveScope::World(), Ones(8));
  ASSERT_TRUE(sum.ok()) << sum.status();
  absl::Time start = absl::Now();
  auto outcome = sum->completion->WaitBounded(absl::Milliseconds(100),
                                              CancellationMode::kNativeCancel);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->completed());
  EXPECT_EQ(outcome->mode(), CancellationMode::kNativeCancel);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // Teardown finished: the work is complete (failed) and holds nothing.
  EXPECT_TRUE(sum->completion->IsComplete());
  EXPECT_EQ(sum->completion->Wait().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s0.backend().quarantined(), 0u);
  EXPECT_TRUE(s0.backend().executor().idle());
  auto later = s0.AllReduceSum(CollectiveScope::World(), Ones(8));
  EXPECT_EQ(later.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(later.status().message(), "NativeCancel"));
  // The peers now fail fast (their connections to rank 0 were closed)
  // instead of waiting for Gloo's 20 s timeout.
  cluster_.Run([&](uint32_t r) {
    if (r == 0) return;
    absl::Time begin = absl::Now();
    auto peer =
        cluster_.session(r).AllReduceSum(CollectiveScope::World(), Ones(8));
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_FALSE(peer->completion->Wait().ok());
    EXPECT_LT(absl::Now() - begin, absl::Seconds(8));
    EXPECT_FALSE(cluster_.session(r).backend().poison().ok());
  });
}

// Ranks 0 and 1 enter an all_reduce_sum; rank 2 never does. Then the job
// fails with rank 2 lost: with the control plane's notice (`notify`), or
// seen only by its JobHealth(), which the session's watchdog polls. Either
// way the pending work fails within 3 s (far below the 20 s op timeout)
// naming rank 2, and later calls fail at once with the same cause.
void ExpectPendingWorkFailsNamingRank2(GlooTestCluster& cluster, bool notify) {
  std::vector<std::shared_ptr<GlooCompletion>> pending(2);
  for (uint32_t r = 0; r < 2; ++r) {
    auto sum = cluster.session(r).backend().AllReduceSum(
        Ones(16), cluster.session(r).backend().world(),
        cluster.session(r).backend().executor());
    ASSERT_TRUE(sum.ok()) << sum.status();
    pending[r] = sum->completion;
  }
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(pending[0]->IsComplete());
  const absl::Time failed = absl::Now();
  const absl::Status cause =
      absl::AbortedError("job itest failed: rank 2 lost (connection closed)");
  if (notify) {
    cluster.job().Fail(cause);
  } else {
    cluster.job().FailWithoutNotice(cause);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(pending[r]->WaitFor(absl::Seconds(3))) << "rank " << r;
    absl::Status s = pending[r]->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 2 lost")) << s;
    // Later calls fail immediately with the original cause.
    absl::Time start = absl::Now();
    auto later =
        cluster.session(r).AllReduceSum(CollectiveScope::World(), Ones(1));
    EXPECT_EQ(later.status().code(), absl::StatusCode::kAborted);
    EXPECT_TRUE(absl::StrContains(later.status().message(), "rank 2 lost"));
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(50));
  }
  EXPECT_LT(absl::Now() - failed, absl::Seconds(3));
}

TEST_F(FaultTest, JobFailureFailsPendingWorkNamingTheLostRank) {
  ExpectPendingWorkFailsNamingRank2(cluster_, /*notify=*/true);
}

TEST_F(FaultTest, AJobFailureWithoutANoticeIsFoundByTheWatchdog) {
  ExpectPendingWorkFailsNamingRank2(cluster_, /*notify=*/false);
}

// The watchdog's backstop: work that Gloo's own timeouts cannot end (here
// a task that ignores them) is held to op_timeout + 2 x
// failure_attribution_grace + 1 s from its submission: the session is
// poisoned with DeadlineExceeded naming it, and later work is refused.
TEST(WatchdogBackstopTest, WorkGlooCannotEndIsAbortedPastItsDeadline) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.op_timeout = absl::Milliseconds(200);
  options.failure_attribution_grace = absl::Milliseconds(100);
  GlooTestCluster cluster({1, 1, 1, 1}, 1, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  GlooBackend& b = cluster.session(0).backend();
  absl::Notification release;
  const absl::Time submitted = absl::Now();
  auto stuck = b.executor().Submit(
      "stuck_task", "stuck_task on world", {}, [&release](const std::string&) {
        release.WaitForNotificationWithTimeout(absl::Seconds(30));
        return TaskResult::Ok();
      });
  ASSERT_TRUE(stuck.ok()) << stuck.status();
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (b.poison().ok() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Duration took = absl::Now() - submitted;
  release.Notify();
  ASSERT_FALSE(b.poison().ok());
  // 0.2 + 2 x 0.1 + 1 s, plus at most a watchdog tick or two.
  EXPECT_GE(took, absl::Milliseconds(1400));
  EXPECT_LT(took, absl::Seconds(4));
  EXPECT_EQ(b.poison().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(b.poison().message(),
                                "stuck_task on world did not complete within "
                                "200ms (op_timeout)"))
      << b.poison();
  auto later =
      cluster.session(0).AllReduceSum(CollectiveScope::World(), Ones(1));
  EXPECT_EQ(later.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*stuck)->WaitFor(absl::Seconds(5)));
}

TEST_F(FaultTest, TransportFailureIsAttributedToTheLostRank) {
  // Rank 2 dies during a collective: its sockets close first, the control
  // plane notices a little later. The survivors' errors name rank 2.
  std::vector<std::shared_ptr<GlooCompletion>> pending(2);
  for (uint32_t r = 0; r < 2; ++r) {
    auto sum = cluster_.session(r).backend().AllReduceSum(
        Ones(16), cluster_.session(r).backend().world(),
        cluster_.session(r).backend().executor());
    ASSERT_TRUE(sum.ok()) << sum.status();
    pending[r] = sum->completion;
  }
  absl::SleepFor(absl::Milliseconds(100));
  cluster_.session(2).backend().Abort(absl::CancelledError("process killed"));
  std::thread notice([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cluster_.job().Fail(absl::AbortedError("job itest failed: rank 2 lost"));
  });
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(pending[r]->WaitFor(absl::Seconds(5))) << "rank " << r;
    absl::Status s = pending[r]->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 2 lost")) << s;
  }
  notice.join();
}

TEST_F(FaultTest, DestroyingASessionWithWorkInFlightDoesNotHang) {
  auto sum =
      cluster_.session(0).AllReduceSum(CollectiveScope::World(), Ones(4));
  ASSERT_TRUE(sum.ok()) << sum.status();
  std::shared_ptr<BoundedCompletion> completion = sum->completion;
  absl::SleepFor(absl::Milliseconds(50));
  absl::Time start = absl::Now();
  cluster_.DestroySession(0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_TRUE(completion->IsComplete());
  EXPECT_EQ(completion->Wait().code(), absl::StatusCode::kCancelled);
  // Bounded waits on a finished completion still answer.
  auto outcome = completion->WaitBounded(absl::Milliseconds(10),
                                         CancellationMode::kNativeCancel);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kCancelled);
}

TEST_F(FaultTest, QueuedWorkAfterPoisonIsNotRun) {
  GlooBackend& b = cluster_.session(0).backend();
  // First op blocks (peers absent); the second is queued behind it.
  auto first = b.AllReduceSum(Ones(2), b.world(), b.executor());
  auto second = b.Barrier(b.world(), b.executor());
  ASSERT_TRUE(first.ok() && second.ok());
  b.Abort(absl::AbortedError("rank 1 lost"));
  ASSERT_TRUE(second->completion->WaitFor(absl::Seconds(3)));
  absl::Status s = second->completion->Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(s.message(), "not run")) << s;
  EXPECT_EQ(first->completion->Wait().code(), absl::StatusCode::kAborted);
}

// A bounded wait returns within its timeout plus the teardown bound, even
// with a long failure-attribution grace: the failure its own cancellation
// causes is never handed to the mismatch diagnosis, which would wait the
// grace for peer reports that cannot come.
TEST(FaultGraceTest, NativeCancelIsNotStretchedByTheAttributionGrace) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.failure_attribution_grace = absl::Seconds(15);
  GlooTestCluster cluster({1, 1, 1, 2}, 2, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  GlooSession& s0 = cluster.session(0);
  auto sum = s0.AllReduceSum(CollectiveScope::World(), Ones(8));
  ASSERT_TRUE(sum.ok()) << sum.status();
  const absl::Time start = absl::Now();
  auto outcome = sum->completion->WaitBounded(absl::Milliseconds(300),
                                              CancellationMode::kNativeCancel);
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->completed());
  // 300 ms plus teardown; far below the 15 s grace the bug waited for.
  EXPECT_LT(took, absl::Seconds(5)) << took;
  EXPECT_TRUE(sum->completion->IsComplete());
  EXPECT_EQ(sum->completion->Wait().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace rankd::dataplane::gloo
