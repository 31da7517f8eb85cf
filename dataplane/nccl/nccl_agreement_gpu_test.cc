// Agreement, disagreement and refusals in the NCCL backend on 2+ GPUs (or
// the stand-in): members that submit different operations are named, a
// transfer or collective of another dtype never succeeds, verify_agreement
// refuses disagreeing work before the payload, all_to_all_v counts that do
// not pair are refused first, and a member that refuses its own arguments
// is named by its peers.
//
// Every case skips (GTEST_SKIP with the reason, which says "no GPU") when
// there are too few CUDA devices or no CUDA runtime to load. Built twice
// (nccl_device_test.bzl): nccl_agreement_gpu_test for real GPUs and
// nccl_agreement_standin_test against the CPU stand-in; the GPU kit runs them
// all as nccl_gpu_test.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dataplane/collective_scope.h"
#include "dataplane/dtype.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/nccl_test_util.h"
#include "dataplane/nccl/testing/standin_control.h"
#include "dataplane/peer_transfer.h"
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

// Members that submit different operations at the same point are named
// with what each submitted. (The stand-in's kernels wait for each other,
// as NCCL's usually do; real NCCL's behaviour there is undefined.)
TEST_F(NcclMultiGpuTest, MembersThatSubmitDifferentOperationsAreNamed) {
  if (Standin() == nullptr) {
    GTEST_SKIP() << "mismatched NCCL collectives are undefined behaviour on "
                    "a GPU (they may hang, crash or return garbage); shown "
                    "on the CPU stand-in, where they wait";
  }
  NcclSessionOptions options;
  options.op_timeout = absl::Seconds(1);
  options.failure_attribution_grace = absl::Seconds(5);
  RunRanks(
      2, DataParallel(2),
      [&](uint32_t r, NcclSession& s, InProcessJob&) {
        const size_t n = r == 0 ? 4 : 8;
        auto x = Upload(Desc({n}), Floats(n), s.stream());
        auto sum = s.AllReduceSum(CollectiveScope::World(), x);
        ASSERT_TRUE(sum.ok()) << sum.status();
        absl::Status waited = sum->completion->Wait();
        // op_timeout aborted the session: a poisoned session never answers
        // InvalidArgument ("refused, still usable"; issue 34).
        EXPECT_EQ(waited.code(), absl::StatusCode::kFailedPrecondition)
            << waited;
        EXPECT_TRUE(absl::StrContains(
            waited.message(), "members disagree on operation #0 on world"))
            << waited;
        EXPECT_TRUE(absl::StrContains(
            waited.message(), "rank 0 submitted `all_reduce_sum f32[4]`"))
            << waited;
        EXPECT_TRUE(absl::StrContains(
            waited.message(), "rank 1 submitted `all_reduce_sum f32[8]`"))
            << waited;
      },
      nullptr, options);
}

// The same bytes under another dtype are not a successful transfer: an
// f32[4] sent and received as i32[4] fails on both ends, naming both.
TEST_F(NcclMultiGpuTest, ATransferReceivedAsAnotherDtypeFails) {
  RunRanks(2, DataParallel(2), [](uint32_t r, NcclSession& s, InProcessJob&) {
    absl::StatusOr<NcclSession::ValueSubmission> moved;
    if (r == 0) {
      auto x = Upload(Desc({4}), Floats(4), s.stream());
      moved = s.Send(CollectiveScope::World(), 1, x);
    } else {
      moved =
          s.Receive(CollectiveScope::World(), 0, Desc({4}, TensorDtype::kI32));
    }
    ASSERT_TRUE(moved.ok()) << moved.status();
    absl::Status waited = moved->completion->Wait();
    // The payload moved: poisoned, so not InvalidArgument (issue 34).
    EXPECT_EQ(waited.code(), absl::StatusCode::kFailedPrecondition) << waited;
    const std::string mine = r == 0 ? "f32[4]" : "i32[4]";
    EXPECT_TRUE(absl::StrContains(
        waited.message(),
        absl::StrCat("the ends disagree: the ",
                     r == 0 ? "send to" : "receive from", " member ", 1 - r,
                     " (rank ", 1 - r, "): this end has `bundle(", mine,
                     ")`, the other end submitted another transfer")))
        << waited;
    EXPECT_EQ(s.poison().code(), absl::StatusCode::kFailedPrecondition);
  });
}

// Same-sized collectives of different dtypes pair in NCCL; the agreement
// record names the members (here the payload then waits, and op_timeout
// ends it, on the stand-in; either way nobody reports success).
TEST_F(NcclMultiGpuTest, ACollectiveOfAnotherDtypeNeverSucceeds) {
  NcclSessionOptions options;
  options.op_timeout = absl::Seconds(2);
  options.failure_attribution_grace = absl::Seconds(5);
  RunRanks(
      2, DataParallel(2),
      [](uint32_t r, NcclSession& s, InProcessJob&) {
        const TensorDtype dtype =
            r == 0 ? TensorDtype::kF32 : TensorDtype::kI32;
        auto x =
            Upload(Desc({4}, dtype), std::vector<int32_t>(4, 1), s.stream());
        auto sum = s.AllReduceSum(CollectiveScope::World(), x);
        ASSERT_TRUE(sum.ok()) << sum.status();
        absl::Status waited = sum->completion->Wait();
        // Found after the payload (or at op_timeout): the session is
        // poisoned, so not InvalidArgument (issue 34).
        EXPECT_EQ(waited.code(), absl::StatusCode::kFailedPrecondition)
            << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(), "members disagree"))
            << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(), "i32[4]")) << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(), "f32[4]")) << waited;
      },
      nullptr, options);
}

// verify_agreement: the agreement records travel before the payload, so
// work whose members disagree is refused on every member before NCCL sees
// any of it (safe on a GPU: nothing mismatched is ever launched), well
// before op_timeout, and the session stays usable.
TEST_F(NcclMultiGpuTest,
       VerifyAgreementRefusesDisagreeingWorkBeforeThePayload) {
  NcclSessionOptions options;
  options.verify_agreement = true;
  options.op_timeout = absl::Seconds(60);
  RunRanks(
      2, DataParallel(2),
      [](uint32_t r, NcclSession& s, InProcessJob&) {
        auto stream = s.stream();
        const CollectiveScope world = CollectiveScope::World();
        const absl::Time start = absl::Now();
        // Collectives of different shapes (would hang without the check).
        const size_t n = r == 0 ? 4 : 8;
        auto x = Upload(Desc({n}), Floats(n, 1), stream);
        auto sum = s.AllReduceSumInto(world, x, x);  // in place
        ASSERT_TRUE(sum.ok()) << sum.status();
        absl::Status waited = sum->completion->Wait();
        EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
        EXPECT_TRUE(absl::StrContains(
            waited.message(),
            absl::StrCat("rank ", r, " submitted `all_reduce_sum f32[", n,
                         "]`; rank ", 1 - r,
                         " submitted another one; nothing "
                         "moved")))
            << waited;
        EXPECT_EQ(Download<float>(x), Floats(n, 1)) << "nothing moved";
        ASSERT_OK(s.poison());
        // all_to_all_v against all_reduce_sum: the fingerprints go first,
        // the same size on both, so the counts never meet a stranger.
        auto rows = Upload(Desc({2}), Floats(2), stream);
        auto other = r == 0 ? s.AllToAllV(world, rows, {1, 1}, {1, 1})
                            : s.AllReduceSum(world, rows);
        ASSERT_TRUE(other.ok()) << other.status();
        waited = other->completion->Wait();
        EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(), "members disagree"))
            << waited;
        ASSERT_OK(s.poison());
        // A transfer received as another dtype: refused on both ends.
        absl::StatusOr<NcclSession::ValueSubmission> moved;
        if (r == 0) {
          moved = s.Send(world, 1, Upload(Desc({4}), Floats(4), stream));
        } else {
          moved = s.Receive(world, 0, Desc({4}, TensorDtype::kI32));
        }
        ASSERT_TRUE(moved.ok()) << moved.status();
        waited = moved->completion->Wait();
        EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
        EXPECT_TRUE(
            absl::StrContains(waited.message(), "the ends disagree: the "))
            << waited;
        EXPECT_TRUE(absl::EndsWith(waited.message(), "; nothing moved"))
            << waited;
        ASSERT_OK(s.poison());
        // A batch: the transfer 1 -> 0 agrees and moves; 0 -> 1 does not
        // (rank 1 expects f32[2]) and is left out on both ends.
        auto mine = Upload(Desc({2}, TensorDtype::kI32),
                           std::vector<int32_t>{static_cast<int32_t>(r + 5),
                                                static_cast<int32_t>(r + 6)},
                           stream);
        auto received =
            r == 0 ? Upload(Desc({2}, TensorDtype::kI32),
                            std::vector<int32_t>{0, 0}, stream)
                   : Upload(Desc({2}), std::vector<float>{-1, -1}, stream);
        const std::vector<PeerValue<DeviceTensor>> sends = {{1 - r, mine}};
        const std::vector<PeerValue<DeviceTensor>> receives = {
            {1 - r, received}};
        auto batch = s.BatchSendReceive(world, sends, receives);
        ASSERT_TRUE(batch.ok()) << batch.status();
        waited = batch->completion->Wait();
        EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(), "the ends disagree"))
            << waited;
        EXPECT_TRUE(
            absl::EndsWith(waited.message(), "; those transfers moved nothing"))
            << waited;
        if (r == 0) {
          EXPECT_EQ(Download<int32_t>(received), (std::vector<int32_t>{6, 7}));
        } else {
          EXPECT_EQ(Download<float>(received), (std::vector<float>{-1, -1}));
        }
        ASSERT_OK(s.poison());
        // Refusals took no deadline, and agreeing work still runs.
        EXPECT_LT(absl::Now() - start, absl::Seconds(20));
        auto y = Upload(Desc({3}), Floats(3, static_cast<float>(r)), stream);
        auto good = s.AllReduceSum(world, y);
        ASSERT_TRUE(good.ok()) << good.status();
        ASSERT_OK(good->completion->Wait());
        EXPECT_EQ(Download<float>(good->output), (std::vector<float>{1, 3, 5}));
      },
      nullptr, options);
}

// all_to_all_v counts that do not pair are refused before the payload
// whatever verify_agreement says (NCCL would truncate or hang), naming the
// members and the counts; the session stays usable.
TEST_F(NcclMultiGpuTest, AllToAllVCountsThatDoNotPairAreRefusedFirst) {
  RunRanks(2, DataParallel(2), [](uint32_t r, NcclSession& s, InProcessJob&) {
    auto stream = s.stream();
    auto rows = Upload(Desc({3, 2}), Floats(6), stream);
    // Rank 0 sends 2 rows to rank 1, which expects 1 from it.
    const std::vector<size_t> send =
        r == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{2, 1};
    const std::vector<size_t> receive =
        r == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{1, 1};
    auto out = s.AllToAllV(CollectiveScope::World(), rows, send, receive);
    ASSERT_TRUE(out.ok()) << out.status();
    absl::Status waited = out->completion->Wait();
    EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
    EXPECT_TRUE(absl::StrContains(waited.message(),
                                  "members disagree on the counts: member 0 "
                                  "(rank 0) sends 2 rows to member 1"))
        << waited;
    ASSERT_OK(s.poison());
    auto sum = s.AllReduceSum(CollectiveScope::World(),
                              Upload(Desc({2}), Floats(2, 1), stream));
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_OK(sum->completion->Wait());
    EXPECT_EQ(Download<float>(sum->output), (std::vector<float>{2, 4}));
  });
}

// Validation can differ between members (an output of the wrong size, a
// tensor on another device, an unsummable dtype on one rank only). Members
// that check agreement first wait in Submit for every member's record, so a
// member that refuses on its own arguments still sends one saying so: its
// peers refuse the operation at once, naming it, instead of waiting for
// op_timeout (issue 10, defect 8), and the session stays usable on all.
TEST_F(NcclMultiGpuTest, AMemberThatRefusesItsOwnArgumentsIsNamedByItsPeers) {
  NcclSessionOptions options;
  options.verify_agreement = true;
  options.op_timeout = absl::Seconds(60);
  RunRanks(
      2, DataParallel(2),
      [](uint32_t r, NcclSession& s, InProcessJob&) {
        auto stream = s.stream();
        const CollectiveScope world = CollectiveScope::World();
        const absl::Time start = absl::Now();
        auto told = [](const absl::Status& refused, absl::string_view why) {
          EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument)
              << refused;
          EXPECT_TRUE(absl::StrContains(refused.message(), why)) << refused;
          EXPECT_TRUE(absl::StrContains(refused.message(),
                                        "the other members of world are told"))
              << refused;
        };
        auto named = [](const absl::Status& waited, absl::string_view what) {
          EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument)
              << waited;
          EXPECT_TRUE(absl::StrContains(waited.message(), what)) << waited;
        };
        // A collective: rank 0's output has the wrong shape.
        auto x = Upload(Desc({4}), Floats(4, 1), stream);
        auto wrong = Upload(Desc({8}), Floats(8), stream);
        auto sum = r == 0 ? s.AllReduceSumInto(world, x, wrong)
                          : s.AllReduceSum(world, x);
        if (r == 0) {
          ASSERT_FALSE(sum.ok());
          told(sum.status(), "f32[8]");
        } else {
          ASSERT_TRUE(sum.ok()) << sum.status();
          named(sum->completion->Wait(),
                "rank 0 refused it on its own arguments");
        }
        ASSERT_OK(s.poison());
        // A transfer: the tensor rank 0 sends is on the other device.
        absl::StatusOr<NcclSession::ValueSubmission> moved;
        if (r == 0) {
          auto elsewhere = CudaStream::Create(1);
          ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
          moved = s.Send(world, 1, Upload(Desc({4}), Floats(4), *elsewhere));
          ASSERT_FALSE(moved.ok());
          told(moved.status(), "is not on this session's device");
        } else {
          moved = s.Receive(world, 0, Desc({4}));
          ASSERT_TRUE(moved.ok()) << moved.status();
          named(moved->completion->Wait(),
                "the receive from member 0 (rank 0): this end has "
                "`bundle(f32[4])`, the other end refused it on its own "
                "arguments");
        }
        ASSERT_OK(s.poison());
        // A batch: rank 1's send is on the other device; rank 0's receive
        // from it is left out, and so is its send (rank 1 refused the whole
        // batch).
        auto device0 = CudaStream::Create(0);
        ASSERT_TRUE(device0.ok()) << device0.status();
        auto mine = Upload(Desc({2}), Floats(2, static_cast<float>(r)),
                           r == 1 ? *device0 : stream);
        auto received = Upload(Desc({2}), std::vector<float>{-1, -1}, stream);
        const std::vector<PeerValue<DeviceTensor>> sends = {{1 - r, mine}};
        const std::vector<PeerValue<DeviceTensor>> receives = {
            {1 - r, received}};
        auto batch = s.BatchSendReceive(world, sends, receives);
        if (r == 1) {
          ASSERT_FALSE(batch.ok());
          told(batch.status(), "is not on this session's device");
        } else {
          ASSERT_TRUE(batch.ok()) << batch.status();
          named(batch->completion->Wait(),
                "the other end refused it on its own arguments");
          EXPECT_EQ(Download<float>(received), (std::vector<float>{-1, -1}));
        }
        ASSERT_OK(s.poison());
        // A batch whose buffers are wrong: rank 0's two receives write the
        // same bytes.
        if (r == 0) {
          auto out = Upload(Desc({2}), std::vector<float>{-1, -1}, stream);
          const std::vector<PeerValue<DeviceTensor>> twice = {{1, out},
                                                              {1, out}};
          auto refused = s.BatchSendReceive(world, {}, twice);
          ASSERT_FALSE(refused.ok());
          told(refused.status(), "overlaps the output of receive 0");
        } else {
          const std::vector<PeerValue<DeviceTensor>> two = {
              {0, Upload(Desc({2}), Floats(2), stream)},
              {0, Upload(Desc({2}), Floats(2), stream)}};
          auto sent = s.BatchSendReceive(world, two, {});
          ASSERT_TRUE(sent.ok()) << sent.status();
          named(sent->completion->Wait(),
                "the other end refused it on its own arguments");
        }
        ASSERT_OK(s.poison());
        // Refusals took no deadline, and agreeing work still runs.
        EXPECT_LT(absl::Now() - start, absl::Seconds(20));
        auto y = Upload(Desc({3}), Floats(3, static_cast<float>(r)), stream);
        auto good = s.AllReduceSum(world, y);
        ASSERT_TRUE(good.ok()) << good.status();
        ASSERT_OK(good->completion->Wait());
        EXPECT_EQ(Download<float>(good->output), (std::vector<float>{1, 3, 5}));
      },
      nullptr, options);
}

// all_to_all_v checks its counts first whatever verify_agreement says, so
// a member's own refusal reaches its peers by default too.
TEST_F(NcclMultiGpuTest, AnAllToAllVRefusedByOneMemberIsRefusedByAll) {
  NcclSessionOptions options;
  options.op_timeout = absl::Seconds(60);
  RunRanks(
      2, DataParallel(2),
      [](uint32_t r, NcclSession& s, InProcessJob&) {
        auto stream = s.stream();
        const absl::Time start = absl::Now();
        auto rows = Upload(Desc({2, 2}), Floats(4), stream);
        // Rank 0 sends 3 rows of its 2.
        const std::vector<size_t> send =
            r == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{1, 1};
        auto out = s.AllToAllV(CollectiveScope::World(), rows, send, {1, 1});
        if (r == 0) {
          ASSERT_FALSE(out.ok());
          EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument)
              << out.status();
          EXPECT_TRUE(absl::StrContains(out.status().message(),
                                        "are told and refuse it too"))
              << out.status();
        } else {
          ASSERT_TRUE(out.ok()) << out.status();
          absl::Status waited = out->completion->Wait();
          EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument)
              << waited;
          EXPECT_TRUE(absl::StrContains(
              waited.message(), "rank 0 refused it on its own arguments"))
              << waited;
        }
        ASSERT_OK(s.poison());
        EXPECT_LT(absl::Now() - start, absl::Seconds(20));
        auto sum = s.AllReduceSum(CollectiveScope::World(),
                                  Upload(Desc({2}), Floats(2, 1), stream));
        ASSERT_TRUE(sum.ok()) << sum.status();
        ASSERT_OK(sum->completion->Wait());
        EXPECT_EQ(Download<float>(sum->output), (std::vector<float>{2, 4}));
      },
      nullptr, options);
}

}  // namespace
}  // namespace rankd::dataplane::nccl
