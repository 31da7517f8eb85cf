// Unique-id brokering through the control plane's key-value broker, with
// simulated ranks (threads) on an in-process control plane and a fake id
// generator. Runs on every machine (no CUDA needed).
#include "dataplane/nccl/internal/unique_id_broker.h"

#include <atomic>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dataplane/nccl/internal/comm_name.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl::internal {
namespace {

using ::rankd::dataplane::testing::InProcessJob;

// Distinct 128-byte ids: "id-<n>" padded.
UniqueIdGenerator Counter(std::atomic<int>* next) {
  return [next]() -> absl::StatusOr<std::string> {
    std::string id = absl::StrCat("id-", next->fetch_add(1));
    id.resize(kNcclUniqueIdBytes, '.');
    return id;
  };
}

CommIdRequest Request(const std::vector<uint32_t>& members, uint32_t rank,
                      uint32_t world_size, uint32_t ranks_per_id = 128) {
  CommIdRequest req;
  req.comm_name = CommName(members, world_size);
  req.members = members;
  req.rank = rank;
  req.plan = PlanUniqueIds(static_cast<uint32_t>(members.size()), ranks_per_id,
                           /*scalable_available=*/true);
  return req;
}

std::vector<uint32_t> Iota(uint32_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), 0u);
  return v;
}

TEST(BrokerUniqueIds, RootPublishesOthersFetch) {
  constexpr uint32_t kWorld = 4;
  auto job = InProcessJob::Create(kWorld, "job/7");
  std::atomic<int> next{0};
  std::vector<absl::StatusOr<std::vector<std::vector<std::string>>>> results(
      kWorld, absl::UnknownError("not run"));
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      std::vector<CommIdRequest> reqs = {Request(Iota(kWorld), r, kWorld)};
      results[r] = BrokerUniqueIds(*cp, "default", reqs, Counter(&next),
                                   absl::Now() + absl::Seconds(10), nullptr);
    });
  }
  for (auto& t : ranks) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].ok()) << r << ": " << results[r].status();
    ASSERT_EQ(results[r]->size(), 1u);
    ASSERT_EQ((*results[r])[0].size(), 1u);
    EXPECT_EQ((*results[r])[0][0], (*results[0])[0][0]) << r;
  }
  EXPECT_EQ(next.load(), 1);  // only the root generated an id
  EXPECT_EQ(job->kv_sets(), 1);
  // Under the root's own key (rank 0 roots the world's one id).
  auto stored = job->Peek("r0/job/7/nccl/default/world/uid/0of1");
  ASSERT_TRUE(stored.has_value());
  EXPECT_TRUE(absl::StartsWith(*stored, "nccl-uid-v1:"));
}

// At epoch 2 the ids live under epoch/2/ (EpochKey): the survivor and the
// replacement agree on a new id and never read epoch 1's.
TEST(BrokerUniqueIds, ALaterEpochBrokersNewIdsUnderItsOwnKeys) {
  constexpr uint32_t kWorld = 2;
  auto job = InProcessJob::Create(kWorld, "job/7");
  std::atomic<int> next{0};
  std::vector<std::unique_ptr<ControlPlane>> cps;
  for (uint32_t r = 0; r < kWorld; ++r) cps.push_back(job->ForRank(r));
  auto broker = [&](uint64_t epoch) {
    std::vector<absl::StatusOr<std::vector<std::vector<std::string>>>> ids(
        kWorld, absl::UnknownError("not run"));
    std::vector<std::thread> ranks;
    for (uint32_t r = 0; r < kWorld; ++r) {
      ranks.emplace_back([&, r] {
        ids[r] = BrokerUniqueIds(
            *cps[r], "default", {Request(Iota(kWorld), r, kWorld)},
            Counter(&next), absl::Now() + absl::Seconds(10), nullptr, epoch);
      });
    }
    for (auto& t : ranks) t.join();
    for (uint32_t r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(ids[r].ok()) << r << ": " << ids[r].status();
    }
    return ids;
  };
  auto epoch1 = broker(1);
  ASSERT_TRUE(epoch1[0].ok() && epoch1[1].ok());
  ASSERT_TRUE(job->Lose(1, absl::UnavailableError("rank 1 was lost")).ok());
  auto replacement = job->Replace(1);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  cps[1] = *std::move(replacement);
  ASSERT_TRUE(cps[0]->Rejoin(1, absl::Seconds(10)).ok());
  auto epoch2 = broker(2);
  ASSERT_TRUE(epoch2[0].ok() && epoch2[1].ok());
  EXPECT_EQ((*epoch2[1])[0][0], (*epoch2[0])[0][0]);
  EXPECT_NE((*epoch2[0])[0][0], (*epoch1[0])[0][0]);
  EXPECT_TRUE(job->Peek("r0/job/7/nccl/default/world/uid/0of1").has_value());
  EXPECT_TRUE(
      job->Peek("epoch/2/r0/job/7/nccl/default/world/uid/0of1").has_value());
  EXPECT_EQ(next.load(), 2);  // one id per epoch, by its root
}

TEST(BrokerUniqueIds, OneIdPer128RanksWithScalableInit) {
  constexpr uint32_t kWorld = 260;  // 3 ids: roots 0, 87, 174
  auto job = InProcessJob::Create(kWorld);
  std::atomic<int> next{0};
  std::vector<std::vector<std::string>> got(kWorld);
  std::vector<absl::Status> status(kWorld);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      std::vector<CommIdRequest> reqs = {Request(Iota(kWorld), r, kWorld)};
      auto ids = BrokerUniqueIds(*cp, "big", reqs, Counter(&next),
                                 absl::Now() + absl::Seconds(20), nullptr);
      status[r] = ids.status();
      if (ids.ok()) got[r] = (*ids)[0];
    });
  }
  for (auto& t : ranks) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(status[r].ok()) << r << ": " << status[r];
    ASSERT_EQ(got[r].size(), 3u);
    EXPECT_EQ(got[r], got[0]) << r;
  }
  EXPECT_EQ(next.load(), 3);
  EXPECT_EQ(job->kv_sets(), 3);
  const uint32_t roots[] = {0, 87, 174};
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(job->Peek(absl::StrCat("r", roots[i], "/", job->name_space(),
                                       "/nccl/big/world/uid/", i, "of3"))
                    .has_value());
  }
  EXPECT_NE(got[0][0], got[0][1]);
  EXPECT_NE(got[0][1], got[0][2]);
}

TEST(BrokerUniqueIds, SingleRankCommunicatorNeedsNoBroker) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(2);
  std::atomic<int> next{0};
  std::vector<CommIdRequest> reqs = {Request({2}, 0, 4)};
  auto ids = BrokerUniqueIds(*cp, "default", reqs, Counter(&next),
                             absl::Now() + absl::Seconds(1), nullptr);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ((*ids)[0].size(), 1u);
  EXPECT_EQ(job->kv_sets(), 0);
  EXPECT_EQ(job->kv_gets(), 0);
}

TEST(BrokerUniqueIds, MissingRootIsADeadlineNamingKeyAndRank) {
  auto job = InProcessJob::Create(4);
  auto cp = job->ForRank(1);
  std::atomic<int> next{0};
  // Group {3, 1}: its root is communicator rank 0 = world rank 3, which
  // never comes.
  std::vector<CommIdRequest> reqs = {Request({3, 1}, 1, 4)};
  const absl::Time start = absl::Now();
  auto ids = BrokerUniqueIds(*cp, "default", reqs, Counter(&next),
                             absl::Now() + absl::Milliseconds(300), nullptr);
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(
      ids.status().message(),
      UniqueIdKey(job->name_space(), "default", reqs[0].comm_name, 0, 1)))
      << ids.status();
  EXPECT_TRUE(absl::StrContains(ids.status().message(), "world rank 3"))
      << ids.status();
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_EQ(next.load(), 0);
}

TEST(BrokerUniqueIds, JobFailureEndsTheWait) {
  auto job = InProcessJob::Create(2);
  auto cp = job->ForRank(1);
  std::atomic<int> next{0};
  std::thread failer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    job->Fail(absl::AbortedError("rank 0 lost"));
  });
  const absl::Time start = absl::Now();
  std::vector<CommIdRequest> reqs = {Request(Iota(2), 1, 2)};
  auto ids = BrokerUniqueIds(*cp, "default", reqs, Counter(&next),
                             absl::Now() + absl::Seconds(30), nullptr);
  failer.join();
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(ids.status().message(), "rank 0 lost"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(BrokerUniqueIds, InterruptEndsTheWait) {
  auto job = InProcessJob::Create(2);
  auto cp = job->ForRank(1);
  std::atomic<int> next{0};
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    stop = true;
  });
  std::vector<CommIdRequest> reqs = {Request(Iota(2), 1, 2)};
  auto ids = BrokerUniqueIds(
      *cp, "default", reqs, Counter(&next), absl::Now() + absl::Seconds(30),
      [&]() -> absl::Status {
        return stop ? absl::CancelledError("stopped") : absl::OkStatus();
      });
  stopper.join();
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kCancelled);
}

TEST(BrokerUniqueIds, RejectsForeignValues) {
  auto job = InProcessJob::Create(2);
  auto setter = job->ForRank(0);
  std::vector<CommIdRequest> reqs = {Request(Iota(2), 1, 2)};
  ASSERT_TRUE(setter
                  ->KvSet(OwnedKey(0, UniqueIdKey(job->name_space(), "default",
                                                  "world", 0, 1)),
                          "not an id")
                  .ok());
  auto cp = job->ForRank(1);
  std::atomic<int> next{0};
  auto ids = BrokerUniqueIds(*cp, "default", reqs, Counter(&next),
                             absl::Now() + absl::Seconds(1), nullptr);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BrokerUniqueIds, CrossedRootsDoNotDeadlock) {
  // Rank 0 is root of group {0,1}; rank 1 is root of group {1,0}; each
  // lists the other's group first. Publishing before fetching avoids a
  // deadlock.
  auto job = InProcessJob::Create(2);
  std::atomic<int> next{0};
  std::vector<absl::Status> status(2);
  std::vector<std::vector<std::vector<std::string>>> got(2);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto cp = job->ForRank(r);
      std::vector<CommIdRequest> reqs;
      if (r == 0) {
        reqs = {Request({1, 0}, 1, 2), Request({0, 1}, 0, 2)};
      } else {
        reqs = {Request({0, 1}, 1, 2), Request({1, 0}, 0, 2)};
      }
      auto ids = BrokerUniqueIds(*cp, "x", reqs, Counter(&next),
                                 absl::Now() + absl::Seconds(5), nullptr);
      status[r] = ids.status();
      if (ids.ok()) got[r] = *ids;
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  EXPECT_EQ(got[0][0], got[1][1]);  // group {1,0}
  EXPECT_EQ(got[0][1], got[1][0]);  // group {0,1} ("world")
  EXPECT_EQ(next.load(), 2);
}

TEST(BrokerUniqueIds, ValidatesTagAndRequests) {
  auto job = InProcessJob::Create(2);
  auto cp = job->ForRank(0);
  std::atomic<int> next{0};
  std::vector<CommIdRequest> reqs = {Request(Iota(2), 0, 2)};
  EXPECT_EQ(BrokerUniqueIds(*cp, "bad/tag", reqs, Counter(&next),
                            absl::Now() + absl::Seconds(1), nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  reqs[0].rank = 5;
  EXPECT_EQ(BrokerUniqueIds(*cp, "t", reqs, Counter(&next),
                            absl::Now() + absl::Seconds(1), nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job->kv_sets(), 0);
}

TEST(BrokerUniqueIds, GeneratorErrorsPropagate) {
  auto job = InProcessJob::Create(2);
  auto cp = job->ForRank(0);
  std::vector<CommIdRequest> reqs = {Request(Iota(2), 0, 2)};
  auto ids = BrokerUniqueIds(
      *cp, "t", reqs,
      []() -> absl::StatusOr<std::string> {
        return absl::UnavailableError("no nccl");
      },
      absl::Now() + absl::Seconds(1), nullptr);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kUnavailable);
  auto short_id = BrokerUniqueIds(
      *cp, "t", reqs,
      []() -> absl::StatusOr<std::string> { return std::string("short"); },
      absl::Now() + absl::Seconds(1), nullptr);
  EXPECT_EQ(short_id.status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace rankd::dataplane::nccl::internal
