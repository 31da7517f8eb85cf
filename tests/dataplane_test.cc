// Integration tests of the Gloo data plane: real rankd daemons (one process
// per node), several real rank processes per daemon (tests/dataplane_worker)
// joined through the client library, a GlooSession each over Gloo's TCP
// transport with its rendezvous on the daemons' key-value broker. The
// workers check every result exactly and report one line per check.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {
// One dataplane_worker per rank, node-major, like LocalCluster's workers.
std::vector<ChildProcess> StartDataplaneWorkers(
    LocalCluster& cluster, const std::vector<std::string>& args) {
  std::vector<ChildProcess> workers;
  const ClusterOptions& o = cluster.options();
  for (uint32_t n = 0; n < o.nnodes; ++n) {
    for (uint32_t l = 0; l < o.nproc_per_node; ++l) {
      std::vector<std::string> argv = {
          Runfile("tests/dataplane_worker"),
          absl::StrCat("--target=", cluster.socket_target(n)),
          absl::StrCat("--job_id=", o.job_id),
          absl::StrCat("--local_rank=", l),
          absl::StrCat("--world_size=", cluster.world_size()),
      };
      argv.insert(argv.end(), args.begin(), args.end());
      const uint32_t rank = n * o.nproc_per_node + l;
      auto child = ChildProcess::Spawn(
          argv, cluster.RankEnv(n, rank),
          absl::StrCat(cluster.dir(), "/rank", rank, ".log"));
      EXPECT_TRUE(child.ok()) << child.status();
      if (child.ok()) workers.push_back(*std::move(child));
    }
  }
  return workers;
}

size_t Count(const std::string& text, const std::string& prefix) {
  return LinesWithPrefix(text, prefix).size();
}

TEST(DataplaneTest, EveryOperationExactValuesThreeDaemonsTwoRanksEach) {
  ClusterOptions options;
  options.job_id = "dp-ops";
  options.nnodes = 3;
  options.nproc_per_node = 2;
  options.tensor_parallel = 2;
  options.pipeline_parallel = 3;  // pipeline groups of three stages
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = StartDataplaneWorkers(cluster, {"--scenario=ops"});
  ASSERT_EQ(workers.size(), 6u);
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(120));
  for (size_t r = 0; r < statuses.size(); ++r) {
    ASSERT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << "\n"
                                        << Logs(workers);
  }
  for (size_t r = 0; r < workers.size(); ++r) {
    const std::string log = workers[r].ReadLog();
    EXPECT_EQ(Count(log, "MISMATCH"), 0u) << log;
    for (const char* check : {"CHECK all_reduce_sum f32",
                              "CHECK all_reduce_sum f64",
                              "CHECK all_reduce_sum i32",
                              "CHECK all_reduce_sum i64",
                              "CHECK all_reduce_sum u32",
                              "CHECK all_reduce_sum u8",
                              "CHECK all_reduce_sum f16",
                              "CHECK all_reduce_sum bf16",
                              "CHECK all_gather world",
                              "CHECK all_to_all_v asymmetric",
                              "CHECK all_to_all_v all zero",
                              "CHECK all_gather_words",
                              "CHECK all_gather_words bounded",
                              "CHECK submit_local_dependencies",
                              "CHECK all_gather_uneven",
                              "CHECK all_gather_even axis 1",
                              "CHECK variable_all_to_all",
                              "CHECK broadcast root",
                              "CHECK barrier",
                              "CHECK agree_success one false vote",
                              "CHECK agree_success unanimous",
                              "DONE"}) {
      EXPECT_TRUE(absl::StrContains(log, check)) << check << "\n" << log;
    }
    // Five groups per rank (world, tensor, pipeline, expert, data).
    EXPECT_EQ(Count(log, "CHECK all_reduce_sum group"), 5u) << log;
    // Pipeline stage r / 2 of three: stages 0 and 1 send, 1 and 2 receive.
    const size_t stage = r / 2;
    EXPECT_EQ(Count(log, "CHECK send to next stage"), stage < 2 ? 1u : 0u);
    EXPECT_EQ(Count(log, "CHECK receive from previous stage"),
              stage > 0 ? 1u : 0u);
    EXPECT_EQ(Count(log, "CHECK bundle sent"), stage < 2 ? 1u : 0u);
    EXPECT_EQ(Count(log, "CHECK bundle tensor"), stage > 0 ? 2u : 0u);
  }
}

TEST(DataplaneTest, OverlappingSubgroupsTp2Pp2Ep2TwoDaemonsFourRanksEach) {
  ClusterOptions options;
  options.job_id = "dp-groups";
  options.nnodes = 2;
  options.nproc_per_node = 4;
  options.tensor_parallel = 2;
  options.pipeline_parallel = 2;
  options.expert_parallel = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = StartDataplaneWorkers(cluster, {"--scenario=subgroups"});
  ASSERT_EQ(workers.size(), 8u);
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(120));
  for (size_t r = 0; r < statuses.size(); ++r) {
    ASSERT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << "\n"
                                        << Logs(workers);
  }
  for (auto& w : workers) {
    const std::string log = w.ReadLog();
    // 5 groups x 2 rounds, sum and gather each; rings on the 4 groups of
    // more than one member (world, tensor, pipeline, expert).
    EXPECT_EQ(Count(log, "CHECK sum "), 10u) << log;
    EXPECT_EQ(Count(log, "CHECK gather "), 10u) << log;
    EXPECT_EQ(Count(log, "CHECK ring "), 8u) << log;
    EXPECT_TRUE(absl::StrContains(log, "DONE")) << log;
  }
}

TEST(DataplaneTest, KilledRankFailsPendingCollectivesNamingItAndPoisons) {
  ClusterOptions options;
  options.job_id = "dp-fault";
  options.nnodes = 3;
  options.nproc_per_node = 2;
  options.heartbeat_timeout_ms = 1000;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  const uint32_t victim = 3;  // node 1, local rank 1
  auto workers = StartDataplaneWorkers(
      cluster, {"--scenario=fault", absl::StrCat("--victim=", victim),
                "--stall_iteration=3", "--op_timeout_ms=60000"});
  ASSERT_EQ(workers.size(), 6u);
  ASSERT_TRUE(
      WaitForLog(workers[victim], "STALLING iteration=3", absl::Seconds(60)))
      << Logs(workers);
  for (uint32_t r = 0; r < workers.size(); ++r) {
    if (r == victim) continue;
    ASSERT_TRUE(
        WaitForLog(workers[r], "SUBMITTED iteration=3", absl::Seconds(30)))
        << Logs(workers);
  }
  absl::SleepFor(absl::Milliseconds(300));  // the others wait in Gloo now
  workers[victim].Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(30));
  // Far below the 60 s Gloo timeout: the failure is pushed, not timed out.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10)) << Logs(workers);
  for (uint32_t r = 0; r < workers.size(); ++r) {
    if (r == victim) continue;
    ASSERT_EQ(ExitCode(statuses[r]), 5) << "rank " << r << "\n"
                                        << Logs(workers);
    const std::string log = workers[r].ReadLog();
    auto failed = LinesWithPrefix(log, "OP_FAILED ");
    ASSERT_EQ(failed.size(), 1u) << log;
    EXPECT_TRUE(absl::StrContains(failed[0], "code=ABORTED")) << failed[0];
    EXPECT_TRUE(absl::StrContains(failed[0], "rank 3 ")) << failed[0];
    EXPECT_TRUE(absl::StrContains(failed[0], "lost")) << failed[0];
    auto poisoned = LinesWithPrefix(log, "POISONED ");
    ASSERT_EQ(poisoned.size(), 1u) << log;
    if (r == 0) {
      std::printf("rank 0: OP_FAILED %s\nrank 0: POISONED %s\n",
                  failed[0].c_str(), poisoned[0].c_str());
    }
    EXPECT_TRUE(absl::StrContains(poisoned[0], "code=ABORTED")) << poisoned[0];
    EXPECT_TRUE(absl::StrContains(poisoned[0], "rank 3 ")) << poisoned[0];
    EXPECT_TRUE(absl::StrContains(poisoned[0], "poisoned")) << poisoned[0];
    // Refused at once, without native work.
    const size_t at = poisoned[0].find("elapsed_ms=");
    ASSERT_NE(at, std::string::npos);
    int64_t elapsed = -1;
    ASSERT_TRUE(absl::SimpleAtoi(
        poisoned[0].substr(at + 11, poisoned[0].find(' ', at) - at - 11),
        &elapsed));
    EXPECT_LT(elapsed, 100) << poisoned[0];
  }
}

TEST(DataplaneTest, DisagreeingRankIsNamedByEveryRankThroughTheDaemons) {
  ClusterOptions options;
  options.job_id = "dp-mismatch";
  options.nnodes = 2;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  // Rank 3 (node 1) submits f32[3] where the others submit f32[64]: the
  // operations never pair, time out after 2 s, and each rank learns from
  // the others' reports (in the daemons' key-value broker) who did what.
  auto workers = StartDataplaneWorkers(
      cluster, {"--scenario=mismatch", "--victim=3", "--stall_iteration=2",
                "--op_timeout_ms=2000"});
  ASSERT_EQ(workers.size(), 4u);
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(60));
  for (uint32_t r = 0; r < workers.size(); ++r) {
    ASSERT_EQ(ExitCode(statuses[r]), 5) << "rank " << r << "\n"
                                        << Logs(workers);
    const std::string log = workers[r].ReadLog();
    auto failed = LinesWithPrefix(log, "OP_FAILED ");
    ASSERT_EQ(failed.size(), 1u) << log;
    if (r == 0) std::printf("rank 0: OP_FAILED %s\n", failed[0].c_str());
    EXPECT_TRUE(absl::StrContains(failed[0], "code=FAILED_PRECONDITION"))
        << failed[0];
    EXPECT_TRUE(absl::StrContains(failed[0],
                                  "members disagree on operation #2 on world"))
        << failed[0];
    EXPECT_TRUE(absl::StrContains(
        failed[0], "ranks 0-2 submitted `all_reduce_sum f32[64]`"))
        << failed[0];
    EXPECT_TRUE(absl::StrContains(failed[0],
                                  "rank 3 submitted `all_reduce_sum f32[3]`"))
        << failed[0];
  }
}

}  // namespace
}  // namespace rankd::testing
