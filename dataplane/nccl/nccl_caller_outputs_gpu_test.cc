// Caller-owned outputs in the NCCL backend on 2+ GPUs (or the stand-in):
// a steady loop of operations into caller-owned outputs allocates no
// device memory per step.
//
// Every case skips (GTEST_SKIP with the reason, which says "no GPU") when
// there are too few CUDA devices or no CUDA runtime to load. Built twice
// (nccl_device_test.bzl): nccl_caller_outputs_gpu_test for real GPUs and
// nccl_caller_outputs_standin_test against the CPU stand-in; the GPU kit runs
// them all as nccl_gpu_test.
#include <atomic>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/barrier.h"
#include "dataplane/collective_scope.h"
#include "dataplane/dtype.h"
#include "dataplane/nccl/cuda_copy.h"
#include "dataplane/nccl/device_buffer.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_backend.h"
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

// A decode loop on caller-owned outputs: results land in the same device
// tensors every step, with exact values, and (counted by the CPU stand-in)
// the loop allocates no device memory at all: no outputs, and agreement
// records come back to their pool.
TEST_F(NcclMultiGpuTest, CallerOwnedOutputsAllocateNoDeviceMemoryPerStep) {
  const testing::StandinControl* standin = Standin();
  absl::Barrier warmed(2), counted(2), looped(2), measured(2);
  std::atomic<int64_t> before{0};
  constexpr int kSteps = 10;
  RunRanks(2, DataParallel(2), [&](uint32_t r, NcclSession& s, InProcessJob&) {
    auto stream = s.stream();
    const CollectiveScope world = CollectiveScope::World();
    auto activations = Upload(Desc({4}), Floats(4), stream);
    auto gathered = Upload(Desc({8}), Floats(8), stream);
    auto rows_in = Upload(Desc({2, 2}, TensorDtype::kI32),
                          std::vector<int32_t>(4, 0), stream);
    auto rows_out = Upload(Desc({2, 2}, TensorDtype::kI32),
                           std::vector<int32_t>(4, 0), stream);
    NcclBackend backend = s.backend();
    auto group = backend.Group(world);
    ASSERT_TRUE(group.ok()) << group.status();
    NcclExecutor executor(stream);
    const std::vector<size_t> counts = {1, 1};
    auto step = [&](int k) {
      std::vector<float> mine(4);
      for (int i = 0; i < 4; ++i) mine[i] = static_cast<float>(r + k + i);
      ASSERT_OK(CopyHostToDevice(activations.data(), mine.data(),
                                 4 * sizeof(float), *stream));
      auto sum = s.AllReduceSumInto(world, activations, activations);
      ASSERT_TRUE(sum.ok()) << sum.status();
      ASSERT_OK(sum->completion->Wait());
      std::vector<float> want(4);
      for (int i = 0; i < 4; ++i) want[i] = static_cast<float>(1 + 2 * (k + i));
      ASSERT_EQ(Download<float>(activations), want) << "rank " << r;
      auto all = s.AllGatherInto(world, activations, gathered);
      ASSERT_TRUE(all.ok()) << all.status();
      ASSERT_OK(all->completion->Wait());
      std::vector<float> both = want;
      both.insert(both.end(), want.begin(), want.end());
      EXPECT_EQ(Download<float>(gathered), both);
      const std::vector<int32_t> rows = {static_cast<int32_t>(r), k,
                                         static_cast<int32_t>(r), k};
      ASSERT_OK(CopyHostToDevice(rows_in.data(), rows.data(),
                                 rows.size() * sizeof(int32_t), *stream));
      auto exchanged =
          s.AllToAllVInto(world, rows_in, counts, counts, rows_out);
      ASSERT_TRUE(exchanged.ok()) << exchanged.status();
      ASSERT_OK(exchanged->completion->Wait());
      EXPECT_EQ(Download<int32_t>(rows_out),
                (std::vector<int32_t>{0, k, 1, k}));
      if (r == 0) {
        auto sent = s.Send(world, 1, rows_in);
        ASSERT_TRUE(sent.ok()) << sent.status();
        ASSERT_OK(sent->completion->Wait());
      } else {
        auto got = s.ReceiveInto(world, 0, rows_out);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_OK(got->completion->Wait());
        EXPECT_EQ(Download<int32_t>(rows_out),
                  (std::vector<int32_t>{0, k, 0, k}));
      }
      // In place from member 1.
      auto b = backend.BroadcastInto(gathered, 1, gathered, *group, executor);
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_OK(b->completion->Wait());
      EXPECT_EQ(Download<float>(gathered), both);
    };
    step(0);  // warm-up: the record pool fills
    warmed.Block();
    if (r == 0 && standin != nullptr) before = standin->allocations();
    counted.Block();
    for (int k = 1; k <= kSteps; ++k) step(k);
    looped.Block();
    if (r == 0 && standin != nullptr) {
      EXPECT_EQ(standin->allocations() - before.load(), 0)
          << "device allocations during " << kSteps << " steps";
    }
    measured.Block();
    // The allocating form does allocate (the counter is not blind).
    if (standin != nullptr) {
      const int64_t plain_before = standin->allocations();
      auto plain = s.AllReduceSum(world, activations);
      ASSERT_TRUE(plain.ok()) << plain.status();
      ASSERT_OK(plain->completion->Wait());
      EXPECT_GT(standin->allocations(), plain_before);
    }
    // Refused before any native work: the wrong descriptor, an aliased
    // gather.
    auto wrong = s.AllReduceSumInto(world, activations, gathered);
    EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument)
        << wrong.status();
    // The first half of `gathered`, as the input of a gather into it all.
    auto half = DeviceTensor::Wrap(gathered.buffer(), Desc({4}));
    ASSERT_TRUE(half.ok()) << half.status();
    auto aliased = s.AllGatherInto(world, *half, gathered);
    EXPECT_EQ(aliased.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        absl::StrContains(aliased.status().message(), "overlaps the input"))
        << aliased.status();
    // In place means exactly the input's bytes: a view one element in
    // overlaps it only partly and is refused.
    auto shifted = DeviceTensor::Wrap(
        DeviceBuffer::External(static_cast<float*>(gathered.data()) + 1,
                               4 * sizeof(float), gathered.device(),
                               gathered.buffer()),
        Desc({4}));
    ASSERT_TRUE(shifted.ok()) << shifted.status();
    auto partial = s.AllReduceSumInto(world, *half, *shifted);
    EXPECT_EQ(partial.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(partial.status().message(),
                                  "only on exactly the input's bytes"))
        << partial.status();
    EXPECT_TRUE(s.poison().ok()) << s.poison();
  });
}

}  // namespace
}  // namespace rankd::dataplane::nccl
