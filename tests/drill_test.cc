// Drills with real daemons and rank processes (docs/operations.md,
// "Drills"): what an orchestrator does to a job, done many times over.
//   - Every daemon and rank gets SIGTERM at once (a node pool drained, a
//     Deployment deleted), at a random moment, 50 times: no crash, no hang,
//     every daemon exits 0.
//   - kill -9 of a random rank or daemon at a random moment: every survivor
//     names the loss within one heartbeat timeout, and the surviving daemons
//     keep answering.
// RANKD_DRILL_REPEATS overrides each drill's repetitions; RANKD_DRILL_SEED
// replays one run's random choices (the seed is printed).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  int parsed = 0;
  return value != nullptr && absl::SimpleAtoi(value, &parsed) ? parsed
                                                              : fallback;
}

// One random source per test, seeded from RANKD_DRILL_SEED or the clock,
// and the seed printed so a failure can be replayed.
std::mt19937 SeededRandom(const char* drill) {
  uint32_t seed = static_cast<uint32_t>(
      EnvInt("RANKD_DRILL_SEED",
             static_cast<int>(absl::ToUnixMicros(absl::Now()) & 0x7fffffff)));
  std::printf("%s: RANKD_DRILL_SEED=%u\n", drill, seed);
  return std::mt19937(seed);
}

// True when `status` (from waitpid) is a death by a signal other than the
// SIGTERM the drill sent (a crash: SIGSEGV, SIGABRT, ...).
bool DiedOfAnotherSignal(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM;
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("status ", status);
}

// A job of `nnodes` nodes with 2 ranks each, whose ranks run rounds until
// stopped.
ClusterOptions DrillJob(uint32_t nnodes) {
  ClusterOptions options;
  options.nnodes = nnodes;
  options.nproc_per_node = 2;
  options.heartbeat_interval_ms = 100;
  options.heartbeat_timeout_ms = 2000;
  return options;
}

const std::vector<std::string> kBusyRanks = {
    "--rounds=100000000", "--round_timeout_ms=20000", "--join_wait_ms=20000"};

TEST(DrillTest, SimultaneousSigtermOfEveryDaemonAndRankIsClean) {
  const int repeats = EnvInt("RANKD_DRILL_REPEATS", 50);
  ASSERT_GE(repeats, 1) << "RANKD_DRILL_REPEATS must be at least 1";
  std::mt19937 random = SeededRandom("sigterm drill");
  // The moment: while ranks join (0-50 ms) or while they run rounds.
  std::uniform_int_distribution<int> delay_ms(0, 400);
  for (int i = 0; i < repeats; ++i) {
    SCOPED_TRACE(absl::StrCat("repetition ", i + 1, " of ", repeats));
    LocalCluster cluster(DrillJob(2));
    absl::Status started = cluster.Start();
    ASSERT_TRUE(started.ok()) << started;
    auto workers = cluster.StartAllWorkers(kBusyRanks);
    ASSERT_TRUE(workers.ok()) << workers.status();
    absl::SleepFor(absl::Milliseconds(delay_ms(random)));
    // Everyone at once, daemons and ranks interleaved.
    for (uint32_t n = 0; n < 2; ++n) {
      cluster.daemon(n).Signal(SIGTERM);
      (*workers)[2 * n].Signal(SIGTERM);
      (*workers)[2 * n + 1].Signal(SIGTERM);
    }
    for (uint32_t n = 0; n < 2; ++n) {
      std::optional<int> status = cluster.daemon(n).Wait(absl::Seconds(20));
      ASSERT_TRUE(status.has_value())
          << "daemon " << n << " hung after SIGTERM:\n"
          << cluster.daemon(n).ReadLog();
      EXPECT_EQ(ExitCode(*status), 0)
          << "daemon " << n << ": " << Describe(*status) << "\n"
          << cluster.daemon(n).ReadLog();
    }
    std::vector<int> statuses = WaitAll(*workers, absl::Seconds(20));
    for (size_t r = 0; r < statuses.size(); ++r) {
      EXPECT_NE(statuses[r], -1) << "rank " << r << " hung after SIGTERM";
      EXPECT_FALSE(DiedOfAnotherSignal(statuses[r]))
          << "rank " << r << ": " << Describe(statuses[r]) << "\n"
          << (*workers)[r].ReadLog();
    }
    if (::testing::Test::HasFailure()) break;
  }
}

// What every survivor must say after `victim` was killed.
struct Loss {
  std::string what;  // "rank 3", "node 1", "coordinator"
  // Text a rank elsewhere in the job shows, and a surviving daemon's failure.
  std::string named;
  // The node whose ranks lost their own daemon (-1: none).
  int orphaned_node = -1;
};

TEST(DrillTest, EverySurvivorNamesARandomKillWithinOneHeartbeatTimeout) {
  const int repeats = EnvInt("RANKD_DRILL_REPEATS", 12);
  ASSERT_GE(repeats, 1) << "RANKD_DRILL_REPEATS must be at least 1";
  std::mt19937 random = SeededRandom("kill -9 drill");
  constexpr uint32_t kNodes = 3, kRanks = 6;
  std::uniform_int_distribution<int> victim_of(0, kRanks + kNodes - 1);
  std::uniform_int_distribution<int> delay_ms(0, 600);
  for (int i = 0; i < repeats; ++i) {
    SCOPED_TRACE(absl::StrCat("repetition ", i + 1, " of ", repeats));
    ClusterOptions options = DrillJob(kNodes);
    LocalCluster cluster(options);
    absl::Status started = cluster.Start();
    ASSERT_TRUE(started.ok()) << started;
    auto workers = cluster.StartAllWorkers(kBusyRanks);
    ASSERT_TRUE(workers.ok()) << workers.status();
    // Every rank has joined, so the loss is of a member of a running job;
    // then a random moment inside its rounds.
    for (auto& w : *workers) {
      ASSERT_TRUE(WaitForLog(w, "JOINED", absl::Seconds(20))) << Logs(*workers);
    }
    const int moment = delay_ms(random);
    absl::SleepFor(absl::Milliseconds(moment));
    const int pick = victim_of(random);
    Loss loss;
    if (pick < static_cast<int>(kRanks)) {
      loss = {absl::StrCat("rank ", pick), absl::StrCat("rank ", pick, " "),
              -1};
      (*workers)[pick].Signal(SIGKILL);
    } else {
      const int node = pick - kRanks;
      loss = node == 0 ? Loss{"the coordinator (node 0)", "coordinator lost", 0}
                       : Loss{absl::StrCat("node ", node),
                              absl::StrCat("node ", node), node};
      cluster.daemon(node).Signal(SIGKILL);
    }
    const absl::Time killed = absl::Now();
    SCOPED_TRACE(absl::StrCat("killed ", loss.what));

    // Every other rank reports the loss, each within the heartbeat timeout.
    const absl::Duration bound =
        absl::Milliseconds(options.heartbeat_timeout_ms);
    std::vector<std::optional<absl::Duration>> named(kRanks);
    size_t waiting = kRanks - (pick < static_cast<int>(kRanks) ? 1 : 0);
    while (waiting > 0 && absl::Now() - killed < bound + absl::Seconds(10)) {
      for (uint32_t r = 0; r < kRanks; ++r) {
        if (static_cast<int>(r) == pick || named[r].has_value()) continue;
        if (!LastErrorLine((*workers)[r]).empty()) {
          named[r] = absl::Now() - killed;
          --waiting;
        }
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    absl::Duration slowest;
    for (const auto& d : named)
      slowest = std::max(slowest, d.value_or(slowest));
    std::printf("killed %s after %d ms: the last survivor named it after %s\n",
                loss.what.c_str(), moment,
                absl::FormatDuration(slowest).c_str());
    for (uint32_t r = 0; r < kRanks; ++r) {
      if (static_cast<int>(r) == pick) continue;
      ASSERT_TRUE(named[r].has_value())
          << "rank " << r << " never reported the loss:\n"
          << Logs(*workers);
      EXPECT_LE(*named[r], bound) << "rank " << r << " took " << *named[r];
      std::string error = LastErrorLine((*workers)[r]);
      if (static_cast<int>(r / 2) == loss.orphaned_node) {
        // Its own daemon is gone: the client says so.
        EXPECT_TRUE(absl::StrContains(error, "daemon")) << error;
      } else {
        EXPECT_TRUE(absl::StrContains(error, "code=ABORTED")) << error;
        EXPECT_TRUE(absl::StrContains(error, loss.named)) << error;
      }
    }
    // Every rank that was not killed exits on its own, none by a crash.
    std::vector<int> statuses = WaitAll(*workers, absl::Seconds(20));
    for (uint32_t r = 0; r < kRanks; ++r) {
      if (static_cast<int>(r) == pick) continue;
      EXPECT_EQ(ExitCode(statuses[r]), 3)
          << "rank " << r << ": " << Describe(statuses[r]);
    }
    // The surviving daemons answer operators, report the failure naming the
    // loss, and exit 0 on SIGTERM.
    for (uint32_t n = 0; n < kNodes; ++n) {
      if (static_cast<int>(n) == loss.orphaned_node) continue;
      auto admin = AdminClient::Connect(cluster.AdminOptions(n));
      ASSERT_TRUE(admin.ok()) << admin.status();
      auto job = (*admin)->GetJob();
      ASSERT_TRUE(job.ok()) << "node " << n << ": " << job.status();
      EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED) << "node " << n;
      EXPECT_TRUE(absl::StrContains(job->failure(), loss.named))
          << "node " << n << ": " << job->failure();
    }
    for (int n = kNodes - 1; n >= 0; --n) {
      if (n == loss.orphaned_node) continue;
      int status = cluster.daemon(n).Stop(absl::Seconds(10));
      EXPECT_EQ(ExitCode(status), 0)
          << "daemon " << n << ": " << Describe(status) << "\n"
          << cluster.daemon(n).ReadLog();
    }
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace rankd::testing
