// The NCCL backend's operations on real devices (or the stand-in): on one
// GPU, a world-1 session's capabilities, every dtype's sum, unsummable
// dtypes, gathers and groups, the all_to_all_v self copy, chained ready
// events and every NcclBackend operation; on 2+ GPUs (one thread per
// rank), collectives across ranks, batched send/receive, topology groups,
// inner-axis gathers past the maximum pitch and the session tags of
// sessions opened one after another.
//
// Every case skips (GTEST_SKIP with the reason, which says "no GPU") when
// there are too few CUDA devices or no CUDA runtime to load. Built twice
// (nccl_device_test.bzl): nccl_operations_gpu_test for real GPUs and
// nccl_operations_standin_test against the CPU stand-in; the GPU kit runs them
// all as nccl_gpu_test.
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/topology.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/completion.h"
#include "dataplane/dtype.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/internal/session_impl.h"
#include "dataplane/nccl/nccl_backend.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/nccl_test_util.h"
#include "dataplane/nccl/testing/standin_control.h"
#include "dataplane/nccl/testing/stream_capture.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "dataplane/value_descriptor.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
namespace {

using ::rankd::dataplane::testing::InProcessJob;
using testing::DataParallel;
using testing::Desc;
using testing::Download;
using testing::Floats;
using testing::MultiWorld;
using testing::NcclGpuTest;
using testing::NcclMultiGpuTest;
using testing::RunInFreshProcess;
using testing::RunRanks;
using testing::Standin;
using testing::StreamCapture;
using testing::Upload;

TEST_F(NcclGpuTest, World1SessionAdvertisesEverything) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  EXPECT_TRUE(session->ready());
  DistributedCapabilities caps = session->capabilities();
  EXPECT_TRUE(caps.world_collectives);
  EXPECT_TRUE(caps.point_to_point);
  EXPECT_TRUE(caps.variable_all_to_all);
  EXPECT_TRUE(caps.exact_completion);
  EXPECT_EQ(caps.collective_groups,
            (std::set<CollectiveGroupId>{1, 2, 3, 4, 5}));
  // One root (ncclCommInitRank, a local unique id: nothing brokered) and
  // every scope split from it, groups with the world's members too: root,
  // world and 5 groups. Where NCCL has no ncclCommSplit, every group of a
  // one-rank world shares the world's communicator.
  EXPECT_EQ(session->communicator_count(), SplitSupported() ? 7u : 1u);
  EXPECT_EQ(job_->kv_sets(), 0);
  EXPECT_EQ(session->device(), 0);
  EXPECT_NE(session->stream(), nullptr);
}

// NcclSessionOptions::restrict_capabilities, as Gloo's: what is left out
// fails closed naming the capability, before any native work.
TEST_F(NcclGpuTest, RestrictedCapabilitiesFailClosed) {
  NcclSessionOptions options;
  DistributedCapabilities allow;
  allow.world_collectives = true;
  allow.collective_groups = {2, 99};
  options.restrict_capabilities = allow;
  auto session = OpenWorld1(options);
  ASSERT_NE(session, nullptr);
  DistributedCapabilities caps = session->capabilities();
  EXPECT_TRUE(caps.world_collectives);
  EXPECT_EQ(caps.collective_groups, (std::set<CollectiveGroupId>{2}));
  EXPECT_FALSE(caps.point_to_point);
  EXPECT_FALSE(caps.variable_all_to_all);
  EXPECT_FALSE(caps.exact_completion);
  auto x = Upload(Desc({2}), Floats(2), session->stream());
  auto send = session->Send(CollectiveScope::World(), 0, x);
  EXPECT_EQ(send.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(
      send.status().message(),
      "send needs capability 'point_to_point', which this backend does not "
      "advertise"))
      << send.status();
  auto group3 = session->AllReduceSum(CollectiveScope::Group(3), x);
  EXPECT_EQ(group3.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(
      absl::StrContains(group3.status().message(), "collective_groups"));
  // What is allowed still runs; without exact_completion its completion
  // does not offer the quarantine.
  auto sum = session->AllReduceSum(CollectiveScope::World(), x);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_FALSE(sum->completion->SupportsCancellation(
      CancellationMode::kQuarantineUntilComplete));
  ASSERT_OK(sum->completion->Wait());
  EXPECT_TRUE(session->poison().ok());
}

TEST_F(NcclGpuTest, AllReduceSumEveryDtype) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto stream = session->stream();
  for (TensorDtype dtype :
       {TensorDtype::kF32, TensorDtype::kF16, TensorDtype::kBf16,
        TensorDtype::kF64, TensorDtype::kI8, TensorDtype::kU8,
        TensorDtype::kI32, TensorDtype::kU32, TensorDtype::kI64,
        TensorDtype::kU64, TensorDtype::kComplex64}) {
    const ValueDescriptor desc = Desc({5, 3}, dtype);
    std::vector<uint8_t> bytes(desc.byte_size());
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (i * 13) % 61;
    auto in = DeviceTensor::FromHost(desc, bytes.data(), bytes.size(), stream);
    ASSERT_TRUE(in.ok()) << in.status();
    auto sum = session->AllReduceSum(CollectiveScope::World(), *in);
    ASSERT_TRUE(sum.ok()) << DtypeName(dtype) << ": " << sum.status();
    ASSERT_OK(sum->completion->Wait());
    EXPECT_TRUE(sum->completion->IsComplete());
    EXPECT_EQ(sum->output.descriptor(), desc);
    // A sum over one rank is the input, bit for bit.
    EXPECT_EQ(Download<uint8_t>(sum->output), bytes) << DtypeName(dtype);
  }
  EXPECT_TRUE(session->poison().ok());
}

TEST_F(NcclGpuTest, UnsummableDtypesFailBeforeNativeWork) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto b = Upload(Desc({4}, TensorDtype::kBool),
                  std::vector<uint8_t>{1, 0, 1, 1}, session->stream());
  auto sum = session->AllReduceSum(CollectiveScope::World(), b);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(sum.status().message(), "bool"));
  EXPECT_TRUE(session->poison().ok());
  EXPECT_TRUE(session->capabilities().world_collectives);
}

TEST_F(NcclGpuTest, AllGatherAndGroups) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  const std::vector<float> values = Floats(6);
  auto x = Upload(Desc({2, 3}), values, session->stream());
  for (CollectiveScope scope :
       {CollectiveScope::World(), CollectiveScope::Group(1),
        CollectiveScope::Group(2), CollectiveScope::Group(5)}) {
    auto g = session->AllGather(scope, x);
    ASSERT_TRUE(g.ok()) << scope.ToString() << ": " << g.status();
    ASSERT_OK(g->completion->Wait());
    EXPECT_EQ(g->output.descriptor().shape(), (std::vector<size_t>{2, 3}));
    EXPECT_EQ(Download<float>(g->output), values);
  }
  auto scalar = Upload(Desc({}), std::vector<float>{4.25f}, session->stream());
  auto g = session->AllGather(CollectiveScope::World(), scalar);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_OK(g->completion->Wait());
  EXPECT_EQ(g->output.descriptor().shape(), std::vector<size_t>{1});
  EXPECT_EQ(Download<float>(g->output), std::vector<float>{4.25f});
  EXPECT_EQ(session->AllGather(CollectiveScope::Group(9), x).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(NcclGpuTest, AllToAllVIsASelfCopy) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  const std::vector<float> values = Floats(6, 10);
  auto x = Upload(Desc({3, 2}), values, session->stream());
  const std::vector<size_t> three = {3};
  auto y = session->AllToAllV(CollectiveScope::World(), x, three, three);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_OK(y->completion->Wait());
  EXPECT_EQ(Download<float>(y->output), values);
  // Zero rows both ways: an empty but valid exchange.
  auto empty = DeviceTensor::Allocate(*ValueDescriptor::Rows(0, Desc({2})),
                                      session->stream());
  ASSERT_TRUE(empty.ok());
  const std::vector<size_t> zero = {0};
  auto z = session->AllToAllV(CollectiveScope::World(), *empty, zero, zero);
  ASSERT_TRUE(z.ok()) << z.status();
  ASSERT_OK(z->completion->Wait());
  EXPECT_EQ(z->output.descriptor().rows(), 0u);
  // Mismatched totals and self slot: InvalidArgument, no poison.
  const std::vector<size_t> two = {2};
  EXPECT_EQ(
      session->AllToAllV(CollectiveScope::World(), x, two, two).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->AllToAllV(CollectiveScope::World(), x, three, two)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(session->poison().ok());
}

TEST_F(NcclGpuTest, PointToPointNeedsAPeer) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto x = Upload(Desc({2}), Floats(2), session->stream());
  EXPECT_EQ(session->Send(CollectiveScope::World(), 0, x).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->Receive(CollectiveScope::World(), 1, x.descriptor())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(session->poison().ok());
}

TEST_F(NcclGpuTest, ChainedOperationsFollowReadyEvents) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto executor = NcclExecutor::Create(0);
  ASSERT_TRUE(executor.ok());
  const std::vector<float> values = Floats(1024, 3);
  auto x = Upload(Desc({1024}), values, executor->stream());
  DeviceTensor current = x;
  std::vector<std::shared_ptr<BoundedCompletion>> completions;
  for (int i = 0; i < 8; ++i) {
    auto next = session->AllReduceSum(CollectiveScope::World(), current);
    ASSERT_TRUE(next.ok()) << next.status();
    completions.push_back(next->completion);
    current = next->output;  // consumed by the next op via its ready event
  }
  ASSERT_OK(completions.back()->Wait());
  for (auto& c : completions) EXPECT_TRUE(c->IsComplete());
  EXPECT_EQ(Download<float>(current), values);
}

TEST_F(NcclGpuTest, BackendOperations) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  NcclBackend backend(*session);
  auto group = backend.Group(CollectiveScope::World());
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->size(), 1u);
  auto executor = NcclExecutor::Create(0);
  ASSERT_TRUE(executor.ok());
  const std::vector<float> values = Floats(6, 1);
  auto x = Upload(Desc({2, 3}), values, executor->stream());

  auto sum = dataplane::AllReduceSum(backend, x, *group, *executor);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_OK(sum->completion->Wait());
  EXPECT_EQ(Download<float>(sum->output), values);

  auto even = dataplane::AllGatherEven(backend, x, 1, *group, *executor);
  ASSERT_TRUE(even.ok()) << even.status();
  ASSERT_OK(even->completion->Wait());
  EXPECT_EQ(even->output.descriptor().shape(), (std::vector<size_t>{2, 3}));
  EXPECT_EQ(Download<float>(even->output), values);

  const std::vector<size_t> counts = {3};
  auto uneven =
      dataplane::AllGatherUneven(backend, x, counts, 1, *group, *executor);
  ASSERT_TRUE(uneven.ok()) << uneven.status();
  ASSERT_OK(uneven->completion->Wait());
  EXPECT_EQ(Download<float>(uneven->output), values);

  PeerCounts peer;
  peer.send = {3};
  peer.receive = {3};
  auto a2a =
      dataplane::VariableAllToAll(backend, x, peer, 1, *group, *executor);
  ASSERT_TRUE(a2a.ok()) << a2a.status();
  ASSERT_OK(a2a->completion->Wait());
  EXPECT_EQ(Download<float>(a2a->output), values);

  auto bcast = dataplane::Broadcast(backend, x, 0, *group, *executor);
  ASSERT_TRUE(bcast.ok()) << bcast.status();
  ASSERT_OK(bcast->completion->Wait());
  EXPECT_EQ(Download<float>(bcast->output), values);
  EXPECT_EQ(backend.Broadcast(x, 1, *group, *executor).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto barrier = dataplane::Barrier(backend, *group, *executor);
  ASSERT_TRUE(barrier.ok()) << barrier.status();
  ASSERT_OK(barrier->completion->Wait());

  for (bool vote : {true, false}) {
    auto agree = dataplane::AgreeSuccess(backend, vote, *group, *executor);
    ASSERT_TRUE(agree.ok()) << agree.status();
    ASSERT_OK(agree->completion->Wait());
    auto resolved = agree->output->Resolve();
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    EXPECT_EQ(*resolved, vote);
  }

  // A route needs two members.
  EXPECT_EQ(backend.Route(CollectiveScope::World(), 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);

  const DeviceTensor* deps[] = {&x, &sum->output};
  auto local = NcclBackend::SubmitLocalDependencies(deps, *executor);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_OK(local->completion->Wait());
  EXPECT_FALSE(
      local->completion->SupportsCancellation(CancellationMode::kNativeCancel));
  EXPECT_TRUE(local->completion->SupportsCancellation(
      CancellationMode::kQuarantineUntilComplete));
  EXPECT_TRUE(session->poison().ok());
  EXPECT_TRUE(backend.poison().ok());

  // The backend's failure vocabulary is the session's, on one state:
  // Poison only latches (later work refused with the first cause), Abort
  // keeps it.
  backend.Poison(absl::UnavailableError("drained by the scheduler"));
  EXPECT_EQ(session->poison().code(), absl::StatusCode::kUnavailable);
  auto refused = backend.AllReduceSum(x, *group, *executor);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(), "drained by the scheduler"))
      << refused.status();
  session->Abort(absl::InternalError("later cause"));
  EXPECT_EQ(backend.poison().code(), absl::StatusCode::kUnavailable);
}

// A CUDA graph capture (torch.cuda.graph, torch.compile
// mode="reduce-overhead") on the stream an operation would run on is
// refused before any native work, naming the operation, and the session
// stays usable: the session's own stream and a backend executor's (issue
// 34, defect 4). Both were accepted: the work was recorded into the
// caller's graph, and the completion event inside it never came.
TEST_F(NcclGpuTest, AnOperationOnACapturingStreamIsRefused) {
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto x = Upload(Desc({4}), Floats(4), session->stream());
  EXPECT_EQ(Download<float>(x), Floats(4));  // ready before the capture
  {
    StreamCapture capture(*session->stream());
    ASSERT_OK(capture.status());
    auto sum = session->AllReduceSum(CollectiveScope::World(), x);
    ASSERT_FALSE(sum.ok()) << "accepted on a capturing stream";
    EXPECT_EQ(sum.status().code(), absl::StatusCode::kFailedPrecondition)
        << sum.status();
    EXPECT_TRUE(absl::StrContains(
        sum.status().message(),
        "nccl backend: all_reduce_sum on world: the session's stream is "
        "capturing a CUDA graph"))
        << sum.status();
    // rankd queued nothing: the capture ends as it began.
    ASSERT_OK(capture.End());
  }
  NcclBackend backend(*session);
  auto group = backend.Group(CollectiveScope::World());
  ASSERT_TRUE(group.ok()) << group.status();
  auto executor = NcclExecutor::Create(0);
  ASSERT_TRUE(executor.ok()) << executor.status();
  {
    StreamCapture capture(*executor->stream());
    ASSERT_OK(capture.status());
    auto sum = dataplane::AllReduceSum(backend, x, *group, *executor);
    ASSERT_FALSE(sum.ok()) << "accepted on a capturing executor stream";
    EXPECT_EQ(sum.status().code(), absl::StatusCode::kFailedPrecondition)
        << sum.status();
    EXPECT_TRUE(absl::StrContains(sum.status().message(),
                                  "all_reduce_sum: the executor's stream is "
                                  "capturing a CUDA graph"))
        << sum.status();
    const DeviceTensor* values[] = {&x};
    auto local = backend.SubmitLocalDependencies(values, *executor);
    EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition)
        << local.status();
    ASSERT_OK(capture.End());
  }
  // Refused, not poisoned: the same work runs once the captures ended.
  ASSERT_OK(session->poison());
  EXPECT_TRUE(session->capabilities().world_collectives);
  auto sum = session->AllReduceSum(CollectiveScope::World(), x);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_OK(sum->completion->Wait());
  EXPECT_EQ(Download<float>(sum->output), Floats(4));
  auto on_executor = dataplane::AllReduceSum(backend, x, *group, *executor);
  ASSERT_TRUE(on_executor.ok()) << on_executor.status();
  ASSERT_OK(on_executor->completion->Wait());
}

TEST_F(NcclMultiGpuTest, CollectivesAcrossRanks) {
  const uint32_t world = MultiWorld();
  RunRanks(
      world, DataParallel(world),
      [world](uint32_t r, NcclSession& s, InProcessJob&) {
        auto stream = s.stream();
        // all_reduce_sum: sum over ranks of (r + i).
        auto x = Upload(Desc({8}), Floats(8, static_cast<float>(r)), stream);
        auto sum = s.AllReduceSum(CollectiveScope::World(), x);
        ASSERT_TRUE(sum.ok()) << sum.status();
        ASSERT_OK(sum->completion->Wait());
        std::vector<float> expect(8);
        for (int i = 0; i < 8; ++i) {
          expect[i] = world * i + world * (world - 1) / 2.0f;
        }
        EXPECT_EQ(Download<float>(sum->output), expect) << "rank " << r;

        // all_gather of a scalar: [0, 1, ..., world-1].
        auto me = Upload(Desc({}, TensorDtype::kI32),
                         std::vector<int32_t>{static_cast<int32_t>(r)}, stream);
        auto gathered = s.AllGather(CollectiveScope::World(), me);
        ASSERT_TRUE(gathered.ok()) << gathered.status();
        ASSERT_OK(gathered->completion->Wait());
        std::vector<int32_t> ranks(world);
        std::iota(ranks.begin(), ranks.end(), 0);
        EXPECT_EQ(Download<int32_t>(gathered->output), ranks);

        // all_to_all_v: rank r sends (d + 1) rows to d, each row = 100 r + d;
        // receives (r + 1) rows from every s.
        std::vector<size_t> send(world), recv(world, r + 1);
        std::vector<int32_t> rows;
        for (uint32_t d = 0; d < world; ++d) {
          send[d] = d + 1;
          for (uint32_t k = 0; k <= d; ++k) rows.push_back(100 * r + d);
        }
        auto in = Upload(Desc({rows.size()}, TensorDtype::kI32), rows, stream);
        auto out = s.AllToAllV(CollectiveScope::World(), in, send, recv);
        ASSERT_TRUE(out.ok()) << out.status();
        ASSERT_OK(out->completion->Wait());
        std::vector<int32_t> want;
        for (uint32_t src = 0; src < world; ++src) {
          for (uint32_t k = 0; k <= r; ++k) want.push_back(100 * src + r);
        }
        EXPECT_EQ(Download<int32_t>(out->output), want) << "rank " << r;

        // send/receive around a ring.
        const uint32_t next = (r + 1) % world, prev = (r + world - 1) % world;
        auto token = Upload(Desc({3}, TensorDtype::kI64),
                            std::vector<int64_t>{r, r * 2, r * 3}, stream);
        // Even ranks send first; odd ranks receive first (same session stream,
        // so a rank's own send and receive are ordered).
        absl::StatusOr<NcclSession::ValueSubmission> sent, received;
        if (r % 2 == 0) {
          sent = s.Send(CollectiveScope::World(), next, token);
          received =
              s.Receive(CollectiveScope::World(), prev, token.descriptor());
        } else {
          received =
              s.Receive(CollectiveScope::World(), prev, token.descriptor());
          sent = s.Send(CollectiveScope::World(), next, token);
        }
        ASSERT_TRUE(sent.ok()) << sent.status();
        ASSERT_TRUE(received.ok()) << received.status();
        ASSERT_OK(sent->completion->Wait());
        ASSERT_OK(received->completion->Wait());
        EXPECT_EQ(Download<int64_t>(received->output),
                  (std::vector<int64_t>{prev, prev * 2, prev * 3}));

        // Backend: broadcast from member 1, barrier, agree (rank 0 says no).
        NcclBackend backend(s);
        auto group = backend.Group(CollectiveScope::World());
        ASSERT_TRUE(group.ok());
        NcclExecutor executor(stream);
        auto b = backend.Broadcast(x, 1, *group, executor);
        ASSERT_TRUE(b.ok()) << b.status();
        ASSERT_OK(b->completion->Wait());
        EXPECT_EQ(Download<float>(b->output), Floats(8, 1));
        auto barrier = backend.Barrier(*group, executor);
        ASSERT_TRUE(barrier.ok());
        ASSERT_OK(barrier->completion->Wait());
        auto agree = backend.AgreeSuccess(r != 0, *group, executor);
        ASSERT_TRUE(agree.ok());
        ASSERT_OK(agree->completion->Wait());
        EXPECT_EQ(*agree->output->Resolve(), false);
        auto all_agree = backend.AgreeSuccess(true, *group, executor);
        ASSERT_TRUE(all_agree.ok());
        ASSERT_OK(all_agree->completion->Wait());
        EXPECT_EQ(*all_agree->output->Resolve(), true);

        // Backend send_receive: member 0 -> member 1, a bundle of two tensors.
        if (r <= 1) {
          auto route = backend.Route(CollectiveScope::World(), 0, 1);
          ASSERT_TRUE(route.ok()) << route.status();
          std::vector<DeviceTensor> bundle = {
              Upload(Desc({2}), std::vector<float>{1.f + r, 2.f}, stream),
              Upload(Desc({1}, TensorDtype::kI32), std::vector<int32_t>{42},
                     stream)};
          auto moved = backend.SendReceive(bundle, *route, executor);
          ASSERT_TRUE(moved.ok()) << moved.status();
          ASSERT_OK(moved->completion->Wait());
          ASSERT_EQ(moved->output.size(), 2u);
          EXPECT_EQ(Download<float>(moved->output[0]),
                    (std::vector<float>{1.f, 2.f}));
          EXPECT_EQ(Download<int32_t>(moved->output[1]),
                    std::vector<int32_t>{42});

          // The destination from descriptors alone (ReceiveBundle), as on
          // Gloo: it pairs with the source's SendReceive.
          const std::vector<ValueDescriptor> shapes = {bundle[0].descriptor(),
                                                       bundle[1].descriptor()};
          auto again = r == 0 ? backend.SendReceive(bundle, *route, executor)
                              : backend.ReceiveBundle(shapes, *route, executor);
          ASSERT_TRUE(again.ok()) << again.status();
          ASSERT_OK(again->completion->Wait());
          ASSERT_EQ(again->output.size(), 2u);
          EXPECT_EQ(again->output[0].descriptor(), shapes[0]);
          EXPECT_EQ(Download<float>(again->output[0]),
                    (std::vector<float>{1.f, 2.f}));
          EXPECT_EQ(Download<int32_t>(again->output[1]),
                    std::vector<int32_t>{42});
          if (r == 0) {
            // The source has tensors to send: refused, nothing queued, in
            // the engine's words (dataplane/route.h), as Gloo's.
            auto wrong_end = backend.ReceiveBundle(shapes, *route, executor);
            EXPECT_EQ(wrong_end.status(),
                      absl::InvalidArgumentError(
                          "nccl backend: receive_bundle: route 0 -> 1 on "
                          "world: this member (0, rank 0) is not its "
                          "destination"));
          } else {
            // The engine's bundle rules (dataplane/bundle.h), as Gloo's:
            // refused on this end alone (nothing is told without
            // verify_agreement), so the source's next bundle pairs with
            // the ReceiveBundleInto below.
            const std::vector<ValueDescriptor> many(kMaxBundleTensors + 1,
                                                    Desc({0}));
            EXPECT_EQ(backend.ReceiveBundle(many, *route, executor).status(),
                      absl::InvalidArgumentError(
                          "nccl backend: send_receive 0 -> 1 on world: a "
                          "bundle holds at most 60000 tensors; got 60001"));
            // Outputs that share bytes without sharing a start.
            auto block = Upload(Desc({3}), std::vector<float>{0, 0, 0}, stream);
            std::vector<DeviceTensor> overlapping;
            for (size_t at : {0, 1}) {
              overlapping.push_back(*DeviceTensor::Wrap(
                  DeviceBuffer::External(static_cast<float*>(block.data()) + at,
                                         2 * sizeof(float), block.device(),
                                         block.buffer()),
                  Desc({2})));
            }
            EXPECT_EQ(
                backend.ReceiveBundleInto(overlapping, *route, executor)
                    .status(),
                absl::InvalidArgumentError(
                    "nccl backend: send_receive 0 -> 1 on world: output 1 "
                    "overlaps output 0 of the bundle"));
          }

          // ... and into the destination's own tensors (ReceiveBundleInto).
          std::vector<DeviceTensor> into = {
              Upload(Desc({2}), std::vector<float>{0.f, 0.f}, stream),
              Upload(Desc({1}, TensorDtype::kI32), std::vector<int32_t>{0},
                     stream)};
          auto third = r == 0
                           ? backend.SendReceive(bundle, *route, executor)
                           : backend.ReceiveBundleInto(into, *route, executor);
          ASSERT_TRUE(third.ok()) << third.status();
          ASSERT_OK(third->completion->Wait());
          ASSERT_EQ(third->output.size(), 2u);
          if (r == 1) {
            EXPECT_EQ(third->output[0].data(), into[0].data());
            EXPECT_EQ(third->output[1].data(), into[1].data());
          }
          EXPECT_EQ(Download<float>(third->output[0]),
                    (std::vector<float>{1.f, 2.f}));
          EXPECT_EQ(Download<int32_t>(third->output[1]),
                    std::vector<int32_t>{42});
        }
        EXPECT_TRUE(s.poison().ok()) << s.poison();
      });
}

// A ring in one call per rank (send to the next, receive from the
// previous), with no even/odd ordering, then a swap between two ranks in
// one batch each, then a batch whose ends disagree on a dtype: it fails
// on both ends as a disagreement.
TEST_F(NcclMultiGpuTest, BatchedSendReceiveRunsARingAndASwap) {
  const uint32_t world = MultiWorld();
  RunRanks(
      world, DataParallel(world),
      [world](uint32_t r, NcclSession& s, InProcessJob&) {
        auto stream = s.stream();
        const CollectiveScope scope = CollectiveScope::World();
        const uint32_t next = (r + 1) % world;
        const uint32_t prev = (r + world - 1) % world;
        auto mine = Upload(Desc({2}, TensorDtype::kI32),
                           std::vector<int32_t>{static_cast<int32_t>(r),
                                                static_cast<int32_t>(7 * r)},
                           stream);
        auto from_prev = Upload(Desc({2}, TensorDtype::kI32),
                                std::vector<int32_t>{0, 0}, stream);
        const std::vector<PeerValue<DeviceTensor>> sends = {{next, mine}};
        const std::vector<PeerValue<DeviceTensor>> receives = {
            {prev, from_prev}};
        auto ring = s.BatchSendReceive(scope, sends, receives);
        ASSERT_TRUE(ring.ok()) << ring.status();
        ASSERT_OK(ring->completion->Wait());
        EXPECT_EQ(Download<int32_t>(from_prev),
                  (std::vector<int32_t>{static_cast<int32_t>(prev),
                                        static_cast<int32_t>(7 * prev)}));
        if (r > 1) return;
        // Ranks 0 and 1 swap; rank 1 lists its receive first.
        const uint32_t other = 1 - r;
        auto theirs = Upload(Desc({2}, TensorDtype::kI32),
                             std::vector<int32_t>{0, 0}, stream);
        const std::vector<PeerValue<DeviceTensor>> out = {{other, mine}};
        const std::vector<PeerValue<DeviceTensor>> in = {{other, theirs}};
        auto swap = s.BatchSendReceive(scope, out, in);
        ASSERT_TRUE(swap.ok()) << swap.status();
        ASSERT_OK(swap->completion->Wait());
        EXPECT_EQ(Download<int32_t>(theirs),
                  (std::vector<int32_t>{static_cast<int32_t>(other),
                                        static_cast<int32_t>(7 * other)}));
        // Refused before native work (the session is still healthy).
        ASSERT_TRUE(s.poison().ok()) << s.poison();
        const std::vector<PeerValue<DeviceTensor>> self = {{r, mine}};
        EXPECT_EQ(s.BatchSendReceive(scope, self, {}).status().code(),
                  absl::StatusCode::kInvalidArgument);
        const std::vector<PeerValue<DeviceTensor>> aliased = {{other, theirs}};
        EXPECT_EQ(s.BatchSendReceive(scope, aliased, in).status().code(),
                  absl::StatusCode::kInvalidArgument);
        // Rank 1 expects f32[2] where rank 0 sends i32[2].
        auto f32 = Upload(Desc({2}), std::vector<float>{0, 0}, stream);
        const std::vector<PeerValue<DeviceTensor>> wrong = {{0, f32}};
        auto bad = r == 0 ? s.BatchSendReceive(scope, out, {})
                          : s.BatchSendReceive(scope, {}, wrong);
        ASSERT_TRUE(bad.ok()) << bad.status();
        absl::Status done = bad->completion->Wait();
        // The payload moved, so the session is poisoned: never
        // InvalidArgument, which says "refused, still usable" (issue 34).
        EXPECT_EQ(done.code(), absl::StatusCode::kFailedPrecondition) << done;
        EXPECT_TRUE(absl::StrContains(done.message(), "the ends disagree"))
            << done;
      });
}

TEST_F(NcclMultiGpuTest, GroupsOfATopology) {
  const uint32_t world = MultiWorld() >= 4 ? 4 : 2;
  ParallelTopology topology;
  topology.tensor = 2;
  topology.data = world / 2;
  RunRanks(world, topology, [](uint32_t r, NcclSession& s, InProcessJob&) {
    const CollectiveGroupDescriptor& tensor = s.descriptor().groups()[1];
    ASSERT_EQ(tensor.size(), 2u);
    auto x = Upload(Desc({4}), std::vector<float>(4, 1.0f + r), s.stream());
    auto sum = s.AllReduceSum(CollectiveScope::Group(tensor.id()), x);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_OK(sum->completion->Wait());
    const float want = 2.0f + tensor.members()[0] + tensor.members()[1];
    EXPECT_EQ(Download<float>(sum->output), std::vector<float>(4, want));
  });
}

// A gather along an inner axis rearranges rows with 2-D copies; rows wider
// than the device's maximum pitch are copied row by row instead of failing.
TEST_F(NcclMultiGpuTest, InnerAxisGatherBeyondTheMaximumPitch) {
  const testing::StandinControl* standin = Standin();
  if (standin == nullptr) {
    GTEST_SKIP() << "needs the CPU stand-in's lowered cudaDevAttrMaxPitch "
                    "(a GPU's is 2 GiB)";
  }
  RunInFreshProcess([] {
    Standin()->set_max_pitch(100);  // below the 128-byte output rows
    RunRanks(2, DataParallel(2), [](uint32_t r, NcclSession& s, InProcessJob&) {
      std::vector<float> rows(32);  // [2][16]
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = 100.0f * r + i;
      auto x = Upload(Desc({2, 16}), rows, s.stream());
      NcclBackend backend(s);
      auto group = backend.Group(CollectiveScope::World());
      ASSERT_TRUE(group.ok());
      NcclExecutor executor(s.stream());
      auto gathered = backend.AllGatherEven(x, 1, *group, executor);
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      ASSERT_OK(gathered->completion->Wait());
      std::vector<float> want;
      for (int row = 0; row < 2; ++row) {
        for (int member = 0; member < 2; ++member) {
          for (int j = 0; j < 16; ++j)
            want.push_back(100.0f * member + row * 16 + j);
        }
      }
      EXPECT_EQ(Download<float>(gathered->output), want) << "rank " << r;
    });
  });
}

// Sessions number themselves (NcclSessionOptions::tag unset): a rank's
// second session, opened while a peer is late, never reads the first one's
// unique ids.
TEST_F(NcclMultiGpuTest, SessionsOpenedOneAfterAnotherGetTagsOfTheirOwn) {
  auto job = InProcessJob::Create(2);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      auto descriptor =
          DistributedSessionDescriptor::FromTopology(DataParallel(2), 2, r);
      ASSERT_TRUE(descriptor.ok()) << descriptor.status();
      for (int n = 0; n < 2; ++n) {
        if (n == 1 && r == 1) absl::SleepFor(absl::Milliseconds(300));
        NcclSessionOptions options;
        options.device = static_cast<int>(r);
        options.init_timeout = absl::Seconds(30);
        auto session = NcclSession::Open(*descriptor, cp.get(), options);
        ASSERT_TRUE(session.ok())
            << "rank " << r << " session " << n << ": " << session.status();
        EXPECT_EQ((*session)->impl()->options().tag, absl::StrCat("s", n));
        auto stream = (*session)->stream();
        auto sum = (*session)->AllReduceSum(
            CollectiveScope::World(),
            Upload(Desc({2}), Floats(2, static_cast<float>(r + n)), stream));
        ASSERT_TRUE(sum.ok()) << sum.status();
        ASSERT_OK(sum->completion->Wait());
        const float base = static_cast<float>(1 + 2 * n);
        EXPECT_EQ(Download<float>(sum->output),
                  (std::vector<float>{base, base + 2}))
            << "rank " << r << " session " << n;
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace rankd::dataplane::nccl
