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
        // Told to the scope's members, or on a route to its other end, in
        // the words Gloo uses (dataplane/agreement.h, RefusalAfterTelling).
        auto told = [](const absl::Status& refused, absl::string_view why,
                       absl::string_view to =
                           " (the other members of world are told and "
                           "refuse it too)") {
          EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument)
              << refused;
          EXPECT_TRUE(absl::StrContains(refused.message(), why)) << refused;
          EXPECT_TRUE(absl::EndsWith(refused.message(), to)) << refused;
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
          told(moved.status(), "is not on this session's device",
               " (the other end of route 0->1 in world is told and refuses "
               "it too)");
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

// A refusal on a group that is not the world names that group, and one on a
// route names the route, as on Gloo: never the communicator under them
// (group 8, the data-parallel group of 2 ranks, has the world's members, so
// NCCL splits it a communicator of its own, "g8-world", or shares the
// world's).
TEST_F(NcclMultiGpuTest, ARefusalOnAGroupOrARouteNamesItNotTheCommunicator) {
  NcclSessionOptions options;
  options.verify_agreement = true;
  options.op_timeout = absl::Seconds(60);
  RunRanks(
      2, DataParallel(2),
      [](uint32_t r, NcclSession& s, InProcessJob&) {
        auto stream = s.stream();
        const CollectiveScope group = CollectiveScope::Group(8);
        auto refused_by_peer = [](const absl::Status& waited) {
          EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument)
              << waited;
          EXPECT_TRUE(absl::StrContains(waited.message(),
                                        "refused it on its own arguments"))
              << waited;
        };
        // A route of group 8: the tensor rank 0 sends is on the other
        // device.
        absl::StatusOr<NcclSession::ValueSubmission> moved;
        if (r == 0) {
          auto elsewhere = CudaStream::Create(1);
          ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
          moved = s.Send(group, 1, Upload(Desc({4}), Floats(4), *elsewhere));
          ASSERT_FALSE(moved.ok());
          EXPECT_EQ(moved.status().code(), absl::StatusCode::kInvalidArgument);
          EXPECT_TRUE(absl::EndsWith(moved.status().message(),
                                     " (the other end of route 0->1 in group "
                                     "8 is told and refuses it too)"))
              << moved.status();
        } else {
          moved = s.Receive(group, 0, Desc({4}));
          ASSERT_TRUE(moved.ok()) << moved.status();
          refused_by_peer(moved->completion->Wait());
        }
        ASSERT_OK(s.poison());
        // A collective of group 8: rank 1's output has the wrong shape.
        auto x = Upload(Desc({4}), Floats(4, 1), stream);
        auto wrong = Upload(Desc({8}), Floats(8), stream);
        auto sum = r == 1 ? s.AllReduceSumInto(group, x, wrong)
                          : s.AllReduceSum(group, x);
        if (r == 1) {
          ASSERT_FALSE(sum.ok());
          EXPECT_TRUE(absl::EndsWith(sum.status().message(),
                                     " (the other members of group 8 are told "
                                     "and refuse it too)"))
              << sum.status();
        } else {
          ASSERT_TRUE(sum.ok()) << sum.status();
          refused_by_peer(sum->completion->Wait());
        }
        ASSERT_OK(s.poison());
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

// The MoE-shaped loop (issue 34, defect 2): 32 all_to_all_v in a row whose
// counts change every step (five count patterns in turn). Counts are
// checked before the payload the first time this member submits them
// (host waits for the records); once agreed, the same counts go ahead,
// checked as they arrive, so the steady state never stops the host. The
// stand-in counts the submitting thread's waits for device work
// (synchronizations, events polled while not ready, copies to or from
// pageable memory): four per step before (two record launches waited
// for, two read-backs), none now.
TEST_F(NcclMultiGpuTest, AnAllToAllVLoopNeverStopsTheHostOnceItsCountsAgreed) {
  const testing::StandinControl* standin = Standin();
  if (standin == nullptr) {
    GTEST_SKIP() << "counts the submitting thread's host waits inside the "
                    "CPU stand-in; with the real NCCL, "
                    "bench/nccl_overhead_bench's MoE loop times it";
  }
  constexpr int kSteps = 32, kPatterns = 5, kWidth = 2;
  constexpr uint32_t kWorld = 2;
  // Rows member `src` sends member `dst` at `step`.
  auto rows = [](int step, uint32_t src, uint32_t dst) -> size_t {
    return 1 + (step + 3 * src + dst) % kPatterns;
  };
  RunRanks(
      kWorld, DataParallel(kWorld),
      [&](uint32_t r, NcclSession& s, InProcessJob&) {
        auto stream = s.stream();
        const CollectiveScope world = CollectiveScope::World();
        std::vector<std::vector<size_t>> send(kSteps), recv(kSteps);
        std::vector<DeviceTensor> in, out;
        for (int t = 0; t < kSteps; ++t) {
          size_t ins = 0, outs = 0;
          for (uint32_t p = 0; p < kWorld; ++p) {
            send[t].push_back(rows(t, r, p));
            recv[t].push_back(rows(t, p, r));
            ins += send[t].back();
            outs += recv[t].back();
          }
          // Row i of this rank's step-t input holds 1000 * rank + 100 * t + i.
          std::vector<float> values;
          for (size_t i = 0; i < ins; ++i) {
            for (int k = 0; k < kWidth; ++k) {
              values.push_back(1000.0f * r + 100.0f * t +
                               static_cast<float>(i));
            }
          }
          in.push_back(Upload(Desc({ins, kWidth}), values, stream));
          out.push_back(Upload(Desc({outs, kWidth}),
                               std::vector<float>(outs * kWidth, -1), stream));
        }
        // Warm-up: one step of each count pattern, checked first.
        for (int t = 0; t < kPatterns; ++t) {
          auto y = s.AllToAllVInto(world, in[t], send[t], recv[t], out[t]);
          ASSERT_TRUE(y.ok()) << y.status();
          ASSERT_OK(y->completion->Wait());
        }
        const int64_t syncs0 = standin->thread_host_syncs();
        std::vector<decltype(NcclSession::ValueSubmission::completion)> pending;
        for (int t = 0; t < kSteps; ++t) {
          auto y = s.AllToAllVInto(world, in[t], send[t], recv[t], out[t]);
          ASSERT_TRUE(y.ok()) << y.status();
          pending.push_back(y->completion);
        }
        const int64_t syncs = standin->thread_host_syncs() - syncs0;
        EXPECT_EQ(syncs, 0)
            << "rank " << r << " waited for device work " << syncs
            << " times while submitting " << kSteps << " all_to_all_v";
        for (auto& c : pending) ASSERT_OK(c->Wait());
        // Every step's rows arrived from where they should, in source order.
        for (int t = 0; t < kSteps; ++t) {
          std::vector<float> want;
          for (uint32_t src = 0; src < kWorld; ++src) {
            size_t first = 0;  // where src's rows for r begin in its input
            for (uint32_t d = 0; d < r; ++d) first += rows(t, src, d);
            for (size_t i = 0; i < rows(t, src, r); ++i) {
              for (int k = 0; k < kWidth; ++k) {
                want.push_back(1000.0f * src + 100.0f * t +
                               static_cast<float>(first + i));
              }
            }
          }
          EXPECT_EQ(Download<float>(out[t]), want)
              << "rank " << r << " step " << t;
        }
        EXPECT_TRUE(s.poison().ok()) << s.poison();
      });
}

// Counts that went ahead and do not pair still never pass, hang or
// truncate silently: two members each submit counts they saw agreed before
// (so neither checks first), but from different steps, so rank 0 sends
// rank 1 two rows where it expects one. The records, which travel ahead of
// the payload, name the pair as soon as they arrive (the watchdog checks
// them; the completion again), every member aborts, well before
// op_timeout, and the session is poisoned: the payload was already queued
// and cannot be left out. A member that checks first against a peer that
// went ahead does the same.
TEST_F(NcclMultiGpuTest, CountsThatWentAheadAndDoNotPairAreNamedWithoutAHang) {
  NcclSessionOptions options;
  options.op_timeout = absl::Seconds(60);
  for (const bool rank1_ahead : {true, false}) {
    RunRanks(
        2, DataParallel(2),
        [&](uint32_t r, NcclSession& s, InProcessJob&) {
          auto stream = s.stream();
          const CollectiveScope world = CollectiveScope::World();
          auto x = Upload(Desc({3, 2}), Floats(6), stream);
          // Two count patterns that pair: A (one row each way) and B (rank 0
          // sends rank 1 two rows).
          const std::vector<size_t> a = {1, 1};
          const std::vector<size_t> b_send =
              r == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{1, 1};
          const std::vector<size_t> b_recv =
              r == 0 ? std::vector<size_t>{1, 1} : std::vector<size_t>{2, 1};
          auto xa = Upload(Desc({2, 2}), Floats(4), stream);
          auto xb = r == 0 ? x : xa;
          for (int warm = 0; warm < 2; ++warm) {
            auto y = warm == 0 ? s.AllToAllV(world, xa, a, a)
                               : s.AllToAllV(world, xb, b_send, b_recv);
            ASSERT_TRUE(y.ok()) << y.status();
            ASSERT_OK(y->completion->Wait());
          }
          // Rank 0 repeats B; rank 1 repeats A (ahead), or submits counts
          // it never did (checked first): rank 0's two rows meet a receive
          // of one.
          const std::vector<size_t> fresh = {2, 1};
          auto y = r == 0        ? s.AllToAllV(world, x, b_send, b_recv)
                   : rank1_ahead ? s.AllToAllV(world, xa, a, a)
                                 : s.AllToAllV(world, x, fresh, {1, 1});
          const absl::Time start = absl::Now();
          absl::Status got = y.ok() ? y->completion->Wait() : y.status();
          EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << "rank " << r;
          EXPECT_EQ(got.code(), absl::StatusCode::kFailedPrecondition)
              << "rank " << r << ": " << got;
          EXPECT_TRUE(absl::StrContains(
              got.message(),
              "members disagree on the counts: member 0 (rank "
              "0) sends 2 rows to member 1 (rank 1), which "
              "expects 1 from it"))
              << "rank " << r << ": " << got;
          EXPECT_FALSE(s.poison().ok()) << "rank " << r;
        },
        nullptr, options);
  }
}

// The agreement record every operation carries (issue 34, defect 10)
// costs no host synchronization: it is staged from page-locked memory and
// copied back there before the completion event, so neither a submission
// nor the check at completion waits for the device. The stand-in counts
// the thread's waits (a pageable copy counts, as CUDA may synchronize for
// it); before, every operation made two (the record's pageable copy in,
// its blocking read-back at completion).
TEST_F(NcclMultiGpuTest, TheAgreementRecordCostsNoHostSynchronization) {
  const testing::StandinControl* standin = Standin();
  if (standin == nullptr) {
    GTEST_SKIP() << "counts the thread's host waits inside the CPU stand-in; "
                    "with the real NCCL, bench/nccl_overhead_bench times it";
  }
  constexpr int kOps = 16;
  RunRanks(2, DataParallel(2), [&](uint32_t r, NcclSession& s, InProcessJob&) {
    auto stream = s.stream();
    const CollectiveScope world = CollectiveScope::World();
    auto x = Upload(Desc({8}), Floats(8, static_cast<float>(r)), stream);
    auto first = s.AllReduceSumInto(world, x, x);  // connects the peers
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_OK(first->completion->Wait());
    const int64_t syncs0 = standin->thread_host_syncs();
    std::vector<decltype(NcclSession::ValueSubmission::completion)> pending;
    for (int i = 0; i < kOps; ++i) {
      auto y = s.AllReduceSumInto(world, x, x);
      ASSERT_TRUE(y.ok()) << y.status();
      pending.push_back(y->completion);
    }
    const int64_t submitting = standin->thread_host_syncs() - syncs0;
    ASSERT_OK(stream->Synchronize());  // one wait, for all of them
    const int64_t syncs1 = standin->thread_host_syncs();
    for (auto& c : pending) ASSERT_OK(c->Wait());  // each checks its records
    const int64_t checking = standin->thread_host_syncs() - syncs1;
    EXPECT_EQ(submitting, 0) << "rank " << r;
    EXPECT_EQ(checking, 0) << "rank " << r;
    EXPECT_TRUE(s.poison().ok()) << s.poison();
  });
}

}  // namespace
}  // namespace rankd::dataplane::nccl
