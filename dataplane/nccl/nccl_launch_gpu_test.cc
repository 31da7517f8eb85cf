// How the NCCL backend hands work to NCCL, on 2+ GPUs (or the stand-in).
// NCCL 2.28 answers ncclInProgress at every group end of a non-blocking
// communicator of 2+ ranks, while a thread it started launches the work;
// Submit waits for that thread without sleeping (docs/nccl.md, "Submitting
// work"), so an operation costs what NCCL's launch costs.
//
// Every case skips (GTEST_SKIP with the reason, which says "no GPU") when
// there are too few CUDA devices or no CUDA runtime to load. Built twice
// (nccl_device_test.bzl): nccl_launch_gpu_test for real GPUs and
// nccl_launch_standin_test against the CPU stand-in; the GPU kit runs them
// all as nccl_gpu_test.
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/collective_scope.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/nccl_test_util.h"
#include "dataplane/nccl/testing/standin_control.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
namespace {

using ::rankd::dataplane::testing::InProcessJob;
using testing::DataParallel;
using testing::Desc;
using testing::Download;
using testing::Floats;
using testing::NcclMultiGpuTest;
using testing::RunRanks;
using testing::Standin;
using testing::Upload;

// Every operation of a steady loop waits for NCCL's launch thread, and the
// submitting thread does not block (sleep) while that thread is starting:
// the CPU stand-in counts the submitting thread's voluntary context
// switches between the launch that answered ncclInProgress and the
// ncclCommGetAsyncError that saw the work queued, and calls those that
// began less than 1 ms into the wait early. Sleeping 200 µs between polls,
// as Enqueue did, blocked early in every operation (and cost at least
// 0.2 ms each); the wait now spins, then yields, and sleeps only after
// 10 ms, which a loaded machine can reach (NCCL's new thread waiting for a
// CPU), so late blocks are reported, not failed.
TEST_F(NcclMultiGpuTest, SubmitWaitsForNcclsLaunchWithoutSleeping) {
  const testing::StandinControl* standin = Standin();
  if (standin == nullptr) {
    GTEST_SKIP() << "counts the submitting thread's blocking waits inside "
                    "the CPU stand-in; with the real NCCL, "
                    "bench/nccl_overhead_bench measures the time instead";
  }
  constexpr int kOps = 100;
  RunRanks(2, DataParallel(2), [&](uint32_t r, NcclSession& s, InProcessJob&) {
    auto stream = s.stream();
    const CollectiveScope world = CollectiveScope::World();
    auto x = Upload(Desc({16}), Floats(16, static_cast<float>(r)), stream);
    auto sum = Upload(Desc({16}), Floats(16), stream);
    // The first operation connects the peers (NCCL does on first use): it
    // may wait for the other rank as long as that takes, asleep.
    auto first = s.AllReduceSumInto(world, x, sum);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_OK(first->completion->Wait());
    int64_t launches0 = 0, blocks0 = 0, early0 = 0;
    standin->thread_launch_waits(&launches0, &blocks0, &early0);
    for (int i = 0; i < kOps; ++i) {
      auto y = s.AllReduceSumInto(world, x, sum);
      ASSERT_TRUE(y.ok()) << y.status();
      // Outside the counted window: only the submission is.
      ASSERT_OK(y->completion->Wait());
    }
    int64_t launches = 0, blocks = 0, early = 0;
    standin->thread_launch_waits(&launches, &blocks, &early);
    launches -= launches0;
    blocks -= blocks0;
    early -= early0;
    // One group (payload and agreement record) per operation, each
    // answered ncclInProgress as NCCL 2.28 answers it.
    EXPECT_EQ(launches, kOps) << "rank " << r;
    // None expected; a few allowed for a lock the submitting thread finds
    // taken (rankd's, or the stand-in's through cudaSetDevice). The
    // sleeping poll blocked early 72 to 108 times in 100 operations.
    EXPECT_LE(early, kOps / 10)
        << "rank " << r << " blocked " << early << " times within 1 ms of "
        << launches << " launches (" << blocks
        << " blocks in all) while NCCL's thread launched the work";
    std::vector<float> want(16);
    for (int k = 0; k < 16; ++k) want[k] = 2.0f * k + 1.0f;
    EXPECT_EQ(Download<float>(sum), want) << "rank " << r;
    EXPECT_TRUE(s.poison().ok()) << s.poison();
  });
}

}  // namespace
}  // namespace rankd::dataplane::nccl
