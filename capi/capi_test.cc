// The C ABI against real daemons: c_rank (capi/testing/c_rank.c, C only,
// linked to librankd.so) on every rank of a job, joining from the
// environment a launcher sets. Layouts: one daemon with two ranks, and two
// daemons with one rank each. Also: a lost rank is named on the survivor,
// and (--recovery=on) the survivor rejoins after a replacement came.
#include <sys/wait.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"

namespace rankd::testing {
namespace {

// Starts c_rank `scenario` as local rank `l` of node `n`, its log named
// with `suffix`.
absl::StatusOr<ChildProcess> StartRank(LocalCluster& cluster, uint32_t n,
                                       uint32_t l, const std::string& scenario,
                                       const std::string& suffix = "") {
  const ClusterOptions& o = cluster.options();
  // With the rank's own token (RANKD_RANK_TOKEN), as rankrun hands it.
  const std::map<std::string, std::string> env =
      cluster.RankEnv(n, n * o.nproc_per_node + l,
                      {{"RANKD_TARGET", cluster.socket_target(n)},
                       {"RANKD_JOB_ID", o.job_id},
                       {"RANKD_LOCAL_RANK", absl::StrCat(l)}});
  return ChildProcess::Spawn(
      {Runfile("capi/c_rank"), scenario}, env,
      absl::StrCat(cluster.dir(), "/c_rank", n * o.nproc_per_node + l, suffix,
                   ".log"));
}

// Starts c_rank `scenario` on every rank of `cluster`.
std::vector<ChildProcess> StartRanks(LocalCluster& cluster,
                                     const std::string& scenario) {
  std::vector<ChildProcess> ranks;
  const ClusterOptions& o = cluster.options();
  for (uint32_t n = 0; n < o.nnodes; ++n) {
    for (uint32_t l = 0; l < o.nproc_per_node; ++l) {
      auto child = StartRank(cluster, n, l, scenario);
      EXPECT_TRUE(child.ok()) << child.status();
      if (child.ok()) ranks.push_back(*std::move(child));
    }
  }
  return ranks;
}

class CApiTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(CApiTest, EveryOperationGivesExactValuesAndBadArgumentsAreRefused) {
  ClusterOptions options;
  options.job_id = "capi";
  options.nnodes = GetParam().first;
  options.nproc_per_node = GetParam().second;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks = StartRanks(cluster, "ops");
  ASSERT_EQ(ranks.size(), 2u);
  const std::vector<int> statuses = WaitAll(ranks, absl::Seconds(90));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string log = ranks[r].ReadLog();
    EXPECT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << ":\n" << log;
    EXPECT_TRUE(absl::StrContains(log, absl::StrCat("C RANK ", r, " OK")))
        << log;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CApiTest,
                         ::testing::Values(std::make_pair(1, 2),
                                           std::make_pair(2, 1)),
                         [](const auto& info) {
                           return absl::StrCat(info.param.first, "x",
                                               info.param.second);
                         });

// Runs c_rank `scenario` on a 1 x 2 job; every rank must print `ok_line`
// followed by its rank. `logs`, when given, gets each rank's log.
void RunScenario(const std::string& job, const std::string& scenario,
                 const std::string& ok_line,
                 std::vector<std::string>* logs = nullptr) {
  ClusterOptions options;
  options.job_id = job;
  options.nnodes = 1;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks = StartRanks(cluster, scenario);
  ASSERT_EQ(ranks.size(), 2u);
  const std::vector<int> statuses = WaitAll(ranks, absl::Seconds(90));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string log = ranks[r].ReadLog();
    EXPECT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << ":\n" << log;
    EXPECT_TRUE(absl::StrContains(log, absl::StrCat(ok_line, " ", r, " OK")))
        << log;
    if (logs != nullptr) logs->push_back(log);
  }
}

// docs/contract.md, "Empty values": tensors of no rows through every
// operation, pairing like any other (a receive of no rows never completes
// without its send), and [2, 0] refused.
TEST(CApiEmptyValuesTest, TensorsOfNoRowsWorkEverywhereAndPairInOrder) {
  RunScenario("capi-empty", "empty", "C EMPTY");
}

// rankd_session_options.restrict_capabilities / restrict_groups.
TEST(CApiNarrowedTest, ANarrowedSessionRefusesNamingTheCapability) {
  RunScenario("capi-narrowed", "narrowed", "C NARROWED");
}

// rankd_session_reform refuses bad arguments before it ends the session.
TEST(CApiReformTest, BadArgumentsAreRefusedAndTheSessionStays) {
  RunScenario("capi-reform-args", "reform-args", "C REFORM ARGS");
}

// rankd_session_poison, rankd_session_abort and rankd_session_poison_status
// (issue 33) on Gloo sessions.
TEST(CApiPoisonTest, PoisonRefusesWithTheCauseAndAbortEndsPendingWork) {
  std::vector<std::string> logs;
  RunScenario("capi-poison", "poison", "C POISON", &logs);
  ASSERT_EQ(logs.size(), 2u);
  // Rank 0's receive that nobody sends ended with the abort's cause.
  EXPECT_TRUE(absl::StrContains(
      logs[0],
      "REFUSED the pending receive after abort: gloo receive from member 1 "))
      << logs[0];
  std::cout << "rank 0's log:\n" << logs[0];
}

TEST(CApiLostRankTest, TheSurvivorsWorkFailsNamingTheLostRank) {
  ClusterOptions options;
  options.job_id = "capi-lost";
  options.nnodes = 1;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks = StartRanks(cluster, "lost");
  ASSERT_EQ(ranks.size(), 2u);
  const std::vector<int> statuses = WaitAll(ranks, absl::Seconds(60));
  const std::string log0 = ranks[0].ReadLog();
  EXPECT_EQ(ExitCode(statuses[1]), 3) << ranks[1].ReadLog();
  EXPECT_EQ(ExitCode(statuses[0]), 0) << log0;
  // The receive from the dead rank fails, and everything names rank 1.
  EXPECT_TRUE(absl::StrContains(log0, "LOST ABORTED: ")) << log0;
  EXPECT_TRUE(absl::StrContains(log0, "HEALTH ABORTED: ")) << log0;
  EXPECT_TRUE(absl::StrContains(log0, "CALLBACK ABORTED")) << log0;
  std::cout << "the survivor's log:\n" << log0;
}

// rankd_rejoin (rankd --recovery=on): rank 1 dies, a replacement process
// takes its slot, rank 0 rejoins into epoch 2 and both run a round there.
TEST(CApiRejoinTest, TheSurvivorRejoinsTheNextEpoch) {
  ClusterOptions options;
  options.job_id = "capi-rejoin";
  options.nnodes = 1;
  options.nproc_per_node = 2;
  options.extra_flags = {"--recovery=on", "--recovery_deadline_ms=60000"};
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks = StartRanks(cluster, "rejoin");
  ASSERT_EQ(ranks.size(), 2u);
  const std::optional<int> died = ranks[1].Wait(absl::Seconds(60));
  ASSERT_TRUE(died.has_value());
  EXPECT_EQ(ExitCode(*died), 3) << ranks[1].ReadLog();
  // The replacement may join only once the daemon let the slot go.
  bool recovering = false;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!recovering && absl::Now() < give_up) {
    auto admin = AdminClient::Connect(cluster.AdminOptions(0));
    if (admin.ok()) {
      auto job = (*admin)->GetJob();
      recovering = job.ok() && job->state() == v1::JOB_STATE_RECOVERING;
    }
    if (!recovering) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(recovering) << "the job never moved to RECOVERING";
  auto replacement = StartRank(cluster, 0, 1, "rejoin", ".replacement");
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  std::vector<ChildProcess> epoch2;
  epoch2.push_back(std::move(ranks[0]));
  epoch2.push_back(*std::move(replacement));
  const std::vector<int> statuses = WaitAll(epoch2, absl::Seconds(90));
  for (size_t r = 0; r < epoch2.size(); ++r) {
    const std::string log = epoch2[r].ReadLog();
    EXPECT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << ":\n" << log;
    EXPECT_TRUE(absl::StrContains(log, absl::StrCat("C REJOIN ", r, " OK")))
        << log;
  }
}

}  // namespace
}  // namespace rankd::testing
