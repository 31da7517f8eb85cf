// The serving example (examples/serving) as the Kubernetes manifests run
// it: a long-running server (--steps=0) on real rankd daemons, one process
// per rank, stopped by SIGTERM the way the kubelet stops a container. Every
// rank must finish its step, stop at the same batch agreement, print DONE
// and exit 0, with rank 0's summary and a passed self-check, and leave the
// job cleanly (COMPLETED). SIGTERM to one rank (one pod deleted) stops every
// rank the same way. The Gloo address defaults to $POD_IP. Stops only the
// processes it started, by pid. The same by replica (rankd
// --recovery=domain, dp 2): SIGTERM to one rank stops both replicas.
#include <signal.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.pb.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

struct Rank {
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

// Two daemons x two ranks, tensor parallel 2 inside a node, pipeline
// parallel 2 across the nodes.
ClusterOptions TwoNodes(const std::string& job_id) {
  ClusterOptions options;
  options.job_id = job_id;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  options.tensor_parallel = 2;
  options.pipeline_parallel = 2;
  return options;
}

// One serving process per rank, node-major (logs dir()/rank<R>.log), each
// serving until stopped; `per_rank(node)` adds its flags and environment.
std::vector<ChildProcess> StartServing(LocalCluster& cluster,
                                       Rank (*per_rank)(uint32_t node)) {
  std::vector<ChildProcess> ranks;
  const ClusterOptions& o = cluster.options();
  for (uint32_t n = 0; n < o.nnodes; ++n) {
    for (uint32_t l = 0; l < o.nproc_per_node; ++l) {
      const Rank extra = per_rank(n);
      std::vector<std::string> argv = {
          Runfile("examples/serving"),
          absl::StrCat("--target=", cluster.socket_target(n)),
          absl::StrCat("--job_id=", o.job_id),
          absl::StrCat("--local_rank=", l),
          absl::StrCat("--world_size=", cluster.world_size()),
          "--steps=0",
          // Paced, and every step shown: the test waits for step numbers.
          "--step_interval_ms=20",
          "--progress_ms=1",
      };
      argv.insert(argv.end(), extra.args.begin(), extra.args.end());
      const uint32_t rank = n * o.nproc_per_node + l;
      auto child = ChildProcess::Spawn(
          argv, cluster.RankEnv(n, rank, extra.env),
          absl::StrCat(cluster.dir(), "/rank", rank, ".log"));
      EXPECT_TRUE(child.ok()) << child.status();
      if (child.ok()) ranks.push_back(*std::move(child));
    }
  }
  return ranks;
}

Rank Loopback(uint32_t) { return {{"--hostname=127.0.0.1"}, {}}; }

// As the job runs with recovery on (a loss re-forms in place).
Rank Recovering(uint32_t) {
  return {{"--hostname=127.0.0.1", "--recover"}, {}};
}

// No --hostname: node n's ranks get POD_IP=127.0.0.<n+1> (every 127/8
// address is this machine's loopback).
Rank PodIp(uint32_t node) {
  return {{}, {{"POD_IP", absl::StrCat("127.0.0.", node + 1)}}};
}

// The step of every rank's "DRAINED rank=R step=S: ..." line (-1: none).
std::vector<int> DrainedSteps(std::vector<ChildProcess>& ranks) {
  std::vector<int> steps;
  for (ChildProcess& r : ranks) {
    const std::vector<std::string> lines =
        LinesWithPrefix(r.ReadLog(), "DRAINED rank=");
    int step = -1;
    if (lines.size() == 1) {
      const size_t at = lines[0].find(" step=");
      const size_t end = lines[0].find(':', at);
      if (at == std::string::npos || end == std::string::npos ||
          !absl::SimpleAtoi(lines[0].substr(at + 6, end - at - 6), &step)) {
        step = -1;
      }
    }
    steps.push_back(step);
  }
  return steps;
}

// The job's state as `node`'s daemon reports it, once it is COMPLETED or
// after a few seconds (the other daemons learn it from the coordinator).
v1::JobState JobState(LocalCluster& cluster, uint32_t node) {
  ClientOptions options = cluster.AdminOptions(node);
  auto admin = AdminClient::Connect(options);
  if (!admin.ok()) return v1::JOB_STATE_UNSPECIFIED;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    auto job = (*admin)->GetJob();
    state = job.ok() ? job->state() : v1::JOB_STATE_UNSPECIFIED;
    if (state == v1::JOB_STATE_COMPLETED) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return state;
}

// Every rank exited 0, printed DONE and stopped at the same agreement (one
// step in every "DRAINED" line); every daemon then sees the job COMPLETED
// (every rank left). Returns that step (-1 when they differ).
int ExpectEveryRankStoppedTogether(LocalCluster& cluster,
                                   std::vector<ChildProcess>& ranks) {
  const std::vector<int> statuses = WaitAll(ranks, absl::Seconds(30));
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << "\n" << Logs(ranks);
    EXPECT_TRUE(absl::StrContains(ranks[r].ReadLog(),
                                  absl::StrCat("DONE rank=", r, " ")))
        << ranks[r].ReadLog();
  }
  for (uint32_t n = 0; n < cluster.options().nnodes; ++n) {
    EXPECT_EQ(JobState(cluster, n), v1::JOB_STATE_COMPLETED) << "node " << n;
  }
  const std::vector<int> drained = DrainedSteps(ranks);
  const bool together =
      std::set<int>(drained.begin(), drained.end()).size() == 1;
  EXPECT_TRUE(together) << Logs(ranks);
  return together ? drained[0] : -1;
}

// As above, after serving at least `min_steps`; rank 0 printed the summary
// with the self-check passed.
void ExpectCleanStop(LocalCluster& cluster, std::vector<ChildProcess>& ranks,
                     int min_steps) {
  const int drained = ExpectEveryRankStoppedTogether(cluster, ranks);
  ASSERT_GE(drained, 0);
  const int served = drained - 1;
  EXPECT_GE(served, min_steps) << Logs(ranks);
  const std::string log = ranks[0].ReadLog();
  EXPECT_TRUE(absl::StrContains(log, "until stopped (SIGTERM)")) << log;
  EXPECT_TRUE(absl::StrContains(log, "== summary")) << log;
  EXPECT_TRUE(
      absl::StrContains(log, absl::StrCat("served        ", served, " steps")))
      << log;
  EXPECT_TRUE(absl::StrContains(
      log, absl::StrCat("self-check    PASSED: ", served, "/", served)))
      << log;
}

TEST(ServingExampleTest, ServesUntilSigtermThenEveryRankStopsCleanly) {
  LocalCluster cluster(TwoNodes("serve-sigterm"));
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks = StartServing(cluster, Loopback);
  ASSERT_EQ(ranks.size(), 4u);
  ASSERT_TRUE(WaitForLog(ranks[0], "PROGRESS step 5 ", absl::Seconds(60)))
      << Logs(ranks);
  // What the kubelet does to every pod of a group being deleted.
  for (ChildProcess& r : ranks) r.Signal(SIGTERM);
  ExpectCleanStop(cluster, ranks, 5);
  // The ranks that saw the signal at a step's start say so; the others were
  // already in that step's agreement, where the first one stops them all.
  int saw = 0;
  for (ChildProcess& r : ranks) {
    saw += absl::StrContains(r.ReadLog(), " SIGTERM: every rank stops");
  }
  EXPECT_GE(saw, 1) << Logs(ranks);
}

TEST(ServingExampleTest, SigtermToOneRankStopsEveryRankAndPodIpIsTheDefault) {
  LocalCluster cluster(TwoNodes("serve-one"));
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks = StartServing(cluster, PodIp);
  ASSERT_EQ(ranks.size(), 4u);
  ASSERT_TRUE(WaitForLog(ranks[0], "PROGRESS step 3 ", absl::Seconds(60)))
      << Logs(ranks);
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_TRUE(absl::StrContains(
        ranks[r].ReadLog(),
        absl::StrCat("backend=gloo hostname=127.0.0.", r / 2 + 1, "\n")))
        << ranks[r].ReadLog();
  }
  // One pod deleted: its rank asks, every rank (in every pod) stops.
  ranks[3].Signal(SIGTERM);
  ExpectCleanStop(cluster, ranks, 3);
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_TRUE(absl::StrContains(ranks[r].ReadLog(),
                                  ": rank 3 got a stop signal; served "))
        << ranks[r].ReadLog();
    EXPECT_EQ(absl::StrContains(ranks[r].ReadLog(), "SIGNAL rank="), r == 3)
        << ranks[r].ReadLog();
  }
}

// Serving by replica (rankd --recovery=domain, dp 2 = one replica of tp 2
// per node) until stopped: each replica serves its own steps in world
// rounds that span the replicas; SIGTERM to one rank stops every rank of
// both replicas at the same world round, with the summary of both.
TEST(ServingExampleTest, ByReplicaServesUntilSigtermThenEveryRankStops) {
  ClusterOptions options = TwoNodes("serve-by-replica");
  options.pipeline_parallel = 1;
  options.extra_flags = {"--recovery=domain", "--recovery_deadline_ms=60000"};
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks = StartServing(cluster, Recovering);
  ASSERT_EQ(ranks.size(), 4u);
  ASSERT_TRUE(WaitForLog(ranks[0], "PROGRESS step 3 ", absl::Seconds(60)))
      << Logs(ranks);
  EXPECT_TRUE(absl::StrContains(ranks[0].ReadLog(), "recovery by replica"))
      << ranks[0].ReadLog();
  ranks[2].Signal(SIGTERM);
  EXPECT_GT(ExpectEveryRankStoppedTogether(cluster, ranks), 3);
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_TRUE(absl::StrContains(ranks[r].ReadLog(),
                                  ": rank 2 got a stop signal; replica "))
        << ranks[r].ReadLog();
  }
  const std::string log = ranks[0].ReadLog();
  EXPECT_TRUE(absl::StrContains(log, "served        2 replicas until stopped"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "self-check    PASSED: ")) << log;
  EXPECT_TRUE(absl::StrContains(log, "  replica 1     ranks 2-3, epoch 1: "))
      << log;
}

}  // namespace
}  // namespace rankd::testing
