// Lifecycle tests with real daemons and rank processes: graceful shutdown,
// restarts and incarnation fencing, the coordinator's loss, ranks that
// never join, daemons that cannot register or disagree about the job.
#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

// argv of a daemon for `node` of `cluster`, as LocalCluster starts it.
std::vector<std::string> DaemonArgs(LocalCluster& cluster, uint32_t node,
                                    const std::string& listen,
                                    const std::string& socket,
                                    const std::string& coordinator) {
  const ClusterOptions& o = cluster.options();
  std::vector<std::string> argv = {
      Runfile("daemon/rankd"),
      absl::StrCat("--job_id=", o.job_id),
      absl::StrCat("--nnodes=", o.nnodes),
      absl::StrCat("--node_index=", node),
      absl::StrCat("--nproc_per_node=", o.nproc_per_node),
      absl::StrCat("--listen=", listen),
      absl::StrCat("--socket=", socket),
      absl::StrCat("--heartbeat_interval_ms=", o.heartbeat_interval_ms),
      absl::StrCat("--heartbeat_timeout_ms=", o.heartbeat_timeout_ms),
      absl::StrCat("--credentials_dir=", cluster.credentials_dir()),
  };
  if (node != 0) argv.push_back(absl::StrCat("--coordinator=", coordinator));
  return argv;
}

v1::JobStatus JobOf(LocalCluster& cluster, uint32_t node) {
  ClientOptions options = cluster.AdminOptions(node);
  auto admin = AdminClient::Connect(options);
  EXPECT_TRUE(admin.ok()) << admin.status();
  if (!admin.ok()) return {};
  auto job = (*admin)->GetJob();
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::JobStatus();
}

TEST(LifecycleTest, SigtermAfterRanksLeftIsCleanEverywhere) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers({"--rounds=5"});
  ASSERT_TRUE(workers.ok());
  for (int s : WaitAll(*workers, absl::Seconds(30))) EXPECT_EQ(ExitCode(s), 0);
  EXPECT_EQ(JobOf(cluster, 0).state(), v1::JOB_STATE_COMPLETED);
  // Workers first, then the coordinator last: every daemon exits 0.
  EXPECT_EQ(ExitCode(cluster.daemon(1).Stop(absl::Seconds(10))), 0);
  EXPECT_EQ(JobOf(cluster, 0).state(), v1::JOB_STATE_COMPLETED);
  EXPECT_EQ(ExitCode(cluster.daemon(0).Stop(absl::Seconds(10))), 0);
  EXPECT_TRUE(absl::StrContains(cluster.daemon(1).ReadLog(), "stopped"));
}

TEST(LifecycleTest, SigtermWithJoinedRanksFailsTheJobNamingTheNode) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers({"--rounds=3", "--hold_ms=30000"});
  ASSERT_TRUE(workers.ok());
  for (auto& w : *workers)
    ASSERT_TRUE(WaitForLog(w, "ROUNDS_OK", absl::Seconds(20)));
  absl::Time sent = absl::Now();
  EXPECT_EQ(ExitCode(cluster.daemon(1).Stop(absl::Seconds(10))), 0);
  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(20));
  EXPECT_LT(absl::Now() - sent, absl::Seconds(10));
  for (uint32_t r = 0; r < 4; ++r) EXPECT_EQ(ExitCode(statuses[r]), 3);
  for (uint32_t r = 0; r < 2; ++r) {
    std::string error = LastErrorLine((*workers)[r]);
    EXPECT_TRUE(absl::StrContains(error, "code=ABORTED")) << error;
    EXPECT_TRUE(absl::StrContains(error, "node 1")) << error;
    EXPECT_TRUE(absl::StrContains(error, "shut down (SIGTERM)")) << error;
  }
  v1::JobStatus job = JobOf(cluster, 0);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(job.failure(), "ranks 2-3 are lost"))
      << job.failure();
}

TEST(LifecycleTest, KilledCoordinatorFailsRanksOnOtherNodes) {
  ClusterOptions options;
  options.nnodes = 3;
  options.nproc_per_node = 1;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers({"--rounds=2", "--hold_ms=30000"});
  ASSERT_TRUE(workers.ok());
  for (auto& w : *workers)
    ASSERT_TRUE(WaitForLog(w, "ROUNDS_OK", absl::Seconds(20)));
  cluster.daemon(0).Signal(SIGKILL);
  absl::Time killed = absl::Now();
  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(20));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  for (uint32_t r = 1; r < 3; ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 3);
    std::string error = LastErrorLine((*workers)[r]);
    EXPECT_TRUE(absl::StrContains(error, "code=ABORTED")) << error;
    EXPECT_TRUE(absl::StrContains(error, "coordinator lost")) << error;
    EXPECT_TRUE(absl::StrContains(error, cluster.tcp_address(0))) << error;
  }
  // The surviving daemons still answer, from their own view.
  for (uint32_t n = 1; n < 3; ++n) {
    v1::JobStatus job = JobOf(cluster, n);
    EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
    EXPECT_FALSE(job.served_by_coordinator());
  }
}

TEST(LifecycleTest, RestartedRankCannotRejoinTheFailedIncarnation) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 1;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers({"--rounds=2", "--hold_ms=30000"});
  ASSERT_TRUE(workers.ok());
  for (auto& w : *workers)
    ASSERT_TRUE(WaitForLog(w, "ROUNDS_OK", absl::Seconds(20)));
  (*workers)[1].Signal(SIGKILL);
  EXPECT_EQ(ExitCode((*workers)[0].Wait(absl::Seconds(10)).value_or(-1)), 3);
  // The same rank, restarted: a new process with a new incarnation.
  auto again = cluster.StartWorker(1, 0, {"--rounds=1", "--join_wait_ms=2000"});
  ASSERT_TRUE(again.ok());
  auto status = again->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ExitCode(*status), 3);
  std::string error = LastErrorLine(*again);
  EXPECT_TRUE(absl::StrContains(error, "code=ABORTED")) << error;
  EXPECT_TRUE(absl::StrContains(error, "rank 1 ")) << error;
}

TEST(LifecycleTest, RestartedDaemonIsRefusedAndExitsNonZero) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 1;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  cluster.daemon(1).Signal(SIGKILL);
  cluster.daemon(1).Wait(absl::Seconds(5));
  absl::SleepFor(absl::Milliseconds(300));
  std::string listen = absl::StrCat("127.0.0.1:", FreePort());
  auto restarted = ChildProcess::Spawn(
      DaemonArgs(cluster, 1, listen,
                 absl::StrCat(cluster.dir(), "/restart.sock"),
                 cluster.tcp_address(0)),
      {}, absl::StrCat(cluster.dir(), "/restart.log"));
  ASSERT_TRUE(restarted.ok());
  auto status = restarted->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value()) << restarted->ReadLog();
  EXPECT_EQ(ExitCode(*status), 1);
  EXPECT_TRUE(absl::StrContains(restarted->ReadLog(), "registration failed"))
      << restarted->ReadLog();
  v1::JobStatus job = JobOf(cluster, 0);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_TRUE(absl::StrContains(job.failure(), "node 1")) << job.failure();
}

TEST(LifecycleTest, RankThatNeverJoinsIsNamedWhenJoinTimesOut) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  // Ranks 0, 1, 2 join; rank 3 (node 1, local rank 1) never does.
  std::vector<ChildProcess> workers;
  for (auto [node, local] : {std::pair{0u, 0u}, {0u, 1u}, {1u, 0u}}) {
    auto w = cluster.StartWorker(node, local, {"--join_wait_ms=1500"});
    ASSERT_TRUE(w.ok());
    workers.push_back(*std::move(w));
  }
  for (int s : WaitAll(workers, absl::Seconds(20))) EXPECT_EQ(ExitCode(s), 3);
  for (auto& w : workers) {
    std::string error = LastErrorLine(w);
    EXPECT_TRUE(absl::StrContains(error, "code=DEADLINE_EXCEEDED")) << error;
    EXPECT_TRUE(
        absl::StrContains(error, "1 of 4 ranks have not joined: 3 (node 1: 3)"))
        << error;
  }
}

TEST(LifecycleTest, DaemonThatCannotReachTheCoordinatorGivesUp) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 1;
  LocalCluster cluster(options);
  std::string dir = cluster.dir();
  int dead_port = FreePort();
  std::vector<std::string> argv = {
      Runfile("daemon/rankd"),
      "--job_id=itest",
      "--nnodes=2",
      "--node_index=1",
      "--nproc_per_node=1",
      absl::StrCat("--listen=127.0.0.1:", FreePort()),
      absl::StrCat("--socket=", dir, "/lonely.sock"),
      absl::StrCat("--coordinator=127.0.0.1:", dead_port),
      absl::StrCat("--credentials_dir=", cluster.credentials_dir()),
      "--register_timeout_ms=1500"};
  auto daemon = ChildProcess::Spawn(argv, {}, absl::StrCat(dir, "/lonely.log"));
  ASSERT_TRUE(daemon.ok());
  auto status = daemon->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ExitCode(*status), 1);
  std::string log = daemon->ReadLog();
  EXPECT_TRUE(absl::StrContains(
      log, "could not register with the coordinator at 127.0.0.1:" +
               std::to_string(dead_port)))
      << log;
}

TEST(LifecycleTest, DaemonWithADifferentJobShapeIsRefusedNamingTheFlag) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 2;
  options.tensor_parallel = 2;
  LocalCluster cluster(options);  // not started: its folder and flags only
  // A coordinator for tensor parallel 2...
  std::string listen0 = absl::StrCat("127.0.0.1:", FreePort());
  std::vector<std::string> args0 = DaemonArgs(
      cluster, 0, listen0, absl::StrCat(cluster.dir(), "/c0.sock"), "");
  args0.push_back("--tensor_parallel=2");
  auto coordinator =
      ChildProcess::Spawn(args0, {}, absl::StrCat(cluster.dir(), "/c0.log"));
  ASSERT_TRUE(coordinator.ok());
  // ...and a worker daemon that believes in tensor parallel 4.
  std::vector<std::string> args1 =
      DaemonArgs(cluster, 1, absl::StrCat("127.0.0.1:", FreePort()),
                 absl::StrCat(cluster.dir(), "/c1.sock"), listen0);
  args1.push_back("--tensor_parallel=4");
  auto worker =
      ChildProcess::Spawn(args1, {}, absl::StrCat(cluster.dir(), "/c1.log"));
  ASSERT_TRUE(worker.ok());
  auto status = worker->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value()) << worker->ReadLog();
  EXPECT_EQ(ExitCode(*status), 1);
  EXPECT_TRUE(absl::StrContains(worker->ReadLog(),
                                "--tensor_parallel=4 (coordinator: 2)"))
      << worker->ReadLog();
  EXPECT_TRUE(coordinator->running());
  coordinator->Stop();
}

}  // namespace
}  // namespace rankd::testing
