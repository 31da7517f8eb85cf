// A node daemon fenced by its coordinator ends with a documented status
// (issue 38, S5): with --recovery=on, a node whose daemon stops answering
// heartbeats (here: paused with SIGSTOP, as a partition would) is declared
// lost and the job recovers without it; when the old daemon runs again its
// heartbeats are refused for good, and instead of running on as a daemon of
// nothing, saying "coordinator lost", it fails its ranks and exits with
// kExitDaemonFenced (common/exit_codes.h), so that its orchestrator starts a
// new daemon that can register the node again; it learns it from a
// refused heartbeat or, first, from the job's event stream. Real daemons
// and ranks.
#include <signal.h>
#include <sys/wait.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.pb.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(20);

// The job as node `node` sees it once `done` holds (the harness polls).
v1::JobStatus AwaitJob(LocalCluster& cluster, uint32_t node,
                       const std::function<bool(const v1::JobStatus&)>& done) {
  absl::StatusOr<v1::JobStatus> job = cluster.AwaitJob(node, done, kPatience);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::JobStatus();
}

ClusterOptions Options(bool recovery) {
  ClusterOptions options;
  options.nnodes = 2;
  options.nproc_per_node = 1;
  if (recovery) {
    options.extra_flags = {"--recovery=on", "--recovery_deadline_ms=60000"};
  }
  return options;
}

// Pauses node 1's daemon past the heartbeat timeout, until the coordinator
// has declared it lost (the job at `state`), then lets it run again.
void PartitionNode1(LocalCluster& cluster, v1::JobState state) {
  cluster.daemon(1).Signal(SIGSTOP);
  AwaitJob(cluster, 0,
           [state](const v1::JobStatus& j) { return j.state() == state; });
  cluster.daemon(1).Signal(SIGCONT);
}

TEST(FencedDaemonTest, APartitionedDaemonEndsWithItsStatusOnceRunAgain) {
  LocalCluster cluster(Options(/*recovery=*/true));
  ASSERT_TRUE(cluster.Start().ok());
  // The survivor stays joined through the recovery (it never rejoins):
  // leaving then would fail the job, racing the test's look at it.
  auto workers =
      cluster.StartAllWorkers({"--hold_ms=60000", "--hold_through_failure"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  AwaitJob(cluster, 0, [](const v1::JobStatus& j) {
    return j.state() == v1::JOB_STATE_READY;
  });

  PartitionNode1(cluster, v1::JOB_STATE_RECOVERING);
  std::optional<int> status = cluster.daemon(1).Wait(kPatience);
  ASSERT_TRUE(status.has_value()) << "the fenced daemon kept running:\n"
                                  << cluster.daemon(1).ReadLog();
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), kExitDaemonFenced);
  const std::string log = cluster.daemon(1).ReadLog();
  EXPECT_TRUE(absl::StrContains(log, "fenced by the coordinator")) << log;
  EXPECT_TRUE(absl::StrContains(log, "node 1 was declared lost")) << log;
  // The job itself goes on recovering at epoch 2, waiting for a new daemon.
  v1::JobStatus job = AwaitJob(cluster, 0, [](const v1::JobStatus& j) {
    return j.state() == v1::JOB_STATE_RECOVERING;
  });
  EXPECT_EQ(job.epoch(), 2u);
  for (auto& w : *workers) w.Stop(absl::Seconds(2));
}

// The event stream fences too: node 1 heartbeats only every 5 s, so the
// coordinator (1 s timeout) declares it lost about a second after it
// registered, long before its next heartbeat could be refused; the job's
// NODE_LOST event for its own node tells it, and it ends at once.
TEST(FencedDaemonTest, ItsOwnNodeLostEventEndsTheDaemonBeforeAHeartbeat) {
  ClusterOptions options = Options(/*recovery=*/true);
  options.node_flags = {
      {}, {"--heartbeat_interval_ms=5000", "--heartbeat_timeout_ms=20000"}};
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  const absl::Time started = absl::Now();
  std::optional<int> status = cluster.daemon(1).Wait(absl::Milliseconds(4500));
  ASSERT_TRUE(status.has_value())
      << "node 1's daemon kept running for 4.5 s (till its next heartbeat):\n"
      << cluster.daemon(1).ReadLog();
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), kExitDaemonFenced);
  EXPECT_LT(absl::Now() - started, absl::Seconds(4.5));
  const std::string log = cluster.daemon(1).ReadLog();
  EXPECT_TRUE(absl::StrContains(log, "node 1 was declared lost (node 1 "))
      << log;
}

// Without recovery the job failed for good: the daemon stays to answer
// queries about it, as before.
TEST(FencedDaemonTest, WithoutRecoveryThePartitionedDaemonStays) {
  LocalCluster cluster(Options(/*recovery=*/false));
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers({"--hold_ms=60000"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  AwaitJob(cluster, 0, [](const v1::JobStatus& j) {
    return j.state() == v1::JOB_STATE_READY;
  });

  PartitionNode1(cluster, v1::JOB_STATE_FAILED);
  AwaitJob(cluster, 1, [](const v1::JobStatus& j) {
    return j.state() == v1::JOB_STATE_FAILED;
  });
  EXPECT_FALSE(cluster.daemon(1).Wait(absl::Seconds(2)).has_value())
      << "ended: " << cluster.daemon(1).ReadLog();
  for (auto& w : *workers) w.Stop(absl::Seconds(2));
}

}  // namespace
}  // namespace rankd::testing
