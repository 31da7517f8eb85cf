// NcclSession::Reform on real devices (or the stand-in) (docs/dataplane.md,
// "Re-forming after a loss"): ranks as threads, one device each, over an
// in-process job that models epochs. The last rank is lost, the survivors
// re-form while a replacement opens its session at the next epoch; the new
// communicators come from new unique ids, on the same devices, and sum
// again; the survivors' own device tensors are untouched. Also: the
// deadline names the epoch without a replacement; and, under recovery by
// domain (dataplane/domain_groups.h), one replica's sessions re-open their
// in-domain communicators alone while the other replica keeps summing.
//
// Every case skips (GTEST_SKIP with the reason, which says "no GPU") with
// fewer than 2 CUDA devices. Built twice (nccl_device_test.bzl):
// nccl_reform_gpu_test for real GPUs and nccl_reform_standin_test against
// the CPU stand-in; the GPU kit runs them all as nccl_gpu_test.
#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/topology.h"
#include "dataplane/collective_scope.h"
#include "dataplane/control_plane.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/internal/comm_name.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/nccl/nccl_unique_id.h"
#include "dataplane/nccl/testing/nccl_test_util.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
namespace {

using internal::CommName;
using ::rankd::dataplane::testing::InProcessJob;
using testing::Desc;
using testing::Download;
using testing::Floats;
using testing::MultiWorld;
using testing::NcclMultiGpuTest;
using testing::Upload;

DistributedSessionDescriptor Descriptor(uint32_t world, uint32_t rank,
                                        uint64_t epoch) {
  auto descriptor = DistributedSessionDescriptor::Create(world, rank, {});
  EXPECT_TRUE(descriptor.ok()) << descriptor.status();
  EXPECT_TRUE(descriptor->SetEpoch(epoch).ok());
  return *descriptor;
}

NcclSessionOptions OnDevice(uint32_t rank) {
  NcclSessionOptions options;
  options.device = static_cast<int>(rank);
  options.init_timeout = absl::Seconds(60);
  options.watchdog_interval = absl::Milliseconds(10);
  return options;
}

void EachRank(uint32_t world, const std::function<void(uint32_t)>& fn) {
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&fn, r] { fn(r); });
  }
  for (std::thread& t : threads) t.join();
}

// Every rank contributes Floats(4, r); checks the world sum.
void ExpectWorldSum(std::vector<std::unique_ptr<NcclSession>>& sessions) {
  const uint32_t world = static_cast<uint32_t>(sessions.size());
  EachRank(world, [&](uint32_t r) {
    auto x = Upload(Desc({4}), Floats(4, static_cast<float>(r)),
                    sessions[r]->stream());
    auto sum = sessions[r]->AllReduceSum(CollectiveScope::World(), x);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok());
    std::vector<float> expect(4);
    for (int i = 0; i < 4; ++i) {
      expect[i] = world * i + world * (world - 1) / 2.0f;
    }
    EXPECT_EQ(Download<float>(sum->output), expect) << "rank " << r;
  });
}

// The world communicator's unique id at `epoch`, as its root published it.
std::optional<std::string> WorldUniqueId(InProcessJob& job, uint32_t world,
                                         uint64_t epoch) {
  std::vector<uint32_t> members(world);
  std::iota(members.begin(), members.end(), 0u);
  return job.Peek(OwnedKey(
      0, UniqueIdKey(job.name_space(), "s0", CommName(members, world), 0, 1),
      epoch));
}

TEST_F(NcclMultiGpuTest, SurvivorsAndAReplacementFormTheNextEpoch) {
  const uint32_t world = std::min(MultiWorld(), 3u);
  const uint32_t lost = world - 1;
  auto job = InProcessJob::Create(world);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < world; ++r) {
    control_planes.push_back(job->ForRank(r));
  }
  std::vector<std::unique_ptr<NcclSession>> sessions(world);
  EachRank(world, [&](uint32_t r) {
    auto session = NcclSession::Open(Descriptor(world, r, 1),
                                     control_planes[r].get(), OnDevice(r));
    ASSERT_TRUE(session.ok()) << session.status();
    sessions[r] = *std::move(session);
  });
  for (const auto& s : sessions) ASSERT_NE(s, nullptr);
  ExpectWorldSum(sessions);
  // The weights each survivor holds across the recovery, on its own stream.
  std::vector<std::shared_ptr<CudaStream>> streams;
  std::vector<DeviceTensor> weights;
  for (uint32_t r = 0; r < lost; ++r) {
    auto stream = CudaStream::Create(static_cast<int>(r));
    ASSERT_TRUE(stream.ok()) << stream.status();
    streams.push_back(*stream);
    weights.push_back(Upload(Desc({3}), Floats(3, 100.0f + r), streams.back()));
  }

  sessions[lost].reset();
  control_planes[lost].reset();
  ASSERT_TRUE(job->Lose(lost, absl::UnavailableError("rank was lost")).ok());
  // The survivors' sessions are poisoned with the loss (the failure
  // callback aborts their communicators off the caller's thread).
  for (uint32_t r = 0; r < lost; ++r) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (sessions[r]->poison().ok() && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(sessions[r]->poison().code(), absl::StatusCode::kUnavailable)
        << sessions[r]->poison();
    EXPECT_TRUE(
        absl::StrContains(sessions[r]->poison().message(), "rank was lost"))
        << sessions[r]->poison();
  }

  EachRank(world, [&](uint32_t r) {
    if (r == lost) {
      auto control_plane = job->Replace(lost);
      ASSERT_TRUE(control_plane.ok()) << control_plane.status();
      control_planes[lost] = *std::move(control_plane);
      auto session =
          NcclSession::Open(Descriptor(world, lost, job->epoch()),
                            control_planes[lost].get(), OnDevice(lost));
      ASSERT_TRUE(session.ok()) << session.status();
      sessions[lost] = *std::move(session);
      return;
    }
    const int device = sessions[r]->device();
    auto reformed =
        NcclSession::Reform(std::move(sessions[r]), absl::Seconds(60));
    ASSERT_TRUE(reformed.ok()) << reformed.status();
    EXPECT_EQ((*reformed)->device(), device);
    EXPECT_TRUE((*reformed)->ready());
    sessions[r] = *std::move(reformed);
  });
  for (const auto& s : sessions) ASSERT_NE(s, nullptr);
  for (uint32_t r = 0; r < world; ++r) {
    EXPECT_EQ(sessions[r]->descriptor().epoch(), 2u);
    EXPECT_TRUE(sessions[r]->poison().ok()) << sessions[r]->poison();
  }
  ExpectWorldSum(sessions);
  for (uint32_t r = 0; r < lost; ++r) {
    EXPECT_EQ(Download<float>(weights[r]), Floats(3, 100.0f + r));
  }
  // New communicators from new unique ids, under epoch 2's keys.
  const auto id1 = WorldUniqueId(*job, world, 1);
  const auto id2 = WorldUniqueId(*job, world, 2);
  ASSERT_TRUE(id1.has_value());
  ASSERT_TRUE(id2.has_value());
  EXPECT_NE(*id1, *id2);
}

TEST_F(NcclMultiGpuTest, ReformWithoutAReplacementNamesTheEpoch) {
  auto job = InProcessJob::Create(2);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < 2; ++r) control_planes.push_back(job->ForRank(r));
  std::vector<std::unique_ptr<NcclSession>> sessions(2);
  EachRank(2, [&](uint32_t r) {
    auto session = NcclSession::Open(Descriptor(2, r, 1),
                                     control_planes[r].get(), OnDevice(r));
    ASSERT_TRUE(session.ok()) << session.status();
    sessions[r] = *std::move(session);
  });
  for (const auto& s : sessions) ASSERT_NE(s, nullptr);
  sessions[1].reset();
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  auto reformed =
      NcclSession::Reform(std::move(sessions[0]), absl::Milliseconds(300));
  ASSERT_EQ(reformed.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(reformed.status().message(),
                                "nccl backend: re-forming the session of "
                                "epoch 1"))
      << reformed.status();
  EXPECT_TRUE(absl::StrContains(reformed.status().message(), "epoch 2"))
      << reformed.status();
}

// tp 2 x dp 2 on 4 devices, each session confined to its replica. Replica
// 1's ranks destroy their sessions and open new ones (new communicators
// from new unique ids: a re-form's native part) while replica 0's ranks
// keep all-reducing on their tensor group: replica 1's init waits for its
// own members only, and replica 0 is never poisoned. The world is refused
// on both.
TEST_F(NcclMultiGpuTest, ADomainReopensAloneWhileTheOtherSums) {
  if (MultiWorld() < 4) {
    GTEST_SKIP() << "needs 4 devices; this run has " << MultiWorld();
  }
  constexpr uint32_t kWorld = 4;
  ParallelTopology topology;
  topology.tensor = 2;
  topology.data = 2;
  auto job = InProcessJob::Create(kWorld);
  auto descriptor = [&](uint32_t r) {
    auto d = DistributedSessionDescriptor::FromTopology(topology, kWorld, r);
    EXPECT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->SetRecoveryDomain({r / 2, r / 2 * 2, 2}).ok());
    return *d;
  };
  // Rank r's tensor group: id 2 + r / 2 (common/topology.h).
  auto tensor = [](uint32_t r) { return CollectiveScope::Group(2 + r / 2); };
  // Sums {r + 1, flag} on the tensor group; the sums.
  auto sum = [&](NcclSession& session, uint32_t r,
                 float flag) -> absl::StatusOr<std::vector<float>> {
    auto x =
        Upload(Desc({2}), std::vector<float>{static_cast<float>(r + 1), flag},
               session.stream());
    auto out = session.AllReduceSum(tensor(r), x);
    if (!out.ok()) return out.status();
    if (absl::Status s = out->completion->Wait(); !s.ok()) return s;
    return Download<float>(out->output);
  };
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < kWorld; ++r) {
    control_planes.push_back(job->ForRank(r));
  }
  std::vector<std::unique_ptr<NcclSession>> sessions(kWorld);
  EachRank(kWorld, [&](uint32_t r) {
    auto session =
        NcclSession::Open(descriptor(r), control_planes[r].get(), OnDevice(r));
    ASSERT_TRUE(session.ok()) << session.status();
    sessions[r] = *std::move(session);
  });
  for (const auto& s : sessions) ASSERT_NE(s, nullptr);

  std::atomic<bool> reopening{false};
  std::atomic<bool> stop{false};
  std::atomic<int> sums_while_reopening{0};
  EachRank(kWorld, [&](uint32_t r) {
    NcclSession& session = *sessions[r];
    auto world = session.AllReduceSum(
        CollectiveScope::World(),
        Upload(Desc({1}), std::vector<float>{1.0f}, session.stream()));
    ASSERT_EQ(world.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(world.status().message(),
                                  "the world spans every domain and is not "
                                  "connected"))
        << world.status();
    EXPECT_FALSE(session.capabilities().world_collectives);
    if (r < 2) {
      // Replica 0: sums until both agree to stop (the flag is summed).
      while (true) {
        const bool during = reopening.load();
        auto got = sum(session, r, stop.load() ? 1.0f : 0.0f);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ((*got)[0], 3.0f);
        ASSERT_TRUE(session.poison().ok()) << session.poison();
        if (during && reopening.load()) ++sums_while_reopening;
        if ((*got)[1] > 0.0f) break;
      }
      return;
    }
    // Replica 1: sums, closes and re-opens its communicators, sums again.
    auto before = sum(session, r, 0.0f);
    ASSERT_TRUE(before.ok()) << before.status();
    EXPECT_EQ((*before)[0], 7.0f);
    if (r == 2) reopening = true;
    // Both members of replica 1 have seen replica 0 sum during the
    // re-open before the new session forms (bounded).
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    sessions[r].reset();
    while (sums_while_reopening.load() < 6 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    auto reopened =
        NcclSession::Open(descriptor(r), control_planes[r].get(), OnDevice(r));
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    auto after = sum(**reopened, r, 0.0f);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ((*after)[0], 7.0f);
    sessions[r] = *std::move(reopened);
    if (r == 2) {
      reopening = false;
      stop = true;
    }
  });
  EXPECT_GE(sums_while_reopening.load(), 6);
}

}  // namespace
}  // namespace rankd::dataplane::nccl
