// The NCCL backend on real CUDA devices, in one process: CUDA handles,
// DeviceTensor, NcclSession and NcclBackend with world size 1 (any single
// GPU), bounded waits (quarantine and native cancel, with a stream held by
// a host function), job-failure aborts, init deadlines, and, when the
// machine has 2+ GPUs, a multi-rank world with one thread per GPU. The
// control plane is the in-process InProcessJob (dataplane/testing/); tests/gpu/
// runs the same operations through real rankd daemons.
//
// Every test skips (GTEST_SKIP with the reason, which says "no GPU") when
// there is no CUDA device or no CUDA runtime to load.
#include <algorithm>
#include <atomic>
#include <complex>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "dataplane/nccl/cuda_handles.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/native_runtime.h"
#include "dataplane/nccl/nccl_backend.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/testing/nccl_session_peer.h"
#include "dataplane/nccl/testing/standin_control.h"
#include "dataplane/nccl/testing/stream_stall.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
namespace {

using ::rankd::dataplane::testing::InProcessJob;
using testing::Stall;
using testing::StallStream;
using testing::Standin;

// Runs `body` in a fresh copy of this test binary (a threadsafe death
// test), for checks of process-wide CUDA state: the child passes when none
// of its expectations failed.
void RunInFreshProcess(const std::function<void()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        body();
        std::fflush(nullptr);
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

#define ASSERT_OK(expr)                          \
  do {                                           \
    const absl::Status _s = (expr);              \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s; \
  } while (0)

int DeviceCount() { return ProbeDevices().device_count; }

// tests/gpu/run.sh sets RANKD_REQUIRE_GPU=1: there, no device at all is a
// failure (a broken driver setup), not a reason to skip.
bool RequireGpu() {
  const char* v = std::getenv("RANKD_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

#define SKIP_WITHOUT_DEVICES(n)                                               \
  do {                                                                        \
    DeviceProbe _probe = ProbeDevices();                                      \
    if (_probe.device_count == 0 && RequireGpu()) {                           \
      GTEST_FAIL() << "RANKD_REQUIRE_GPU=1 but no CUDA device: "              \
                   << _probe.reason;                                          \
    }                                                                         \
    if (_probe.device_count < (n)) {                                          \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s); this machine "     \
                   << "has " << _probe.device_count << ": " << _probe.reason; \
    }                                                                         \
  } while (0)

// `world` ranks, all in one data-parallel group (the only layout of that
// size without a tensor, pipeline or expert degree).
ParallelTopology DataParallel(uint32_t world) {
  ParallelTopology topology;
  topology.data = world;
  return topology;
}

ValueDescriptor Desc(std::vector<size_t> shape,
                     TensorDtype dtype = TensorDtype::kF32) {
  return *ValueDescriptor::Create(std::move(shape), dtype);
}

template <typename T>
DeviceTensor Upload(const ValueDescriptor& desc, const std::vector<T>& values,
                    const std::shared_ptr<CudaStream>& stream) {
  auto t = DeviceTensor::FromHostVector(desc, values, stream);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

template <typename T>
std::vector<T> Download(const DeviceTensor& t) {
  auto v = t.ToHostVector<T>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<T>{};
}

std::vector<float> Floats(size_t n, float start = 0) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_DEVICES(1); }

  // A world of one rank on device 0.
  std::unique_ptr<NcclSession> OpenWorld1(NcclSessionOptions options = {}) {
    job_ = InProcessJob::Create(1);
    cp_ = job_->ForRank(0);
    ParallelTopology topology;  // all degrees 1: groups 1..5, all [0]
    auto descriptor =
        DistributedSessionDescriptor::FromTopology(topology, 1, 0);
    EXPECT_TRUE(descriptor.ok());
    options.device = 0;
    auto session = NcclSession::Open(*descriptor, cp_.get(), options);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }

  std::shared_ptr<InProcessJob> job_;
  std::unique_ptr<ControlPlane> cp_;
};

TEST_F(NcclGpuTest, CudaHandles) {
  DeviceProbe probe = ProbeDevices();
  EXPECT_GT(probe.device_count, 0);
  // What ran, in the log; NCCL must have loaded next to the CUDA runtime.
  NativeRuntimeReport report = DescribeNativeRuntime();
  std::cout << "native runtime: " << report.Summary() << "\n";
  EXPECT_TRUE(report.cuda_loaded()) << report.cuda_error;
  EXPECT_TRUE(report.nccl_loaded()) << report.nccl_error;
  EXPECT_EQ(report.gpus.size(), static_cast<size_t>(probe.device_count));
  EXPECT_GE(report.nccl_version, NcclVersionCode(2, 14, 0));
  auto stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto event = CudaEvent::Create(0);
  ASSERT_TRUE(event.ok());
  auto buffer = DeviceBuffer::Allocate(1 << 20, *stream);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_NE((*buffer)->data(), nullptr);
  ASSERT_OK(FillBytes((*buffer)->data(), 7, 1 << 20, **stream));
  ASSERT_OK((*event)->Record(**stream));
  ASSERT_OK((*event)->Synchronize());
  auto done = (*event)->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  auto empty = DeviceBuffer::Allocate(0, *stream);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->data(), nullptr);
  std::vector<uint8_t> host(16);
  ASSERT_OK(CopyDeviceToHost(host.data(), (*buffer)->data(), 16, **stream));
  EXPECT_EQ(host, std::vector<uint8_t>(16, 7));
  EXPECT_FALSE(CudaStream::Create(probe.device_count).ok());
}

TEST_F(NcclGpuTest, DeviceTensorRoundTrip) {
  auto stream = *CudaStream::Create(0);
  const std::vector<float> values = Floats(12, 1.5f);
  DeviceTensor t = Upload(Desc({3, 4}), values, stream);
  EXPECT_EQ(t.device(), 0);
  EXPECT_EQ(Download<float>(t), values);
  EXPECT_EQ(DeviceTensor::FromHost(Desc({3}), values.data(), 8, stream)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

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
  // Every group of a one-rank world has the world's members: one
  // communicator, and no unique id needed the broker.
  EXPECT_EQ(session->communicator_count(), 1u);
  EXPECT_EQ(job_->kv_sets(), 0);
  EXPECT_EQ(session->device(), 0);
  EXPECT_NE(session->stream(), nullptr);
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
  auto executor = CudaExecutor::Create(0);
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
  auto executor = CudaExecutor::Create(0);
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

TEST_F(NcclGpuTest, JobFailureAbortsAndFailsRunningWork) {
  NcclSessionOptions options;
  options.watchdog_interval = absl::Milliseconds(20);
  auto session = OpenWorld1(options);
  ASSERT_NE(session, nullptr);
  auto x = Upload(Desc({64}), Floats(64), session->stream());
  Stall* stall = StallStream(*session->stream());
  ASSERT_NE(stall, nullptr);
  auto sum = session->AllReduceSum(CollectiveScope::World(), x);
  ASSERT_TRUE(sum.ok()) << sum.status();
  job_->Fail(absl::AbortedError("rankd: rank 7 lost (node 3 heartbeat)"));
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (session->poison().ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(session->poison().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(session->poison().message(), "rank 7"));
  EXPECT_FALSE(session->capabilities().world_collectives);
  stall->released = true;
  absl::Status waited = sum->completion->Wait();
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  auto later = session->AllReduceSum(CollectiveScope::World(), x);
  EXPECT_EQ(later.status().code(), absl::StatusCode::kAborted);
}

// A world of two ranks where rank 1 never shows up: init is bounded by its
// deadline, or ended at once by a job failure; either way the communicator
// is aborted and the session poisoned.
TEST_F(NcclGpuTest, InitDeadlineAbortsTheCommunicators) {
  auto job = InProcessJob::Create(2);
  auto cp = job->ForRank(0);
  auto descriptor =
      DistributedSessionDescriptor::FromTopology(DataParallel(2), 2, 0);
  ASSERT_TRUE(descriptor.ok());
  NcclSessionOptions options;
  options.device = 0;
  options.init_timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  auto session =
      testing::NcclSessionPeer::Create(*descriptor, cp.get(), options);
  ASSERT_TRUE(session.ok());
  absl::Status init = testing::NcclSessionPeer::Initialize(**session);
  EXPECT_EQ(init.code(), absl::StatusCode::kDeadlineExceeded) << init;
  EXPECT_TRUE(absl::StrContains(init.message(), "world")) << init;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_FALSE((*session)->capabilities().world_collectives);
  EXPECT_EQ((*session)->poison().code(), absl::StatusCode::kDeadlineExceeded);
  // Rank 0 is the world's root: it published the id, under its first
  // session's tag.
  EXPECT_TRUE(
      job->Peek(absl::StrCat(job->name_space(), "/nccl/s0/world/uid/0of1"))
          .has_value());
}

TEST_F(NcclGpuTest, JobFailureDuringInitAbortsPromptly) {
  auto job = InProcessJob::Create(2);
  auto cp = job->ForRank(0);
  auto descriptor =
      DistributedSessionDescriptor::FromTopology(DataParallel(2), 2, 0);
  ASSERT_TRUE(descriptor.ok());
  NcclSessionOptions options;
  options.device = 0;
  options.init_timeout = absl::Seconds(60);
  std::thread failer([&] {
    absl::SleepFor(absl::Milliseconds(500));
    job->Fail(absl::AbortedError("rankd: rank 1 lost"));
  });
  const absl::Time start = absl::Now();
  auto session = NcclSession::Open(*descriptor, cp.get(), options);
  failer.join();
  EXPECT_EQ(session.status().code(), absl::StatusCode::kAborted)
      << session.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

// --- Several GPUs: one thread per rank, one GPU per rank.

class NcclMultiGpuTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_DEVICES(2); }
};

// Runs `body(rank, session)` on `world` ranks (threads) after opening a
// session on each; returns once all bodies returned.
void RunRanks(
    uint32_t world, const ParallelTopology& topology,
    const std::function<void(uint32_t, NcclSession&, InProcessJob&)>& body,
    std::shared_ptr<InProcessJob> job = nullptr,
    NcclSessionOptions options = {}) {
  if (job == nullptr) job = InProcessJob::Create(world);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      auto descriptor =
          DistributedSessionDescriptor::FromTopology(topology, world, r);
      ASSERT_TRUE(descriptor.ok()) << descriptor.status();
      NcclSessionOptions mine = options;
      mine.device = static_cast<int>(r);
      mine.init_timeout = absl::Seconds(60);
      auto session = NcclSession::Open(*descriptor, cp.get(), mine);
      ASSERT_TRUE(session.ok()) << "rank " << r << ": " << session.status();
      body(r, **session, *job);
    });
  }
  for (auto& t : threads) t.join();
}

uint32_t MultiWorld() {
  return static_cast<uint32_t>(std::min(DeviceCount(), 4));
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
        CudaExecutor executor(stream);
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
            // The source has tensors to send: refused, nothing queued.
            auto wrong_end = backend.ReceiveBundle(shapes, *route, executor);
            EXPECT_EQ(wrong_end.status().code(),
                      absl::StatusCode::kInvalidArgument)
                << wrong_end.status();
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
    CudaExecutor executor(stream);
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
        EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument) << done;
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

TEST_F(NcclMultiGpuTest, JobFailureUnblocksAHungCollective) {
  auto job = InProcessJob::Create(2);
  RunRanks(
      2, DataParallel(2),
      [](uint32_t r, NcclSession& s, InProcessJob& job) {
        // Connect the peers first (NCCL connects lazily on first use).
        auto warm = Upload(Desc({4}), Floats(4), s.stream());
        auto warmed = s.AllReduceSum(CollectiveScope::World(), warm);
        ASSERT_TRUE(warmed.ok()) << warmed.status();
        ASSERT_OK(warmed->completion->Wait());
        if (r == 1) {
          // Never enters the collective; the job then fails (as when its
          // process dies and the daemon notices).
          absl::SleepFor(absl::Milliseconds(500));
          job.Fail(absl::AbortedError("rankd: rank 1 lost"));
          return;
        }
        auto x = Upload(Desc({1 << 20}), Floats(1 << 20), s.stream());
        auto sum = s.AllReduceSum(CollectiveScope::World(), x);
        // Without a connected peer a non-blocking communicator may refuse
        // the work until the job failure interrupts it: also an abort.
        if (!sum.ok()) {
          EXPECT_EQ(sum.status().code(), absl::StatusCode::kAborted);
          return;
        }
        const absl::Time start = absl::Now();
        absl::Status waited = sum->completion->Wait();
        EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
        EXPECT_LT(absl::Now() - start, absl::Seconds(20));
        EXPECT_EQ(s.poison().code(), absl::StatusCode::kAborted);
      },
      job);
}

// --- Sequencing of the native layer: each case below is a defect that a
// reading of this backend found (issue 10); the CPU stand-in shows each one
// in CI, and the cases run on real GPUs too where they can.

// An abort that lands after NCCL accepted the work but before the
// completion exists kills the kernel; the operation must fail, never report
// success over an output nobody wrote.
TEST_F(NcclGpuTest, AnAbortRightAfterNcclAcceptedTheWorkFailsTheOperation) {
  const testing::StandinControl* standin = Standin();
  if (standin == nullptr) {
    GTEST_SKIP() << "needs the CPU stand-in, which can hold the completion "
                    "event's record until an abort (on a GPU the window is "
                    "microseconds wide)";
  }
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto stream = session->stream();
  auto x = Upload(Desc({4}), Floats(4, 1), stream);
  // The kernel queues behind a held stream, so the abort reaches it first.
  Stall* stall = StallStream(*stream);
  ASSERT_NE(stall, nullptr);
  standin->hold_next_event_record_until_abort(10000);
  std::thread failer([this] {
    absl::SleepFor(absl::Milliseconds(200));
    job_->Fail(absl::AbortedError("rankd: rank 7 lost"));
  });
  auto sum = session->AllReduceSum(CollectiveScope::World(), x);
  failer.join();
  stall->released = true;
  if (sum.ok()) {
    absl::Status waited = sum->completion->Wait();
    EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  } else {
    EXPECT_EQ(sum.status().code(), absl::StatusCode::kAborted) << sum.status();
  }
  EXPECT_EQ(session->poison().code(), absl::StatusCode::kAborted);
}

// rankd's guard puts the caller's device back.
TEST_F(NcclMultiGpuTest, DeviceGuardRestoresTheCallersDevice) {
  std::thread([] {
    DeviceGuard callers(1);
    ASSERT_OK(callers.status());
    {
      DeviceGuard rankd(0);
      ASSERT_OK(rankd.status());
      EXPECT_EQ(*CurrentDevice(), 0);
    }
    EXPECT_EQ(*CurrentDevice(), 1);
  }).join();
}

// A session on device 1 never creates a CUDA context on device 0: not in
// the watchdog, not in the threads that wait, not when quarantined work is
// reaped. (On a multi-GPU host every rank process sees every GPU; a
// context on device 0 costs each of them GPU 0's memory.)
TEST_F(NcclMultiGpuTest, ASessionOnDevice1NeverTouchesDevice0) {
  if (!PrimaryContextActive(0).ok()) {
    GTEST_SKIP() << PrimaryContextActive(0).status();
  }
  RunInFreshProcess([] {
    ASSERT_FALSE(*PrimaryContextActive(0)) << "the child starts clean";
    auto job = InProcessJob::Create(1);
    auto cp = job->ForRank(0);
    auto descriptor = DistributedSessionDescriptor::FromTopology({}, 1, 0);
    ASSERT_TRUE(descriptor.ok());
    NcclSessionOptions options;
    options.device = 1;
    auto session = NcclSession::Open(*descriptor, cp.get(), options);
    ASSERT_TRUE(session.ok()) << session.status();
    auto x = Upload(Desc({8}), Floats(8), (*session)->stream());
    auto sum = (*session)->AllReduceSum(CollectiveScope::World(), x);
    ASSERT_TRUE(sum.ok()) << sum.status();
    // Waited for from a thread that never chose a device.
    std::thread([&] { EXPECT_TRUE(sum->completion->Wait().ok()); }).join();
    EXPECT_EQ(Download<float>(sum->output), Floats(8));
    // Dropped while held behind a stalled stream: quarantined, then reaped
    // by the quarantine once the work finished.
    Stall* stall = StallStream(*(*session)->stream());
    ASSERT_NE(stall, nullptr);
    {
      auto dropped = (*session)->AllReduceSum(CollectiveScope::World(), x);
      ASSERT_TRUE(dropped.ok()) << dropped.status();
    }
    stall->released = true;
    absl::SleepFor(absl::Milliseconds(200));
    session->reset();
    EXPECT_FALSE(*PrimaryContextActive(0));
  });
}

// ncclCommAbort waits for every kernel on its device; aborting a session's
// communicators one after another never returns when a later one's kernel
// waits for a peer that never comes. They are aborted concurrently.
TEST_F(NcclMultiGpuTest, OneCommunicatorsStuckKernelDoesNotBlockTheAbort) {
  if (DeviceCount() < 4) GTEST_SKIP() << "needs 4 CUDA devices";
  ParallelTopology topology;
  topology.tensor = 2;
  topology.data = 2;
  absl::Barrier* warmed = new absl::Barrier(4);  // deleted by the last user
  RunRanks(4, topology, [&](uint32_t r, NcclSession& s, InProcessJob&) {
    const CollectiveGroupDescriptor& tensor = s.descriptor().groups()[1];
    const CollectiveScope scope = CollectiveScope::Group(tensor.id());
    auto x = Upload(Desc({4}), Floats(4), s.stream());
    // Connect everyone's communicators (NCCL connects on first use).
    for (const CollectiveScope& each : {CollectiveScope::World(), scope}) {
      auto warm = s.AllReduceSum(each, x);
      ASSERT_TRUE(warm.ok()) << warm.status();
      ASSERT_OK(warm->completion->Wait());
    }
    if (warmed->Block()) delete warmed;
    if (r != 0) return;  // rank 1 never joins rank 0's next tensor sum
    auto stuck = s.AllReduceSum(scope, x);
    ASSERT_TRUE(stuck.ok()) << stuck.status();
    const absl::Time start = absl::Now();
    auto outcome = stuck->completion->WaitBounded(
        absl::Milliseconds(300), CancellationMode::kNativeCancel);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_FALSE(outcome->completed());
    EXPECT_LT(absl::Now() - start, absl::Seconds(8));
  });
}

// A session destroyed after its job failed aborts its communicators; it
// does not finalize them (finalize waits for peers that are gone, up to
// destroy_timeout per communicator).
TEST_F(NcclMultiGpuTest, DestroyingASessionOfAFailedJobAborts) {
  auto job = InProcessJob::Create(2);
  absl::Barrier* warmed = new absl::Barrier(2);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      auto descriptor =
          DistributedSessionDescriptor::FromTopology(DataParallel(2), 2, r);
      ASSERT_TRUE(descriptor.ok());
      NcclSessionOptions options;
      options.device = static_cast<int>(r);
      options.watchdog_interval = absl::Hours(1);
      options.destroy_timeout = absl::Seconds(30);
      auto session = NcclSession::Open(*descriptor, cp.get(), options);
      ASSERT_TRUE(session.ok()) << session.status();
      auto x = Upload(Desc({4}), Floats(4), (*session)->stream());
      {
        auto warm = (*session)->AllReduceSum(CollectiveScope::World(), x);
        ASSERT_TRUE(warm.ok()) << warm.status();
        ASSERT_OK(warm->completion->Wait());
      }  // a completion keeps the session's core alive
      if (warmed->Block()) delete warmed;
      if (r == 1) return;  // "dies": never joins the next sum
      {
        auto stuck = (*session)->AllReduceSum(CollectiveScope::World(), x);
        ASSERT_TRUE(stuck.ok()) << stuck.status();
      }  // dropped unfinished: quarantined
      // Seen by a JobHealth() poll only; the watchdog polls hourly here.
      job->FailWithoutNotice(absl::AbortedError("rankd: rank 1 lost"));
      const absl::Time start = absl::Now();
      session->reset();
      EXPECT_LT(absl::Now() - start, absl::Seconds(8));
    });
  }
  for (auto& t : ranks) t.join();
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
        EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
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
    EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
    const std::string mine = r == 0 ? "f32[4]" : "i32[4]";
    EXPECT_TRUE(absl::StrContains(
        waited.message(),
        absl::StrCat("the ends disagree: the ",
                     r == 0 ? "send to" : "receive from", " member ", 1 - r,
                     " (rank ", 1 - r, "): this end has `bundle(", mine,
                     ")`, the other end submitted another transfer")))
        << waited;
    EXPECT_EQ(s.poison().code(), absl::StatusCode::kInvalidArgument);
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
        EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
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
        EXPECT_EQ((*session)->core()->options().tag, absl::StrCat("s", n));
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
      CudaExecutor executor(s.stream());
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

// Reading results back (DeviceTensor::ToHost, Agreement::Resolve) reuses
// one stream per device instead of creating one per call.
TEST_F(NcclGpuTest, ReadingResultsBackCreatesNoStreamPerCall) {
  const testing::StandinControl* standin = Standin();
  if (standin == nullptr) GTEST_SKIP() << "counts streams in the CPU stand-in";
  auto session = OpenWorld1();
  ASSERT_NE(session, nullptr);
  auto x = Upload(Desc({4}), Floats(4), session->stream());
  (void)Download<float>(x);  // the first read may create the stream
  const int64_t before = standin->streams_created();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Download<float>(x), Floats(4));
  EXPECT_EQ(standin->streams_created(), before);
}

}  // namespace
}  // namespace rankd::dataplane::nccl
