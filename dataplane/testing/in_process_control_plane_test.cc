// The in-process job's model of epochs (in_process_control_plane.h), which
// the backends' Reform tests stand on: a loss ends the epoch once (its
// failure callbacks run once, its control planes are fenced), a
// replacement and the survivors' Rejoin make the next epoch whole, keys
// under "epoch/<N>/" are writable only at N, and Rejoin's deadline names
// who is missing.
#include "dataplane/testing/in_process_control_plane.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "dataplane/control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::testing {
namespace {

TEST(InProcessJobEpochsTest, ALossEndsTheEpochAndRunsItsCallbacksOnce) {
  auto job = InProcessJob::Create(2);
  auto cp0 = job->ForRank(0);
  auto cp1 = job->ForRank(1);
  std::atomic<int> fired = 0;
  cp0->OnJobFailure([&](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    ++fired;
  });
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(job->epoch(), 2u);
  // The survivor is fenced until it joins the next epoch.
  EXPECT_EQ(cp0->JobHealth().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cp0->KvSet("r0/x", "1").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cp0->AllGatherWords({1}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
  // Registered in the ended epoch: runs at once, with the loss.
  cp0->OnJobFailure([&](const absl::Status&) { ++fired; });
  EXPECT_EQ(fired, 2);

  auto replacement = job->Replace(1);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(job->Replace(1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto rejoined = cp0->Rejoin(1, absl::Seconds(10));
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->epoch(), 2u);
  EXPECT_EQ(rejoined->rank(), 0u);
  EXPECT_TRUE(cp0->JobHealth().ok());
  // Joined already: returns at once.
  auto again = cp0->Rejoin(1, absl::Milliseconds(1));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch(), 2u);

  // A second loss runs only the callbacks registered at epoch 2.
  std::atomic<int> fired2 = 0;
  cp0->OnJobFailure([&](const absl::Status&) { ++fired2; });
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 lost again")).ok());
  EXPECT_EQ(fired, 2);
  EXPECT_EQ(fired2, 1);
  EXPECT_EQ(job->epoch(), 3u);
}

TEST(InProcessJobEpochsTest, EpochKeysAreWritableOnlyAtTheirEpoch) {
  auto job = InProcessJob::Create(1);
  auto cp = job->ForRank(0);
  EXPECT_EQ(cp->KvSet(EpochKey(2, "r0/x"), "1").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(cp->KvSet("r0/x", "1").ok());
  ASSERT_TRUE(job->Lose(0, absl::UnavailableError("rank 0 was lost")).ok());
  auto replacement = job->Replace(0);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_TRUE((*replacement)->KvSet(EpochKey(2, "r0/x"), "2").ok());
  EXPECT_EQ((*replacement)->KvSet(EpochKey(3, "r0/x"), "3").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(job->Peek("r0/x"), "1");
  EXPECT_EQ(job->Peek("epoch/2/r0/x"), "2");
}

TEST(InProcessJobEpochsTest, RejoinWaitsForTheReplacement) {
  auto job = InProcessJob::Create(2);
  auto cp0 = job->ForRank(0);
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  absl::StatusOr<DistributedSessionDescriptor> rejoined;
  std::thread survivor([&] { rejoined = cp0->Rejoin(1, absl::Seconds(30)); });
  auto replacement = job->Replace(1);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  survivor.join();
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->epoch(), 2u);
  EXPECT_TRUE((*replacement)->JobHealth().ok());
}

TEST(InProcessJobEpochsTest, RejoinsDeadlineNamesTheEpochAndWhoIsMissing) {
  auto job = InProcessJob::Create(3);
  auto cp0 = job->ForRank(0);
  ASSERT_TRUE(job->Lose(2, absl::UnavailableError("rank 2 was lost")).ok());
  auto rejoined = cp0->Rejoin(1, absl::Milliseconds(50));
  ASSERT_EQ(rejoined.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(rejoined.status().message(), "epoch 2"))
      << rejoined.status();
  EXPECT_TRUE(
      absl::StrContains(rejoined.status().message(), "missing ranks 1, 2"))
      << rejoined.status();
  // Before any loss, the job never leaves epoch 1.
  auto fresh = InProcessJob::Create(1);
  auto cp = fresh->ForRank(0);
  auto waited = cp->Rejoin(1, absl::Milliseconds(20));
  ASSERT_EQ(waited.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(waited.status().message(), "epoch 1"))
      << waited.status();
  EXPECT_EQ(cp->Rejoin(1, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InProcessJobEpochsTest, ATerminalFailureEndsRejoin) {
  auto job = InProcessJob::Create(2);
  auto cp0 = job->ForRank(0);
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  absl::StatusOr<DistributedSessionDescriptor> rejoined;
  std::thread survivor([&] { rejoined = cp0->Rejoin(1, absl::Seconds(30)); });
  job->Fail(absl::AbortedError("the job was cancelled"));
  survivor.join();
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kAborted)
      << rejoined.status();
}

}  // namespace
}  // namespace rankd::dataplane::testing
