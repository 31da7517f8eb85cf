// Integration tests of the control plane: real rankd daemons (one process
// per node) and real rank processes (tests/rank_worker) over Unix sockets
// and loopback TCP. Every scenario with all_gather_words rounds runs twice:
// once on the default paths (ranks on their daemon's shared-memory round
// slots, daemons on the coordinator's round link) and once on gRPC (ranks
// on Rank calls, daemons on the Peer.Rounds stream), and checks that each
// rank and daemon took the path it was told to.
#include "tests/harness/cluster.h"

#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "common/topology.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "rankd/v1/common.pb.h"

namespace rankd::testing {
namespace {

// The parameter: whether rounds take the default paths (round slots and
// round link) or gRPC all the way.
class ClusterTest : public ::testing::TestWithParam<bool> {
 protected:
  // Cluster options with the coordinator's round link on or off.
  static ClusterOptions Options() {
    ClusterOptions options;
    if (!GetParam()) options.extra_flags.push_back("--round_link_port=off");
    return options;
  }
  // `args` plus the flag choosing the round path.
  static std::vector<std::string> With(std::vector<std::string> args) {
    args.push_back(
        absl::StrCat("--shared_memory_rounds=", GetParam() ? "true" : "false"));
    return args;
  }
  // Every worker reported the round path this run asked for.
  static void ExpectRoundPath(std::vector<ChildProcess>& workers,
                              LocalCluster& cluster) {
    for (uint32_t n = 1; n < cluster.options().nnodes; ++n) {
      const bool linked = absl::StrContains(
          cluster.daemon(n).ReadLog(),
          "open: this node's rounds and forwarded key-value calls go over it");
      EXPECT_EQ(linked, GetParam()) << "node " << n << "\n"
                                    << cluster.daemon(n).ReadLog();
    }
    for (size_t r = 0; r < workers.size(); ++r) {
      std::vector<std::string> path =
          LinesWithPrefix(workers[r].ReadLog(), "ROUND_PATH ");
      ASSERT_EQ(path.size(), 1u) << "rank " << r << "\n" << Logs(workers);
      if (GetParam()) {
        EXPECT_EQ(path[0], "shared-memory") << "rank " << r;
      } else {
        EXPECT_EQ(path[0], "grpc (ClientOptions.shared_memory_rounds is off)")
            << "rank " << r;
      }
    }
  }
};

INSTANTIATE_TEST_SUITE_P(RoundPaths, ClusterTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SharedMemory" : "Grpc";
                         });

// The N of "timed out after N ms" in `error`, or -1.
int64_t TimedOutAfterMs(const std::string& error) {
  const std::string kBefore = "timed out after ";
  size_t at = error.find(kBefore);
  if (at == std::string::npos) return -1;
  at += kBefore.size();
  size_t end = error.find(" ms", at);
  int64_t ms = -1;
  if (end == std::string::npos ||
      !absl::SimpleAtoi(error.substr(at, end - at), &ms)) {
    return -1;
  }
  return ms;
}

TEST_P(ClusterTest, FourDaemonsEightRanksAgreeOnTopologyRoundsAndKeys) {
  ClusterOptions options = Options();
  options.nnodes = 4;
  options.nproc_per_node = 2;
  options.tensor_parallel = 2;
  options.pipeline_parallel = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers(
      With({"--rounds=60", "--words=5", "--kv_keys=6"}));
  ASSERT_TRUE(workers.ok()) << workers.status();
  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(120));
  for (size_t r = 0; r < statuses.size(); ++r) {
    ASSERT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << "\n"
                                        << Logs(*workers);
  }

  ExpectRoundPath(*workers, cluster);
  ParallelTopology topology{2, 2, 1, 2};
  auto expected = DeriveGroups(topology, 8);
  ASSERT_TRUE(expected.ok());
  // group id -> members, as reported by each member.
  std::map<uint32_t, std::set<std::string>> views;
  for (uint32_t r = 0; r < 8; ++r) {
    std::string log = (*workers)[r].ReadLog();
    EXPECT_TRUE(absl::StrContains(log, "KV_OK keys=6")) << log;
    EXPECT_TRUE(absl::StrContains(log, "ROUNDS_OK n=60")) << log;
    auto json = LinesWithPrefix(log, "DESCRIPTOR ");
    ASSERT_EQ(json.size(), 1u) << log;
    v1::SessionDescriptor d;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json[0], &d).ok());
    EXPECT_EQ(d.rank(), r);
    EXPECT_EQ(d.world_size(), 8u);
    EXPECT_EQ(d.node_index(), r / 2);
    EXPECT_EQ(d.local_rank(), r % 2);
    EXPECT_EQ(d.topology().tensor(), 2u);
    EXPECT_EQ(d.topology().data(), 2u);
    auto mine = GroupsOfRank(*expected, r);
    ASSERT_EQ(d.groups_size(), static_cast<int>(mine.size()));
    for (int g = 0; g < d.groups_size(); ++g) {
      EXPECT_EQ(d.groups(g).id(), mine[g].first->id);
      EXPECT_EQ(std::vector<uint32_t>(d.groups(g).members().begin(),
                                      d.groups(g).members().end()),
                mine[g].first->members);
      EXPECT_EQ(d.groups(g).local_rank(), mine[g].second);
      views[d.groups(g).id()].insert(absl::StrJoin(d.groups(g).members(), ","));
    }
  }
  for (const auto& [id, seen] : views) {
    EXPECT_EQ(seen.size(), 1u) << "group " << id << " seen differently";
  }

  // After every rank left, every daemon reports the job completed.
  for (uint32_t n = 0; n < 4; ++n) {
    ClientOptions admin_options = cluster.AdminOptions(n);
    auto admin = AdminClient::Connect(admin_options);
    ASSERT_TRUE(admin.ok());
    absl::Time deadline = absl::Now() + absl::Seconds(5);
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    while (absl::Now() < deadline) {
      auto job = (*admin)->GetJob();
      ASSERT_TRUE(job.ok()) << job.status();
      state = job->state();
      if (state == v1::JOB_STATE_COMPLETED) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(state, v1::JOB_STATE_COMPLETED) << "node " << n;
    // Every daemon, not only the coordinator, knows every rank's process
    // and every node's address.
    auto members = (*admin)->ListMembers();
    ASSERT_TRUE(members.ok()) << members.status();
    for (const auto& m : members->members()) {
      EXPECT_EQ(m.state(), v1::MEMBER_STATE_LEFT) << "rank " << m.rank();
      EXPECT_NE(m.pid(), 0u) << "node " << n << " rank " << m.rank();
      EXPECT_EQ(m.device().kind(), "cpu")
          << "node " << n << " rank " << m.rank();
      EXPECT_EQ(m.local_rank(), m.rank() % 2);
    }
    ASSERT_EQ(members->nodes_size(), 4);
    auto topology = (*admin)->GetTopology();
    ASSERT_TRUE(topology.ok()) << topology.status();
    for (uint32_t k = 0; k < 4; ++k) {
      EXPECT_EQ(members->nodes(k).address(), cluster.tcp_address(k))
          << "node " << n << " about node " << k;
      EXPECT_EQ(topology->nodes(k).address(), cluster.tcp_address(k))
          << "node " << n << " about node " << k;
    }
  }
}

TEST_P(ClusterTest, BoundedRoundsMatchBlockingRounds) {
  ClusterOptions options = Options();
  options.nnodes = 3;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers =
      cluster.StartAllWorkers(With({"--rounds=25", "--words=3", "--bounded"}));
  ASSERT_TRUE(workers.ok());
  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(60));
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 0) << Logs(*workers);
  }
  ExpectRoundPath(*workers, cluster);
}

// Frames longer than a slot holds go over gRPC, interleaved with slot
// rounds, in order.
TEST_P(ClusterTest, LongAndShortFramesInterleaveInOrder) {
  ClusterOptions options = Options();
  options.nnodes = 2;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers(
      With({"--rounds=40", "--words=4", "--long_frame_every=3"}));
  ASSERT_TRUE(workers.ok());
  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(60));
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 0) << Logs(*workers);
    EXPECT_TRUE(absl::StrContains((*workers)[r].ReadLog(), "ROUNDS_OK n=40"));
  }
  ExpectRoundPath(*workers, cluster);
}

TEST_P(ClusterTest, AStalledRankIsNamedWhenTheRoundTimesOut) {
  ClusterOptions options = Options();
  options.nnodes = 2;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> workers;
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<std::string> args = {"--rounds=5", "--round_timeout_ms=800"};
    if (r == 3) {
      args.push_back("--stall_at_round=3");
      args.push_back("--stall_ms=2500");
    }
    auto w = cluster.StartWorker(r / 2, r % 2, With(args));
    ASSERT_TRUE(w.ok());
    workers.push_back(*std::move(w));
  }
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(30));
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 3) << Logs(workers);
    std::string error = LastErrorLine(workers[r]);
    EXPECT_TRUE(absl::StrContains(error, "code=DEADLINE_EXCEEDED")) << error;
    EXPECT_TRUE(
        absl::StrContains(error, "all_gather_words round 3 timed out after "))
        << error;
    EXPECT_TRUE(absl::StrContains(error, "waiting for rank 3 (node 1: 3)"))
        << error;
    EXPECT_GE(TimedOutAfterMs(error), 750) << error;
    EXPECT_LE(TimedOutAfterMs(error), 800) << error;
  }
  ExpectRoundPath(workers, cluster);
}

// On one node the daemon sends the ranks it holds as a partial batch
// shortly before the deadline (LocalRounds::FlushMargin); the message still
// counts from the round's first frame, as between nodes (it said
// "timed out after 198 ms" for a 1 s round).
TEST_P(ClusterTest, OneNodeRoundTimeoutSaysHowLongTheRoundWaited) {
  ClusterOptions options = Options();
  options.nnodes = 1;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    std::vector<std::string> args = {"--rounds=2", "--round_timeout_ms=1000"};
    if (r == 1) {
      args.push_back("--stall_at_round=2");
      args.push_back("--stall_ms=2500");
    }
    auto w = cluster.StartWorker(0, r, With(args));
    ASSERT_TRUE(w.ok());
    workers.push_back(*std::move(w));
  }
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(30));
  EXPECT_EQ(ExitCode(statuses[0]), 3) << Logs(workers);
  std::string error = LastErrorLine(workers[0]);
  EXPECT_TRUE(absl::StrContains(error, "code=DEADLINE_EXCEEDED")) << error;
  EXPECT_TRUE(
      absl::StrContains(error, "all_gather_words round 2 timed out after "))
      << error;
  EXPECT_TRUE(absl::StrContains(error, "waiting for rank 1 (node 0: 1)"))
      << error;
  const int64_t ms = TimedOutAfterMs(error);
  EXPECT_GE(ms, 950) << error;
  EXPECT_LE(ms, 1000) << error;
}

TEST_P(ClusterTest, FrameLengthMismatchFailsTheRoundOnEveryRankNamingTheRank) {
  ClusterOptions options = Options();
  options.nnodes = 3;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  auto workers = cluster.StartAllWorkers(
      With({"--rounds=3", "--words=4", "--words_for_rank=3:5"}));
  ASSERT_TRUE(workers.ok());
  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(60));
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_EQ(ExitCode(statuses[r]), 3) << Logs(*workers);
    std::string error = LastErrorLine((*workers)[r]);
    EXPECT_TRUE(absl::StrContains(error, "code=INVALID_ARGUMENT")) << error;
    EXPECT_TRUE(absl::StrContains(error, "5 words from rank 3")) << error;
    EXPECT_TRUE(absl::StrContains(error, "4 words from ranks 0-2, 4-5"))
        << error;
  }
}

TEST_P(ClusterTest, KilledRankFailsEveryOtherRankNamingIt) {
  ClusterOptions options = Options();
  options.nnodes = 3;
  options.nproc_per_node = 3;
  options.heartbeat_timeout_ms = 1000;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  const uint32_t victim = 4;  // node 1, local rank 1
  std::vector<ChildProcess> workers;
  for (uint32_t n = 0; n < 3; ++n) {
    for (uint32_t l = 0; l < 3; ++l) {
      std::vector<std::string> args = {"--rounds=1000",
                                       "--round_timeout_ms=30000"};
      if (n * 3 + l == victim) args.push_back("--stall_at_round=5");
      auto w = cluster.StartWorker(n, l, With(args));
      ASSERT_TRUE(w.ok());
      workers.push_back(*std::move(w));
    }
  }
  ASSERT_TRUE(
      WaitForLog(workers[victim], "STALLING round=5", absl::Seconds(30)))
      << Logs(workers);
  absl::SleepFor(absl::Milliseconds(200));  // the others now wait in round 5
  workers[victim].Signal(SIGKILL);
  absl::Time killed = absl::Now();
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(20));
  absl::Duration took = absl::Now() - killed;
  EXPECT_LT(took, absl::Seconds(10)) << "survivors took too long to fail";
  for (uint32_t r = 0; r < workers.size(); ++r) {
    if (r == victim) continue;
    EXPECT_EQ(ExitCode(statuses[r]), 3) << Logs(workers);
    std::string error = LastErrorLine(workers[r]);
    EXPECT_TRUE(absl::StrContains(error, "code=ABORTED")) << error;
    EXPECT_TRUE(absl::StrContains(error, "rank 4 ")) << error;
    EXPECT_TRUE(absl::StrContains(error, "lost")) << error;
  }
  // Every daemon still answers operators, and reports the failure.
  for (uint32_t n = 0; n < 3; ++n) {
    ClientOptions admin_options = cluster.AdminOptions(n);
    auto admin = AdminClient::Connect(admin_options);
    ASSERT_TRUE(admin.ok());
    auto job = (*admin)->GetJob();
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
    EXPECT_TRUE(absl::StrContains(job->failure(), "rank 4 ")) << job->failure();
    auto members = (*admin)->ListMembers();
    ASSERT_TRUE(members.ok());
    EXPECT_EQ(members->members(victim).state(), v1::MEMBER_STATE_LOST);
  }
}

TEST_P(ClusterTest, KilledDaemonFailsEveryOtherRankNamingTheNode) {
  ClusterOptions options = Options();
  options.nnodes = 3;
  options.nproc_per_node = 2;
  options.heartbeat_timeout_ms = 1000;
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> workers;
  for (uint32_t n = 0; n < 3; ++n) {
    for (uint32_t l = 0; l < 2; ++l) {
      std::vector<std::string> args = {"--rounds=1000",
                                       "--round_timeout_ms=30000"};
      if (n == 0 && l == 0) args.push_back("--stall_at_round=4");
      auto w = cluster.StartWorker(n, l, With(args));
      ASSERT_TRUE(w.ok());
      workers.push_back(*std::move(w));
    }
  }
  ASSERT_TRUE(WaitForLog(workers[0], "STALLING round=4", absl::Seconds(30)))
      << Logs(workers);
  absl::SleepFor(absl::Milliseconds(200));
  cluster.daemon(2).Signal(SIGKILL);
  absl::Time killed = absl::Now();
  std::vector<int> statuses = WaitAll(workers, absl::Seconds(20));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  for (uint32_t r = 0; r < 4; ++r) {  // ranks on the surviving nodes
    EXPECT_EQ(ExitCode(statuses[r]), 3) << Logs(workers);
    std::string error = LastErrorLine(workers[r]);
    EXPECT_TRUE(absl::StrContains(error, "code=ABORTED")) << error;
    EXPECT_TRUE(absl::StrContains(error, "node 2")) << error;
  }
  for (uint32_t r = 4; r < 6; ++r) {  // ranks that lost their own daemon
    EXPECT_EQ(ExitCode(statuses[r]), 3) << Logs(workers);
    EXPECT_FALSE(LastErrorLine(workers[r]).empty());
  }
  for (uint32_t n = 0; n < 2; ++n) {
    ClientOptions admin_options = cluster.AdminOptions(n);
    auto admin = AdminClient::Connect(admin_options);
    ASSERT_TRUE(admin.ok());
    auto job = (*admin)->GetJob();
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
    EXPECT_TRUE(absl::StrContains(job->failure(), "node 2")) << job->failure();
    auto topology = (*admin)->GetTopology();
    EXPECT_TRUE(topology.ok()) << topology.status();
  }
}

}  // namespace
}  // namespace rankd::testing
