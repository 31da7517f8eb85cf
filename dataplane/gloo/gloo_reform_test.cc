// GlooSession::Reform (docs/dataplane.md, "Re-forming after a loss"): three
// ranks as threads over real Gloo TCP connections and an in-process job
// that models epochs. A rank is lost, the survivors re-form their sessions
// while a replacement opens its own at the next epoch, and the three sum
// again; the survivors' own tensors are untouched and the epochs' keys
// never meet. A second loss while the survivors reopen is re-formed from in
// the same call. Also: the deadline (the reopen's included), a terminal
// failure, bad arguments.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/gloo/internal/rankd_store.h"
#include "dataplane/gloo/testing/gloo_test_cluster.h"
#include "dataplane/host_tensor.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::gloo {
namespace {

using testing::GlooTestCluster;
using testing::InProcessJob;

DistributedSessionDescriptor Descriptor(uint32_t world, uint32_t rank,
                                        uint64_t epoch) {
  auto descriptor = DistributedSessionDescriptor::Create(world, rank, {});
  EXPECT_TRUE(descriptor.ok()) << descriptor.status();
  EXPECT_TRUE(descriptor->SetEpoch(epoch).ok());
  return *descriptor;
}

// Runs fn(rank) on one thread per rank in `ranks` and joins them.
void RunRanks(const std::vector<uint32_t>& ranks,
              const std::function<void(uint32_t)>& fn) {
  std::vector<std::thread> threads;
  for (uint32_t r : ranks) threads.emplace_back([&fn, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

// The world sum of {rank + 1, 10 * (rank + 1)} over `sessions`.
void ExpectWorldSum(std::vector<std::unique_ptr<GlooSession>>& sessions) {
  const float n = static_cast<float>(sessions.size());
  const float sum = n * (n + 1) / 2;
  RunRanks({0, 1, 2}, [&](uint32_t r) {
    auto result = sessions[r]->AllReduceSum(
        CollectiveScope::World(),
        *HostTensor::FromVector<float>({2}, {r + 1.0f, 10.0f * (r + 1)}));
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_TRUE(result->completion->Wait().ok());
    EXPECT_EQ(*result->output.Values<float>(),
              absl::MakeConstSpan(std::vector<float>{sum, 10 * sum}));
  });
}

TEST(GlooReformTest, SurvivorsAndAReplacementFormTheNextEpoch) {
  auto job = InProcessJob::Create(3);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < 3; ++r) control_planes.push_back(job->ForRank(r));
  std::vector<std::unique_ptr<GlooSession>> sessions(3);
  RunRanks({0, 1, 2}, [&](uint32_t r) {
    auto session =
        GlooSession::Open(Descriptor(3, r, 1), control_planes[r].get(),
                          GlooTestCluster::DefaultOptions());
    ASSERT_TRUE(session.ok()) << session.status();
    sessions[r] = *std::move(session);
  });
  ASSERT_TRUE(sessions[0] && sessions[1] && sessions[2]);
  ExpectWorldSum(sessions);
  // The weights the survivors hold across the recovery.
  std::vector<HostTensor> weights;
  for (uint32_t r = 0; r < 2; ++r) {
    weights.push_back(*HostTensor::FromVector<float>({3}, {1.5f + r, 2, 3}));
  }
  const std::vector<std::string> epoch1_keys = job->Keys();

  // Rank 2's process dies; the job moves on to epoch 2.
  sessions[2].reset();
  control_planes[2].reset();
  ASSERT_TRUE(
      job->Lose(2, absl::UnavailableError("rank 2 was lost (node n2)")).ok());
  ASSERT_EQ(job->epoch(), 2u);
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(sessions[r]->poison().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(
        absl::StrContains(sessions[r]->poison().message(), "rank 2 was lost"))
        << sessions[r]->poison();
    auto refused = sessions[r]->AllReduceSum(
        CollectiveScope::World(), *HostTensor::FromVector<float>({1}, {1}));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  }

  RunRanks({0, 1, 2}, [&](uint32_t r) {
    if (r == 2) {
      // The replacement process: a new control plane, a fresh session.
      auto control_plane = job->Replace(2);
      ASSERT_TRUE(control_plane.ok()) << control_plane.status();
      control_planes[2] = *std::move(control_plane);
      auto session = GlooSession::Open(Descriptor(3, 2, job->epoch()),
                                       control_planes[2].get(),
                                       GlooTestCluster::DefaultOptions());
      ASSERT_TRUE(session.ok()) << session.status();
      sessions[2] = *std::move(session);
      return;
    }
    auto reformed =
        GlooSession::Reform(std::move(sessions[r]), absl::Seconds(20));
    ASSERT_TRUE(reformed.ok()) << reformed.status();
    sessions[r] = *std::move(reformed);
  });
  ASSERT_TRUE(sessions[0] && sessions[1] && sessions[2]);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(sessions[r]->descriptor().epoch(), 2u);
    EXPECT_TRUE(sessions[r]->poison().ok()) << sessions[r]->poison();
    EXPECT_TRUE(control_planes[r]->JobHealth().ok());
  }
  ExpectWorldSum(sessions);
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(*weights[r].Values<float>(),
              absl::MakeConstSpan(std::vector<float>{1.5f + r, 2, 3}));
  }

  // Epoch 1's keys are where they were; everything since is epoch 2's, and
  // session numbering started again there.
  const std::set<std::string> before(epoch1_keys.begin(), epoch1_keys.end());
  bool rendezvous = false;
  for (const std::string& key : job->Keys()) {
    if (before.contains(key)) {
      EXPECT_FALSE(absl::StartsWith(key, "epoch/")) << key;
      continue;
    }
    EXPECT_TRUE(absl::StartsWith(key, "epoch/2/r")) << key;
    rendezvous |= absl::StartsWith(key, "epoch/2/r2/gloo/job@1/");
  }
  EXPECT_TRUE(rendezvous);
  for (uint32_t r = 0; r < 3; ++r) {
    const std::string counter =
        absl::StrCat(internal::RankdStore::Prefix("job@1", 0, "sessions"), r);
    EXPECT_EQ(job->Peek(OwnedKey(r, counter, 2)), "1") << r;
    EXPECT_EQ(job->Peek(OwnedKey(r, counter)), "1") << r;
  }
}

// Waits until every rank in `ranks` wrote a key under "epoch/<epoch>/r<r>/":
// it rejoined at that epoch and is opening its session there.
bool AwaitOpening(const InProcessJob& job, uint64_t epoch,
                  const std::vector<uint32_t>& ranks) {
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until) {
    size_t opening = 0;
    const std::vector<std::string> keys = job.Keys();
    for (uint32_t r : ranks) {
      const std::string prefix = absl::StrCat("epoch/", epoch, "/r", r, "/");
      opening += std::any_of(keys.begin(), keys.end(),
                             [&prefix](const std::string& key) {
                               return absl::StartsWith(key, prefix);
                             });
    }
    if (opening == ranks.size()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// A second loss while the survivors open their sessions at epoch 2 (the
// first replacement dies after joining, before it connects) ends epoch 2
// too. Each survivor's one Reform call joins epoch 3 and opens there with
// a second replacement; before, the call returned the open's error.
TEST(GlooReformTest, ASecondLossWhileReopeningReformsAtTheEpochAfter) {
  auto job = InProcessJob::Create(3);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < 3; ++r) control_planes.push_back(job->ForRank(r));
  std::vector<std::unique_ptr<GlooSession>> sessions(3);
  RunRanks({0, 1, 2}, [&](uint32_t r) {
    auto session =
        GlooSession::Open(Descriptor(3, r, 1), control_planes[r].get(),
                          GlooTestCluster::DefaultOptions());
    ASSERT_TRUE(session.ok()) << session.status();
    sessions[r] = *std::move(session);
  });
  ASSERT_TRUE(sessions[0] && sessions[1] && sessions[2]);
  sessions[2].reset();
  control_planes[2].reset();
  ASSERT_TRUE(job->Lose(2, absl::UnavailableError("rank 2 was lost")).ok());
  // The first replacement joins epoch 2, so the survivors' Rejoin returns
  // and they open their sessions there, waiting for its rendezvous.
  auto first_replacement = job->Replace(2);
  ASSERT_TRUE(first_replacement.ok()) << first_replacement.status();

  std::vector<absl::Status> outcomes(2);
  std::vector<std::thread> survivors;
  for (uint32_t r = 0; r < 2; ++r) {
    survivors.emplace_back([&, r] {
      auto reformed =
          GlooSession::Reform(std::move(sessions[r]), absl::Seconds(30));
      outcomes[r] = reformed.status();
      if (reformed.ok()) sessions[r] = *std::move(reformed);
    });
  }
  const bool opening = AwaitOpening(*job, 2, {0, 1});
  EXPECT_TRUE(opening);
  // The first replacement dies before it connects: epoch 2 ends too.
  first_replacement->reset();
  ASSERT_TRUE(
      job->Lose(2, absl::UnavailableError("rank 2's replacement was lost"))
          .ok());
  ASSERT_EQ(job->epoch(), 3u);
  auto second_replacement = job->Replace(2);
  ASSERT_TRUE(second_replacement.ok()) << second_replacement.status();
  control_planes[2] = *std::move(second_replacement);
  auto opened = GlooSession::Open(Descriptor(3, 2, 3), control_planes[2].get(),
                                  GlooTestCluster::DefaultOptions());
  for (std::thread& t : survivors) t.join();
  ASSERT_TRUE(opened.ok()) << opened.status();
  sessions[2] = *std::move(opened);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(outcomes[r].ok()) << r << ": " << outcomes[r];
  }
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(sessions[r]->descriptor().epoch(), 3u);
    EXPECT_TRUE(control_planes[r]->JobHealth().ok());
  }
  ExpectWorldSum(sessions);
}

// The reopen's own connect bound (20 s here) does not outlast the caller's
// timeout: a replacement that joined but never opens (the job healthy at
// the new epoch) ends the call when its timeout passes, with Open's error.
TEST(GlooReformTest, TheReopenIsBoundedByTheCallersTimeout) {
  auto job = InProcessJob::Create(2);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < 2; ++r) control_planes.push_back(job->ForRank(r));
  std::vector<std::unique_ptr<GlooSession>> sessions(2);
  RunRanks({0, 1}, [&](uint32_t r) {
    auto session =
        GlooSession::Open(Descriptor(2, r, 1), control_planes[r].get(),
                          GlooTestCluster::DefaultOptions());
    ASSERT_TRUE(session.ok()) << session.status();
    sessions[r] = *std::move(session);
  });
  ASSERT_TRUE(sessions[0] && sessions[1]);
  sessions[1].reset();
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  auto silent_replacement = job->Replace(1);
  ASSERT_TRUE(silent_replacement.ok()) << silent_replacement.status();
  const absl::Time start = absl::Now();
  auto reformed =
      GlooSession::Reform(std::move(sessions[0]), absl::Milliseconds(1500));
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
  // Open's error for the world it could not connect, as Open names it.
  EXPECT_FALSE(reformed.ok());
  EXPECT_TRUE(absl::StrContains(reformed.status().message(),
                                "re-forming the session of epoch 1: gloo "
                                "backend: connecting world"))
      << reformed.status();
}

// A process with two sessions re-forms both, in order: the second finds
// its process already at the new epoch (the first's Rejoin) and re-forms
// into it at once, though the job looks healthy by then.
TEST(GlooReformTest, AProcessReformsEveryOneOfItsSessions) {
  auto job = InProcessJob::Create(2);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < 2; ++r) control_planes.push_back(job->ForRank(r));
  std::vector<std::vector<std::unique_ptr<GlooSession>>> sessions(2);
  RunRanks({0, 1}, [&](uint32_t r) {
    for (int s = 0; s < 2; ++s) {
      auto session =
          GlooSession::Open(Descriptor(2, r, 1), control_planes[r].get(),
                            GlooTestCluster::DefaultOptions());
      ASSERT_TRUE(session.ok()) << session.status();
      sessions[r].push_back(*std::move(session));
    }
  });
  ASSERT_EQ(sessions[0].size(), 2u);
  ASSERT_EQ(sessions[1].size(), 2u);
  sessions[1].clear();
  control_planes[1].reset();
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  const absl::Time start = absl::Now();
  RunRanks({0, 1}, [&](uint32_t r) {
    if (r == 1) {
      auto control_plane = job->Replace(1);
      ASSERT_TRUE(control_plane.ok()) << control_plane.status();
      control_planes[1] = *std::move(control_plane);
      for (int s = 0; s < 2; ++s) {
        auto session = GlooSession::Open(Descriptor(2, 1, job->epoch()),
                                         control_planes[1].get(),
                                         GlooTestCluster::DefaultOptions());
        ASSERT_TRUE(session.ok()) << session.status();
        sessions[1].push_back(*std::move(session));
      }
      return;
    }
    for (int s = 0; s < 2; ++s) {
      auto reformed =
          GlooSession::Reform(std::move(sessions[0][s]), absl::Seconds(20));
      ASSERT_TRUE(reformed.ok())
          << "session " << s << ": " << reformed.status();
      sessions[0][s] = *std::move(reformed);
    }
  });
  // No loss-notice grace was waited for the second session.
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
  ASSERT_EQ(sessions[1].size(), 2u);
  for (int s = 0; s < 2; ++s) {
    ASSERT_NE(sessions[0][s], nullptr);
    EXPECT_EQ(sessions[0][s]->descriptor().epoch(), 2u);
    RunRanks({0, 1}, [&](uint32_t r) {
      auto sum = sessions[r][s]->AllReduceSum(
          CollectiveScope::World(), *HostTensor::FromVector<float>({1}, {1}));
      ASSERT_TRUE(sum.ok()) << sum.status();
      ASSERT_TRUE(sum->completion->Wait().ok());
      EXPECT_EQ(*sum->output.Values<float>(),
                absl::MakeConstSpan(std::vector<float>{2.0f}));
    });
  }
}

TEST(GlooReformTest, WithoutAReplacementTheDeadlineNamesTheEpoch) {
  auto job = InProcessJob::Create(2);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < 2; ++r) control_planes.push_back(job->ForRank(r));
  std::vector<std::unique_ptr<GlooSession>> sessions(2);
  RunRanks({0, 1}, [&](uint32_t r) {
    auto session =
        GlooSession::Open(Descriptor(2, r, 1), control_planes[r].get(),
                          GlooTestCluster::DefaultOptions());
    ASSERT_TRUE(session.ok()) << session.status();
    sessions[r] = *std::move(session);
  });
  ASSERT_TRUE(sessions[0] && sessions[1]);
  sessions[1].reset();
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  auto reformed =
      GlooSession::Reform(std::move(sessions[0]), absl::Milliseconds(300));
  ASSERT_EQ(reformed.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(reformed.status().message(),
                                "re-forming the session of epoch 1"))
      << reformed.status();
  EXPECT_TRUE(
      absl::StrContains(reformed.status().message(), "epoch 2 was not whole"))
      << reformed.status();
  EXPECT_TRUE(absl::StrContains(reformed.status().message(), "missing ranks 1"))
      << reformed.status();
}

TEST(GlooReformTest, ATerminalFailureKeepsTheSessionsErrorClass) {
  auto job = InProcessJob::Create(1);
  auto control_plane = job->ForRank(0);
  auto session = GlooSession::Open(Descriptor(1, 0, 1), control_plane.get(),
                                   GlooTestCluster::DefaultOptions());
  ASSERT_TRUE(session.ok()) << session.status();
  job->Fail(absl::UnavailableError("node n0 was lost; recovery is off"));
  ASSERT_EQ((*session)->poison().code(), absl::StatusCode::kUnavailable);
  auto reformed = GlooSession::Reform(*std::move(session), absl::Seconds(5));
  EXPECT_EQ(reformed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(reformed.status().message(), "recovery is off"))
      << reformed.status();
}

// Only a loss moves the job on: a session poisoned while the job stays
// healthy (here its owner's Poison; a stalled peer or a disagreement alike)
// is refused at once, not after the whole timeout waiting for an epoch that
// never comes.
TEST(GlooReformTest, AHealthyJobHasNoEpochToReformInto) {
  auto job = InProcessJob::Create(1);
  auto control_plane = job->ForRank(0);
  auto session = GlooSession::Open(Descriptor(1, 0, 1), control_plane.get(),
                                   GlooTestCluster::DefaultOptions());
  ASSERT_TRUE(session.ok()) << session.status();
  (*session)->Poison(absl::DeadlineExceededError("rank 3 stalled"));
  const absl::Time start = absl::Now();
  auto reformed = GlooSession::Reform(*std::move(session), absl::Minutes(5));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(reformed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(reformed.status().message(),
                                "the job is healthy at epoch 1"))
      << reformed.status();
  EXPECT_TRUE(absl::StrContains(reformed.status().message(), "rank 3 stalled"))
      << reformed.status();
}

TEST(GlooReformTest, BadArgumentsAreRefused) {
  auto none = GlooSession::Reform(nullptr, absl::Seconds(1));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(none.status().message(), "no session"))
      << none.status();
  auto job = InProcessJob::Create(1);
  auto control_plane = job->ForRank(0);
  auto session = GlooSession::Open(Descriptor(1, 0, 1), control_plane.get(),
                                   GlooTestCluster::DefaultOptions());
  ASSERT_TRUE(session.ok()) << session.status();
  auto zero = GlooSession::Reform(*std::move(session), absl::ZeroDuration());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
}

// A control plane that only knows epoch 1 says so.
class EpochOneControlPlane final : public ControlPlane {
 public:
  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t>, absl::Duration) override {
    return absl::UnimplementedError("unused");
  }
  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t>, absl::Duration) override {
    return absl::UnimplementedError("unused");
  }
  absl::Status KvSet(absl::string_view, absl::string_view) override {
    return absl::UnimplementedError("unused");
  }
  absl::StatusOr<std::string> KvGet(absl::string_view,
                                    absl::Duration) override {
    return absl::UnimplementedError("unused");
  }
  absl::StatusOr<int64_t> KvAdd(absl::string_view, int64_t) override {
    return absl::UnimplementedError("unused");
  }
  absl::Status JobHealth() const override { return absl::OkStatus(); }
  void OnJobFailure(std::function<void(const absl::Status&)>) override {}
  std::string Namespace() const override { return "job@1"; }
};

TEST(ControlPlaneRejoinTest, TheDefaultCannotJoinALaterEpoch) {
  EpochOneControlPlane control_plane;
  auto rejoined = control_plane.Rejoin(1, absl::Seconds(1));
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(rejoined.status().message(),
                                "cannot join a later epoch"))
      << rejoined.status();
}

TEST(EpochKeyTest, EpochOneKeysAreUnchangedLaterOnesAreScoped) {
  EXPECT_EQ(EpochKey(1, "r0/x"), "r0/x");
  EXPECT_EQ(OwnedKey(0, "x"), "r0/x");
  EXPECT_EQ(OwnedKey(0, "x", 1), "r0/x");
  EXPECT_EQ(OwnedKey(3, "gloo/a", 2), "epoch/2/r3/gloo/a");
  EXPECT_EQ(EpochKey(7, "k"), "epoch/7/k");
}

}  // namespace
}  // namespace rankd::dataplane::gloo
