// Communicators and order (docs/contract.md "Ordering", docs/nccl.md
// "Communicators and order"): every scope has a communicator of its own,
// split from one root; operations pair by executor lane, and each lane is
// its own ordering domain, as each Gloo executor is. NCCL orders the work
// of a communicator, and of every communicator sharing its resources,
// across all streams that use it (the stand-in models it: OrderDomain in
// testing/cuda_nccl_standin.cc), so two ranks that submit two groups' work
// in different orders on one lane deadlock; on two lanes they must not.
// Every wait here is bounded by op_timeout.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/topology.h"
#include "dataplane/collective_group.h"
#include "dataplane/collective_scope.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_backend.h"
#include "dataplane/nccl/nccl_comm.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/nccl_test_util.h"
#include "dataplane/nccl/testing/standin_control.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
namespace {

using ::rankd::dataplane::testing::InProcessJob;
using testing::Desc;
using testing::Download;
using testing::NcclMultiGpuTest;
using testing::RunRanks;
using testing::Upload;

// World 2, tensor degree 2: group 1 (the world group) and the tensor group
// both hold ranks 0 and 1.
ParallelTopology TwoGroupsOfTheSameMembers() {
  ParallelTopology topology;
  topology.tensor = 2;
  return topology;
}

NcclSessionOptions TwoLanes() {
  NcclSessionOptions options;
  options.executors = 2;
  // Bounds every wait of a test that fails (a deadlock ends here).
  options.op_timeout = absl::Seconds(5);
  return options;
}

// The defect this guards (issue 34, defect 3): groups with the same
// members shared one communicator, so X on executor A and Y on executor B,
// submitted X, Y by rank 0 and Y, X by rank 1, paired X with Y: a hang
// until op_timeout on NCCL where Gloo, with a context per group and
// executor, completes. Now X and Y are on different lanes: they complete,
// with their values.
TEST_F(NcclMultiGpuTest, TwoGroupsOnTwoLanesInEitherOrderComplete) {
  if (!SplitSupported()) GTEST_SKIP() << "needs ncclCommSplit (NCCL 2.18)";
  RunRanks(
      2, TwoGroupsOfTheSameMembers(),
      [](uint32_t r, NcclSession& s, InProcessJob&) {
        const CollectiveGroupDescriptor& g1 = s.descriptor().groups()[0];
        const CollectiveGroupDescriptor& g2 = s.descriptor().groups()[1];
        ASSERT_EQ(g1.members(), g2.members());
        NcclBackend backend(s);
        auto group1 = backend.Group(CollectiveScope::Group(g1.id()));
        auto group2 = backend.Group(CollectiveScope::Group(g2.id()));
        ASSERT_TRUE(group1.ok() && group2.ok());
        // Their own communicators, although their members are the same.
        EXPECT_NE(group1->communicator_name(), group2->communicator_name());
        auto lane0 = NcclExecutor::Create(s.device(), 0);
        auto lane1 = NcclExecutor::Create(s.device(), 1);
        ASSERT_TRUE(lane0.ok() && lane1.ok());
        auto x = Upload(Desc({4}), std::vector<float>(4, 1.0f + r), s.stream());
        auto y = Upload(Desc({3}), std::vector<float>(3, 10.0f * (r + 1)),
                        s.stream());
        auto submit_x = [&] {
          return backend.AllReduceSum(x, *group1, *lane1);
        };
        auto submit_y = [&] {
          return backend.AllGatherEven(y, 0, *group2, *lane0);
        };
        // First use in one order (NCCL connects peers on a communicator's
        // first use, a rendezvous of its own; lane 1 is split then).
        {
          auto a = submit_x();
          auto b = submit_y();
          ASSERT_TRUE(a.ok() && b.ok());
          ASSERT_OK(a->completion->Wait());
          ASSERT_OK(b->completion->Wait());
        }
        // Then rank 0 submits X, Y and rank 1 Y, X.
        auto first = r == 0 ? submit_x() : submit_y();
        auto second = r == 0 ? submit_y() : submit_x();
        ASSERT_TRUE(first.ok()) << first.status();
        ASSERT_TRUE(second.ok()) << second.status();
        ASSERT_OK(first->completion->Wait());
        ASSERT_OK(second->completion->Wait());
        const auto& sum = r == 0 ? first->output : second->output;
        const auto& gathered = r == 0 ? second->output : first->output;
        EXPECT_EQ(Download<float>(sum), std::vector<float>(4, 3.0f));
        EXPECT_EQ(Download<float>(gathered),
                  (std::vector<float>{10, 10, 10, 20, 20, 20}));
      },
      nullptr, TwoLanes());
}

// One lane is one order, as one Gloo executor is: two groups' work
// submitted in different orders on it deadlocks on both backends (on NCCL
// across two streams of the lane too: the communicators share the root's
// resources, so NCCL runs their kernels in launch order). It must end at
// op_timeout with a named error, never hang.
TEST_F(NcclMultiGpuTest, TwoGroupsOnOneLaneInDifferentOrdersFailAtOpTimeout) {
  if (!SplitSupported()) GTEST_SKIP() << "needs ncclCommSplit (NCCL 2.18)";
  if (testing::Standin() == nullptr) {
    GTEST_SKIP() << "a deadlock on real GPUs may need a device reset to "
                    "clear; shown against the stand-in";
  }
  NcclSessionOptions options = TwoLanes();
  options.op_timeout = absl::Seconds(2);
  RunRanks(
      2, TwoGroupsOfTheSameMembers(),
      [](uint32_t r, NcclSession& s, InProcessJob&) {
        const CollectiveGroupDescriptor& g1 = s.descriptor().groups()[0];
        const CollectiveGroupDescriptor& g2 = s.descriptor().groups()[1];
        NcclBackend backend(s);
        auto group1 = backend.Group(CollectiveScope::Group(g1.id()));
        auto group2 = backend.Group(CollectiveScope::Group(g2.id()));
        ASSERT_TRUE(group1.ok() && group2.ok());
        // Two streams, both lane 0.
        auto a = NcclExecutor::Create(s.device(), 0);
        auto b = NcclExecutor::Create(s.device(), 0);
        ASSERT_TRUE(a.ok() && b.ok());
        auto x = Upload(Desc({4}), std::vector<float>(4, 1.0f), s.stream());
        auto y = Upload(Desc({3}), std::vector<float>(3, 1.0f), s.stream());
        auto submit_x = [&] { return backend.AllReduceSum(x, *group1, *a); };
        auto submit_y = [&] {
          return backend.AllGatherEven(y, 0, *group2, *b);
        };
        {
          auto w1 = submit_x();
          auto w2 = submit_y();
          ASSERT_TRUE(w1.ok() && w2.ok());
          ASSERT_OK(w1->completion->Wait());
          ASSERT_OK(w2->completion->Wait());
        }
        const absl::Time start = absl::Now();
        auto first = r == 0 ? submit_x() : submit_y();
        auto second = r == 0 ? submit_y() : submit_x();
        absl::Status done =
            first.ok() ? first->completion->Wait() : first.status();
        if (done.ok()) {
          done = second.ok() ? second->completion->Wait() : second.status();
        }
        EXPECT_FALSE(done.ok());
        EXPECT_EQ(done.code(), absl::StatusCode::kDeadlineExceeded) << done;
        EXPECT_TRUE(absl::StrContains(done.message(), "did not")) << done;
        EXPECT_LT(absl::Now() - start, absl::Seconds(30));
      },
      nullptr, options);
}

// Splits where groups do not cover the world and list members out of
// order (docs/nccl.md, "Communicators and order"): ranks learn every rank's
// groups over the root, ranks outside a group pass NCCL_SPLIT_NOCOLOR, and
// a group's NCCL ranks follow its member list (the split's key), not world
// order. World 3: group 7 = [0, 1] (rank 2 in no group), group 8 = [2, 0].
TEST(NcclSplitTest, GroupsOfSomeRanksInTheirMemberOrder) {
  SKIP_WITHOUT_DEVICES(3);
  if (!SplitSupported()) GTEST_SKIP() << "needs ncclCommSplit (NCCL 2.18)";
  auto job = InProcessJob::Create(3);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r) {
    threads.emplace_back([r, &job] {
      std::vector<CollectiveGroupDescriptor> groups;
      if (r != 2) {
        groups.push_back(*CollectiveGroupDescriptor::Create(7, {0, 1}, r, r));
      }
      if (r != 1) {
        groups.push_back(
            *CollectiveGroupDescriptor::Create(8, {2, 0}, r == 2 ? 0 : 1, r));
      }
      auto descriptor = DistributedSessionDescriptor::Create(3, r, groups);
      ASSERT_TRUE(descriptor.ok()) << descriptor.status();
      auto cp = job->ForRank(r);
      NcclSessionOptions options;
      options.device = static_cast<int>(r);
      options.op_timeout = absl::Seconds(10);
      auto session = NcclSession::Open(*descriptor, cp.get(), options);
      ASSERT_TRUE(session.ok()) << session.status();
      NcclSession& s = **session;
      // Root, world and this rank's groups.
      EXPECT_EQ(s.communicator_count(), 2u + groups.size());
      auto x = Upload(Desc({1}), std::vector<float>{float(r + 1)}, s.stream());
      if (r != 2) {
        auto sum = s.AllReduceSum(CollectiveScope::Group(7), x);
        ASSERT_TRUE(sum.ok()) << sum.status();
        ASSERT_OK(sum->completion->Wait());
        EXPECT_EQ(Download<float>(sum->output), std::vector<float>{3.0f});
      }
      if (r != 1) {
        auto gathered = s.AllGather(CollectiveScope::Group(8), x);
        ASSERT_TRUE(gathered.ok()) << gathered.status();
        ASSERT_OK(gathered->completion->Wait());
        // Member order: rank 2's part first.
        EXPECT_EQ(Download<float>(gathered->output),
                  (std::vector<float>{3.0f, 1.0f}));
      }
      auto world = s.AllReduceSum(CollectiveScope::World(), x);
      ASSERT_TRUE(world.ok()) << world.status();
      ASSERT_OK(world->completion->Wait());
      EXPECT_EQ(Download<float>(world->output), std::vector<float>{6.0f});
    });
  }
  for (std::thread& t : threads) t.join();
}

// Executor lanes the session does not have are refused, nothing poisoned.
TEST_F(NcclMultiGpuTest, ALaneBeyondTheExecutorsIsRefused) {
  RunRanks(2, TwoGroupsOfTheSameMembers(),
           [](uint32_t r, NcclSession& s, InProcessJob&) {
             NcclBackend backend(s);
             auto world = backend.Group(CollectiveScope::World());
             ASSERT_TRUE(world.ok());
             auto lane3 = NcclExecutor::Create(s.device(), 3);
             ASSERT_TRUE(lane3.ok());
             auto x =
                 Upload(Desc({2}), std::vector<float>(2, 1.0f), s.stream());
             auto sum = backend.AllReduceSum(x, *world, *lane3);
             ASSERT_FALSE(sum.ok());
             EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
             EXPECT_TRUE(absl::StrContains(sum.status().message(), "lane 3"))
                 << sum.status();
             EXPECT_TRUE(backend.poison().ok());
           });
}

}  // namespace
}  // namespace rankd::dataplane::nccl
