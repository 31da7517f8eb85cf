// Bounded waits of the NCCL backend on real devices (or the stand-in), with
// a stream held by a host function: a wait that completes, a deadline that
// quarantines the work until it completes, native cancel aborting the
// communicators, and (2+ GPUs) an operation past its deadline naming the
// member that did not finish.
//
// Every case skips (GTEST_SKIP with the reason, which says "no GPU") when
// there are too few CUDA devices or no CUDA runtime to load. Built twice
// (nccl_device_test.bzl): nccl_bounded_wait_gpu_test for real GPUs and
// nccl_bounded_wait_standin_test against the CPU stand-in; the GPU kit runs
// them all as nccl_gpu_test.
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dataplane/collective_scope.h"
#include "dataplane/nccl/nccl_backend.h"
#include "dataplane/nccl/nccl_comm.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/nccl_test_util.h"
#include "dataplane/nccl/testing/stream_stall.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
namespace {

using ::rankd::dataplane::testing::InProcessJob;
using testing::DataParallel;
using testing::Desc;
using testing::Floats;
using testing::NcclGpuTest;
using testing::NcclMultiGpuTest;
using testing::RunRanks;
using testing::Stall;
using testing::StallStream;
using testing::Upload;

TEST_F(NcclGpuTest, BoundedWaitCompletes) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto x = Upload(Desc({256}), Floats(256), session->stream());
  auto sum = session->AllReduceSum(CollectiveScope::World(), x);
  ASSERT_TRUE(sum.ok());
  EXPECT_TRUE(
      sum->completion->SupportsCancellation(CancellationMode::kNativeCancel));
  EXPECT_TRUE(sum->completion->SupportsCancellation(
      CancellationMode::kQuarantineUntilComplete));
  EXPECT_EQ(
      sum->completion
          ->WaitBounded(absl::ZeroDuration(), CancellationMode::kNativeCancel)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  auto outcome = sum->completion->WaitBounded(absl::Seconds(30),
                                              CancellationMode::kNativeCancel);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(outcome->completed());
  EXPECT_TRUE(session->poison().ok());
}

TEST_F(NcclGpuTest, DeadlineQuarantinesUntilTheWorkCompletes) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto x = Upload(Desc({1 << 16}), Floats(1 << 16), session->stream());
  Stall* stall = StallStream(*session->stream());
  ASSERT_NE(stall, nullptr);
  auto sum = session->AllReduceSum(CollectiveScope::World(), x);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_FALSE(sum->completion->IsComplete());
  auto outcome = sum->completion->WaitBounded(
      absl::Milliseconds(50), CancellationMode::kQuarantineUntilComplete);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->completed());
  EXPECT_EQ(outcome->mode(), CancellationMode::kQuarantineUntilComplete);
  // Poisoned: later work fails at once with the original cause.
  EXPECT_EQ(session->poison().code(), absl::StatusCode::kDeadlineExceeded);
  auto later = session->AllReduceSum(CollectiveScope::World(), x);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(session->capabilities().world_collectives);
  // The caller drops everything; the quarantine keeps the buffers.
  sum = absl::UnknownError("dropped");
  EXPECT_GE(session->quarantined(), 1u);
  stall->released = true;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (session->quarantined() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(session->quarantined(), 0u);
}

TEST_F(NcclGpuTest, NativeCancelAbortsTheCommunicators) {
  NcclSessionOptions options;
  options.abort_grace = absl::Seconds(5);
  auto session = OpenWorld1(options);
  ASSERT_NE(session, nullptr);
  auto x = Upload(Desc({1024}), Floats(1024), session->stream());
  Stall* stall = StallStream(*session->stream());
  ASSERT_NE(stall, nullptr);
  auto sum = session->AllReduceSum(CollectiveScope::World(), x);
  ASSERT_TRUE(sum.ok()) << sum.status();
  std::thread release([stall] {
    absl::SleepFor(absl::Milliseconds(300));
    stall->released = true;
  });
  auto outcome = sum->completion->WaitBounded(absl::Milliseconds(50),
                                              CancellationMode::kNativeCancel);
  release.join();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_FALSE(outcome->completed());
  EXPECT_EQ(outcome->mode(), CancellationMode::kNativeCancel);
  absl::Status waited = sum->completion->Wait();
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_EQ(session->AllGather(CollectiveScope::World(), x).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Every operation has a deadline (op_timeout): past it the session aborts,
// and the error names the operation and the members that did not finish.
TEST_F(NcclMultiGpuTest, AnOperationPastItsDeadlineNamesWhoDidNotFinish) {
  NcclSessionOptions options;
  options.op_timeout = absl::Seconds(1);
  options.failure_attribution_grace = absl::Milliseconds(500);
  absl::Barrier* warmed = new absl::Barrier(2);
  RunRanks(
      2, DataParallel(2),
      [&](uint32_t r, NcclSession& s, InProcessJob&) {
        auto x = Upload(Desc({4}), Floats(4), s.stream());
        {
          auto warm = s.AllReduceSum(CollectiveScope::World(), x);
          ASSERT_TRUE(warm.ok()) << warm.status();
          ASSERT_OK(warm->completion->Wait());
        }
        if (warmed->Block()) delete warmed;
        if (r == 1) return;  // never submits operation #1
        auto stuck = s.AllReduceSum(CollectiveScope::World(), x);
        ASSERT_TRUE(stuck.ok()) << stuck.status();
        const absl::Time start = absl::Now();
        absl::Status waited = stuck->completion->Wait();  // a plain Wait
        EXPECT_LT(absl::Now() - start, absl::Seconds(10));
        EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(),
                                      "all_reduce_sum on world did not "
                                      "complete within 1s (op_timeout)"))
            << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(),
                                      "rank 1 did not report operation #1 "
                                      "on world"))
            << waited;
        EXPECT_EQ(s.poison(), waited);
      },
      nullptr, options);
}

// On a group's executor lane, the deadline names the group and the lane,
// as Gloo does ("group 8 on executor 1"), never the communicator under
// them (group 8 has the world's members: its lane-1 communicator is
// "g8-world-e1").
TEST_F(NcclMultiGpuTest, AnOperationOnAGroupsLanePastItsDeadlineNamesThem) {
  if (!SplitSupported()) GTEST_SKIP() << "needs ncclCommSplit (NCCL 2.18)";
  NcclSessionOptions options;
  options.executors = 2;
  options.op_timeout = absl::Seconds(1);
  options.failure_attribution_grace = absl::Milliseconds(500);
  absl::Barrier* warmed = new absl::Barrier(2);
  RunRanks(
      2, DataParallel(2),
      [&](uint32_t r, NcclSession& s, InProcessJob&) {
        NcclBackend backend(s);
        auto group = backend.Group(CollectiveScope::Group(8));
        ASSERT_TRUE(group.ok()) << group.status();
        auto lane1 = NcclExecutor::Create(s.device(), 1);
        ASSERT_TRUE(lane1.ok()) << lane1.status();
        auto x = Upload(Desc({4}), Floats(4), s.stream());
        {
          auto warm = backend.AllReduceSum(x, *group, *lane1);
          ASSERT_TRUE(warm.ok()) << warm.status();
          ASSERT_OK(warm->completion->Wait());
        }
        if (warmed->Block()) delete warmed;
        if (r == 1) return;  // never submits operation #1
        auto stuck = backend.AllReduceSum(x, *group, *lane1);
        ASSERT_TRUE(stuck.ok()) << stuck.status();
        absl::Status waited = stuck->completion->Wait();
        EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(),
                                      "all_reduce_sum on group 8 did not "
                                      "complete within 1s (op_timeout)"))
            << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(),
                                      "rank 1 did not report operation #1 "
                                      "on group 8 on executor 1 within"))
            << waited;
      },
      nullptr, options);
}

}  // namespace
}  // namespace rankd::dataplane::nccl
