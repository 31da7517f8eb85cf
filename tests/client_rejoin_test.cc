// Client::Rejoin with real daemons (issue 38, part 2, control plane): two
// nodes of two ranks with --recovery=on. Ranks 0-2 are rankd::Client
// objects of this process (each its own connection and incarnation); rank
// 3 is a real rank_worker process killed with SIGKILL mid-round. The
// survivors see the loss in JobHealth, a replacement Client takes rank 3,
// the survivors Rejoin into epoch 2 and a round across every rank
// succeeds, over the round slots and over gRPC. Also: Rejoin before any
// loss times out naming the epoch, without a replacement it times out
// naming the missing rank (and succeeds when retried once one came), and
// with recovery off it returns the job's failure at once.
#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = "itest";
constexpr uint32_t kWorld = 4;
constexpr absl::Duration kPatience = absl::Seconds(20);

ClusterOptions Options(bool recovery) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  if (recovery) {
    options.extra_flags = {"--recovery=on", "--recovery_deadline_ms=60000"};
  }
  return options;
}

// A Client for `rank` through its node's Unix socket, with its own token.
std::unique_ptr<Client> ConnectRank(LocalCluster& cluster, uint32_t rank,
                                    bool shared_memory_rounds) {
  ClientOptions options;
  options.target = cluster.socket_target(rank / 2);
  options.bearer_token = cluster.rank_token(rank);
  options.shared_memory_rounds = shared_memory_rounds;
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

JoinOptions JoinAs(uint32_t rank, absl::Duration wait_for_world) {
  JoinOptions join;
  join.job_id = kJob;
  join.local_rank = rank % 2;
  join.rank = rank;
  join.world_size = kWorld;
  join.device.set_kind("cpu");
  join.wait_for_world = wait_for_world;
  return join;
}

// Polls node `node`'s member list (a condition, not a sleep) until `done`.
bool AwaitMembers(LocalCluster& cluster, uint32_t node,
                  const std::function<bool(const v1::MemberList&)>& done) {
  absl::Status listed = cluster.AwaitMembers(node, done, kPatience);
  EXPECT_TRUE(listed.ok()) << listed;
  return listed.ok();
}

// Polls `condition` until it holds or kPatience passes.
bool Eventually(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + kPatience;
  while (absl::Now() < give_up) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

// Survivors 0-2 (Clients) joined with rank 3 a rank_worker process.
struct World {
  std::vector<std::unique_ptr<Client>> survivors;
  ChildProcess victim;
};

void StartWorld(LocalCluster& cluster, bool shared_memory_rounds,
                World* world) {
  auto victim = cluster.StartWorker(1, 1, {"--hold_ms=60000"});
  ASSERT_TRUE(victim.ok()) << victim.status();
  world->victim = *std::move(victim);
  std::vector<absl::Status> joined(3);
  std::vector<std::thread> joins;
  for (uint32_t r = 0; r < 3; ++r) {
    world->survivors.push_back(ConnectRank(cluster, r, shared_memory_rounds));
    ASSERT_NE(world->survivors.back(), nullptr);
  }
  for (uint32_t r = 0; r < 3; ++r) {
    joins.emplace_back([&, r] {
      joined[r] = world->survivors[r]->Join(JoinAs(r, kPatience)).status();
    });
  }
  for (auto& t : joins) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(joined[r].ok()) << "rank " << r << ": " << joined[r];
    EXPECT_EQ(world->survivors[r]->epoch(), 1u);
  }
}

class ClientRejoinTest : public ::testing::TestWithParam<bool> {};

TEST_P(ClientRejoinTest, SurvivorsRejoinAfterAKilledRankIsReplaced) {
  const bool shared_memory = GetParam();
  LocalCluster cluster(Options(/*recovery=*/true));
  ASSERT_TRUE(cluster.Start().ok());
  World world;
  ASSERT_NO_FATAL_FAILURE(StartWorld(cluster, shared_memory, &world));
  std::vector<std::unique_ptr<Client>>& survivors = world.survivors;
  for (auto& s : survivors) {
    EXPECT_EQ(absl::StartsWith(s->round_path(), "shared-memory"), shared_memory)
        << s->round_path();
  }

  // A round is pending on every survivor when rank 3's process dies.
  std::vector<absl::Status> pending(3);
  std::vector<std::thread> rounds;
  for (uint32_t r = 0; r < 3; ++r) {
    rounds.emplace_back([&, r] {
      pending[r] =
          survivors[r]->AllGatherWords({r}, absl::Seconds(30)).status();
    });
  }
  AwaitMembers(cluster, 0, MembersInRound({0, 1}));
  AwaitMembers(cluster, 1, MembersInRound({2}));
  world.victim.Signal(SIGKILL);
  for (auto& t : rounds) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(pending[r].code(), absl::StatusCode::kAborted)
        << "rank " << r << ": " << pending[r];
    ASSERT_TRUE(Eventually([&] { return !survivors[r]->JobHealth().ok(); }));
    // The job did not fail: the loss ended its epoch.
    EXPECT_TRUE(survivors[r]->descriptor().recovers_in_place());
    EXPECT_THAT(survivors[r]->JobHealth().message(),
                HasSubstr(" epoch 1 ended (MEMBER_LOST, node 1, rank 3, "));
    EXPECT_THAT(survivors[r]->JobHealth().message(),
                Not(HasSubstr(" failed (")));
    EXPECT_TRUE(Client::EndsAnEpoch(survivors[r]->JobHealth()));
  }

  // The survivors wait in Rejoin while the slot is empty.
  std::vector<absl::StatusOr<v1::SessionDescriptor>> rejoined(
      3, absl::UnknownError("not run"));
  std::vector<std::thread> rejoins;
  for (uint32_t r = 0; r < 3; ++r) {
    rejoins.emplace_back(
        [&, r] { rejoined[r] = survivors[r]->Rejoin(1, kPatience); });
  }
  // The replacement: a new process (incarnation) for rank 3.
  std::unique_ptr<Client> replacement = ConnectRank(cluster, 3, shared_memory);
  ASSERT_NE(replacement, nullptr);
  auto joined = replacement->Join(JoinAs(3, kPatience));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->epoch(), 2u);
  for (auto& t : rejoins) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(rejoined[r].ok())
        << "rank " << r << ": " << rejoined[r].status();
    EXPECT_EQ(rejoined[r]->epoch(), 2u);
    EXPECT_EQ(rejoined[r]->rank(), r);
    EXPECT_EQ(survivors[r]->epoch(), 2u);
    EXPECT_TRUE(survivors[r]->JobHealth().ok()) << survivors[r]->JobHealth();
    EXPECT_EQ(absl::StartsWith(survivors[r]->round_path(), "shared-memory"),
              shared_memory)
        << survivors[r]->round_path();
  }
  // The replacement does not take epoch 1's loss for its own.
  EXPECT_TRUE(replacement->JobHealth().ok()) << replacement->JobHealth();

  // A second Rejoin for the same ended epoch returns at once.
  const absl::Time start = absl::Now();
  auto again = survivors[0]->Rejoin(1, kPatience);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch(), 2u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));

  // Round 1 of epoch 2 across every rank.
  std::vector<Client*> all = {survivors[0].get(), survivors[1].get(),
                              survivors[2].get(), replacement.get()};
  std::vector<absl::StatusOr<std::vector<uint32_t>>> results(
      kWorld, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      results[r] = all[r]->AllGatherWords({r, 100 + r}, absl::Seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    EXPECT_EQ(*results[r],
              (std::vector<uint32_t>{0, 100, 1, 101, 2, 102, 3, 103}));
  }
  ASSERT_TRUE(world.victim.Wait(kPatience).has_value());
}

// A replacement that joined a recovering job waits for the world; a second
// loss meanwhile ends the epoch it joined into. The coordinator had given
// it the slot, so it must not just be told ABORTED and dropped (a new
// process for the rank would then find the slot held by the old
// incarnation, and the job would never be whole again): its join goes on
// into the next epoch, and the job recovers once the second rank is
// replaced too. Ranks 0-1 are Clients, 2-3 rank_worker processes.
TEST(ClientRejoinSecondLossTest,
     AReplacementWaitingWhenItsEpochEndsJoinsTheNext) {
  LocalCluster cluster(Options(/*recovery=*/true));
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> workers;
  for (uint32_t local = 0; local < 2; ++local) {
    auto worker = cluster.StartWorker(
        1, local, {"--hold_ms=60000", "--hold_through_failure"});
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers.push_back(*std::move(worker));
  }
  std::vector<std::unique_ptr<Client>> survivors;
  std::vector<absl::Status> joined(2);
  std::vector<std::thread> joins;
  for (uint32_t r = 0; r < 2; ++r) {
    survivors.push_back(ConnectRank(cluster, r, /*shared_memory_rounds=*/true));
    ASSERT_NE(survivors.back(), nullptr);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    joins.emplace_back([&, r] {
      joined[r] = survivors[r]->Join(JoinAs(r, kPatience)).status();
    });
  }
  for (auto& t : joins) t.join();
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(joined[r].ok()) << joined[r];

  // Rank 3 is lost: epoch 1 ends.
  workers[1].Signal(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return !survivors[0]->JobHealth().ok(); }));
  // Its replacement joins and waits for the world (the survivors have not
  // rejoined), holding the slot at the coordinator.
  std::unique_ptr<Client> replacement = ConnectRank(cluster, 3, true);
  ASSERT_NE(replacement, nullptr);
  absl::StatusOr<v1::SessionDescriptor> replaced =
      absl::UnknownError("not run");
  std::thread waiting(
      [&] { replaced = replacement->Join(JoinAs(3, absl::Seconds(60))); });
  ASSERT_TRUE(AwaitMembers(cluster, 0, [](const v1::MemberList& list) {
    for (const auto& m : list.members()) {
      if (m.rank() == 3 && m.epoch() == 2 &&
          m.state() == v1::MEMBER_STATE_JOINED) {
        return true;
      }
    }
    return false;
  }));
  // Rank 2 is lost too: epoch 2 ends while the replacement waits.
  workers[0].Signal(SIGKILL);
  // The survivors rejoin, a replacement takes rank 2: the job is whole.
  std::vector<absl::StatusOr<v1::SessionDescriptor>> rejoined(
      2, absl::UnknownError("not run"));
  std::vector<std::thread> rejoins;
  for (uint32_t r = 0; r < 2; ++r) {
    rejoins.emplace_back(
        [&, r] { rejoined[r] = survivors[r]->Rejoin(1, absl::Seconds(60)); });
  }
  ASSERT_TRUE(AwaitMembers(cluster, 0, [](const v1::MemberList& list) {
    for (const auto& m : list.members()) {
      if (m.rank() == 2 && m.state() == v1::MEMBER_STATE_LOST) return true;
    }
    return false;
  }));
  std::unique_ptr<Client> second = ConnectRank(cluster, 2, true);
  ASSERT_NE(second, nullptr);
  auto second_joined = second->Join(JoinAs(2, absl::Seconds(60)));
  for (auto& t : rejoins) t.join();
  waiting.join();
  ASSERT_TRUE(second_joined.ok()) << second_joined.status();
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(replaced->epoch(), 3u);
  EXPECT_EQ(second_joined->epoch(), 3u);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(rejoined[r].ok())
        << "rank " << r << ": " << rejoined[r].status();
    EXPECT_EQ(rejoined[r]->epoch(), 3u);
  }
  // A round across the whole world of epoch 3.
  std::vector<Client*> all = {survivors[0].get(), survivors[1].get(),
                              second.get(), replacement.get()};
  std::vector<absl::StatusOr<std::vector<uint32_t>>> results(
      kWorld, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      results[r] = all[r]->AllGatherWords({r}, absl::Seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    EXPECT_EQ(*results[r], (std::vector<uint32_t>{0, 1, 2, 3}));
  }
  for (auto& worker : workers) ASSERT_TRUE(worker.Wait(kPatience).has_value());
}

// Recovery by domain (docs/contract.md, "Data-parallel domains"): tp 2 on
// two nodes of two ranks is dp 2, domain 0 = ranks 0-1 (node 0), domain 1 =
// ranks 2-3 (node 1). Rank 3's loss fails rank 2's health only; ranks 0-1
// keep their health and their round numbering, and learn from each round
// which domains it spans; once rank 2 rejoined and a replacement took rank
// 3, rounds span both domains again.
TEST(ClientRejoinDomainTest, TheOtherReplicaKeepsItsHealthAndItsRounds) {
  ClusterOptions options = Options(/*recovery=*/true);
  options.tensor_parallel = 2;
  options.extra_flags[0] = "--recovery=domain";
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  World world;
  ASSERT_NO_FATAL_FAILURE(
      StartWorld(cluster, /*shared_memory_rounds=*/true, &world));
  std::vector<std::unique_ptr<Client>>& survivors = world.survivors;
  for (auto& s : survivors) {
    // The round slots carry no view: rounds go over gRPC.
    EXPECT_THAT(s->round_path(), HasSubstr("recovery by domain"));
    EXPECT_TRUE(s->descriptor().recovers_in_place());
    EXPECT_TRUE(s->descriptor().recovery_by_domain());
  }

  // A round is pending on every survivor when rank 3's process dies: it
  // fails on all of them, domain 0's included.
  std::vector<absl::Status> pending(3);
  std::vector<std::thread> rounds;
  for (uint32_t r = 0; r < 3; ++r) {
    rounds.emplace_back([&, r] {
      pending[r] =
          survivors[r]->AllGatherWords({r}, absl::Seconds(30)).status();
    });
  }
  AwaitMembers(cluster, 0, MembersInRound({0, 1}));
  AwaitMembers(cluster, 1, MembersInRound({2}));
  world.victim.Signal(SIGKILL);
  for (auto& t : rounds) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(pending[r].code(), absl::StatusCode::kAborted)
        << "rank " << r << ": " << pending[r];
  }
  ASSERT_TRUE(Eventually([&] { return !survivors[2]->JobHealth().ok(); }));
  EXPECT_THAT(survivors[2]->JobHealth().message(),
              HasSubstr(" (DOMAIN_RECOVERING, rank 3, "));
  EXPECT_THAT(survivors[2]->JobHealth().message(), HasSubstr("domain 1"));
  EXPECT_THAT(survivors[2]->JobHealth().message(), Not(HasSubstr(" failed (")));
  EXPECT_TRUE(Client::EndsAnEpoch(survivors[2]->JobHealth()));

  // Domain 0 serves on: rounds 2 and 3 span it alone, and say so.
  auto round_on = [](const std::vector<Client*>& ranks) {
    std::vector<absl::StatusOr<Client::WorldWords>> out(
        ranks.size(), absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ranks.size(); ++i) {
      threads.emplace_back([&, i] {
        const uint32_t r = static_cast<uint32_t>(ranks[i]->descriptor().rank());
        out[i] =
            ranks[i]->AllGatherWordsWithView({r, 100 + r}, absl::Seconds(20));
      });
    }
    for (auto& t : threads) t.join();
    return out;
  };
  for (int round = 2; round <= 3; ++round) {
    for (const auto& result :
         round_on({survivors[0].get(), survivors[1].get()})) {
      ASSERT_TRUE(result.ok()) << "round " << round << ": " << result.status();
      EXPECT_TRUE(result->partial);
      EXPECT_EQ(result->domains, (std::vector<Client::DomainEpoch>{{0, 1}}));
      EXPECT_EQ(result->words, (std::vector<uint32_t>{0, 100, 1, 101}));
    }
  }
  // The call that promises the whole world refuses a partial one, naming
  // what it spanned; the round still counts.
  std::vector<absl::Status> whole(2);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      whole[r] = survivors[r]->AllGatherWords({r}, absl::Seconds(20)).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : whole) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("spanned data-parallel domain 0 "
                                       "(epoch 1) only"));
  }
  EXPECT_TRUE(survivors[0]->JobHealth().ok()) << survivors[0]->JobHealth();
  EXPECT_TRUE(survivors[1]->JobHealth().ok()) << survivors[1]->JobHealth();

  // Rank 2 rejoins its domain's epoch 2 once a replacement took rank 3.
  absl::StatusOr<v1::SessionDescriptor> rejoined =
      absl::UnknownError("not run");
  std::thread rejoin([&] { rejoined = survivors[2]->Rejoin(1, kPatience); });
  std::unique_ptr<Client> replacement = ConnectRank(cluster, 3, true);
  ASSERT_NE(replacement, nullptr);
  auto joined = replacement->Join(JoinAs(3, kPatience));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->epoch(), 2u);
  rejoin.join();
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->epoch(), 2u);
  EXPECT_TRUE(survivors[2]->JobHealth().ok()) << survivors[2]->JobHealth();

  // Rounds 1-4 were decided without domain 1: the next round, 5 for
  // everyone, spans both domains again.
  for (const auto& result : round_on({survivors[0].get(), survivors[1].get(),
                                      survivors[2].get(), replacement.get()})) {
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_FALSE(result->partial);
    EXPECT_EQ(result->domains,
              (std::vector<Client::DomainEpoch>{{0, 1}, {1, 2}}));
    EXPECT_EQ(result->words,
              (std::vector<uint32_t>{0, 100, 1, 101, 2, 102, 3, 103}));
  }
  ASSERT_TRUE(world.victim.Wait(kPatience).has_value());
}

// A replacement that joins (without waiting) while its domain still misses
// a rank takes no round number until the domain is whole; its DOMAIN_READY
// event gives it the domain's entry round.
TEST(ClientRejoinDomainTest, AReplacementJoiningEarlyLearnsItsFirstRound) {
  ClusterOptions options = Options(/*recovery=*/true);
  options.tensor_parallel = 2;
  options.extra_flags[0] = "--recovery=domain";
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  World world;
  ASSERT_NO_FATAL_FAILURE(
      StartWorld(cluster, /*shared_memory_rounds=*/false, &world));
  std::vector<std::unique_ptr<Client>>& survivors = world.survivors;
  // Both ranks of domain 1 go: rank 3's process, and rank 2's client.
  world.victim.Signal(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return !survivors[2]->JobHealth().ok(); }));
  survivors[2].reset();
  ASSERT_TRUE(cluster
                  .AwaitJob(
                      0,
                      [](const v1::JobStatus& j) {
                        return j.domains_size() == 2 &&
                               j.domains(1).lost_ranks_size() == 2;
                      },
                      kPatience)
                  .ok());
  // Rank 2's replacement joins without waiting: its domain is not whole.
  std::unique_ptr<Client> early = ConnectRank(cluster, 2, false);
  ASSERT_NE(early, nullptr);
  auto joined = early->Join(JoinAs(2, absl::ZeroDuration()));
  ASSERT_TRUE(joined.ok()) << joined.status();
  absl::Status refused = early->AllGatherWords({2}, absl::Seconds(5)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("domain 1 is recovering"));
  // Meanwhile domain 0 serves: one round, spanning it alone.
  std::vector<absl::StatusOr<Client::WorldWords>> served(
      2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      served[r] = survivors[r]->AllGatherWordsWithView({r}, absl::Seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& w : served) {
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(w->partial);
  }
  // Rank 3's replacement makes the domain whole (entry round 2).
  std::unique_ptr<Client> last = ConnectRank(cluster, 3, false);
  ASSERT_NE(last, nullptr);
  ASSERT_TRUE(last->Join(JoinAs(3, kPatience)).ok());
  std::vector<Client*> all = {survivors[0].get(), survivors[1].get(),
                              early.get(), last.get()};
  std::vector<absl::StatusOr<std::vector<uint32_t>>> results(
      kWorld, absl::UnknownError("not run"));
  threads.clear();
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      // The early replacement may see its DOMAIN_READY a moment later.
      for (int tries = 0; tries < 200; ++tries) {
        results[r] = all[r]->AllGatherWords({r}, absl::Seconds(20));
        if (results[r].status().code() != absl::StatusCode::kUnavailable) {
          break;
        }
        absl::SleepFor(absl::Milliseconds(10));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    EXPECT_EQ(*results[r], (std::vector<uint32_t>{0, 1, 2, 3}));
  }
  ASSERT_TRUE(world.victim.Wait(kPatience).has_value());
}

INSTANTIATE_TEST_SUITE_P(RoundPath, ClientRejoinTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SharedMemory" : "Grpc";
                         });

TEST(ClientRejoinLimitsTest, RejoinBeforeAnyLossTimesOutNamingTheEpoch) {
  LocalCluster cluster(Options(/*recovery=*/true));
  ASSERT_TRUE(cluster.Start().ok());
  World world;
  ASSERT_NO_FATAL_FAILURE(StartWorld(cluster, true, &world));
  auto rejoined = world.survivors[0]->Rejoin(1, absl::Milliseconds(500));
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kDeadlineExceeded)
      << rejoined.status();
  EXPECT_THAT(rejoined.status().message(), HasSubstr("epoch 2"));
  EXPECT_EQ(world.survivors[0]->epoch(), 1u);
  EXPECT_TRUE(world.survivors[0]->JobHealth().ok());
  world.victim.Signal(SIGKILL);
  ASSERT_TRUE(world.victim.Wait(kPatience).has_value());
}

TEST(ClientRejoinLimitsTest, RejoinWithoutAReplacementNamesTheMissingRank) {
  LocalCluster cluster(Options(/*recovery=*/true));
  ASSERT_TRUE(cluster.Start().ok());
  World world;
  ASSERT_NO_FATAL_FAILURE(StartWorld(cluster, true, &world));
  std::vector<std::unique_ptr<Client>>& survivors = world.survivors;
  world.victim.Signal(SIGKILL);
  ASSERT_TRUE(world.victim.Wait(kPatience).has_value());
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(Eventually([&] { return !survivors[r]->JobHealth().ok(); }));
  }
  // Every survivor rejoins but nobody takes rank 3's slot: each times out
  // naming the epoch and, from the daemon, the rank still missing.
  std::vector<absl::StatusOr<v1::SessionDescriptor>> rejoined(
      3, absl::UnknownError("not run"));
  std::vector<std::thread> rejoins;
  for (uint32_t r = 0; r < 3; ++r) {
    rejoins.emplace_back([&, r] {
      rejoined[r] = survivors[r]->Rejoin(1, absl::Milliseconds(1500));
    });
  }
  for (auto& t : rejoins) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(rejoined[r].status().code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r << ": " << rejoined[r].status();
    EXPECT_THAT(rejoined[r].status().message(), HasSubstr("epoch 2"));
    EXPECT_THAT(rejoined[r].status().message(),
                HasSubstr("ranks have not joined: 3 (node 1: 3)"));
    EXPECT_EQ(survivors[r]->epoch(), 1u);
  }
  // A failed Rejoin may be retried: it succeeds once a replacement came.
  rejoins.clear();
  for (uint32_t r = 0; r < 3; ++r) {
    rejoins.emplace_back(
        [&, r] { rejoined[r] = survivors[r]->Rejoin(1, kPatience); });
  }
  std::unique_ptr<Client> replacement = ConnectRank(cluster, 3, true);
  ASSERT_NE(replacement, nullptr);
  auto joined = replacement->Join(JoinAs(3, kPatience));
  for (auto& t : rejoins) t.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(rejoined[r].ok())
        << "rank " << r << ": " << rejoined[r].status();
    EXPECT_EQ(survivors[r]->epoch(), 2u);
  }
}

TEST(ClientRejoinLimitsTest, RejoinWithRecoveryOffReturnsTheJobsFailure) {
  LocalCluster cluster(Options(/*recovery=*/false));
  ASSERT_TRUE(cluster.Start().ok());
  World world;
  ASSERT_NO_FATAL_FAILURE(StartWorld(cluster, true, &world));
  world.victim.Signal(SIGKILL);
  ASSERT_TRUE(world.victim.Wait(kPatience).has_value());
  const absl::Time start = absl::Now();
  auto rejoined = world.survivors[0]->Rejoin(1, absl::Seconds(60));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kAborted)
      << rejoined.status();
  EXPECT_THAT(rejoined.status().message(), HasSubstr("rank 3"));
  // Without recovery a loss fails the job, and the words say so.
  EXPECT_FALSE(world.survivors[0]->descriptor().recovers_in_place());
  EXPECT_THAT(world.survivors[0]->JobHealth().message(),
              HasSubstr(" failed (MEMBER_LOST, node 1, rank 3, "));
  EXPECT_FALSE(Client::EndsAnEpoch(world.survivors[0]->JobHealth()));
  EXPECT_FALSE(Client::EndsAnEpoch(absl::OkStatus()));
}

}  // namespace
}  // namespace rankd::testing
