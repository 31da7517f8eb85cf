// tools/run.sh --recover (issue 38, part 4: in-place recovery in the main
// job) at a small size with the binaries this test depends on
// (RANKD_BIN_DIR): a rank killed with SIGKILL mid-run is restarted by
// rankrun into its rank and loads its shard, a whole node (daemon,
// rankrun, ranks) killed is replaced by a new daemon that registers the
// node again; either way the job re-forms at epoch 2 and serves the failed
// step again. Each run must exit 0 with every step self-checked, the
// requests in flight at the loss re-run and none lost, the recovery time
// split into its four phases, and nothing left running. Also the full
// restart that in-place recovery is measured against (--full-restart).
// With --recovery=domain (issue 38, part 5) only the hit data-parallel
// replica re-forms while the other serves on. A second loss while the
// sessions re-form (a survivor dies as the replacement joins) is recovered
// at the epoch after it with no survivor restarted.
// Real daemons, rankrun and serving processes; nothing is stubbed.
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/harness/run_sh.h"

namespace rankd::testing {
namespace {

// World 4 (2 nodes x 2 ranks, pp2 ep2): small enough for a 2-core machine.
const std::vector<std::string> kSmallJob = {
    "--nodes=2", "--ranks-per-node=2", "--tp=1",    "--pp=2",     "--ep=2",
    "--steps=8", "--at-step=4",        "--recover", "--keep-logs"};

std::vector<std::string> With(std::vector<std::string> args,
                              const std::string& drill) {
  args.push_back(drill);
  return args;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The recovered run's ledger: the requests in flight at the loss (step 4
// has some) all re-run, none lost.
void ExpectLedger(const RunResult& run) {
  std::smatch m;
  const std::regex ledger(
      "1 loss recovered in place: ([0-9]+) in flight at the loss, ([0-9]+) "
      "re-run, 0 lost");
  ASSERT_TRUE(std::regex_search(run.output, m, ledger)) << run.output;
  EXPECT_GT(std::stoi(m[1]), 0) << "step 4 of seed 2024 serves requests";
  EXPECT_EQ(m[1], m[2]) << run.output;
}

// The recovery time's four phases, each with its time.
void ExpectFourPhases(const RunResult& run) {
  for (const char* phase : {"detect", "replace", "re-form", "first step"}) {
    EXPECT_TRUE(std::regex_search(
        run.output,
        std::regex(absl::StrCat("\n   ", phase, " +[0-9]+\\.[0-9] ms  "))))
        << phase << "\n"
        << run.output;
  }
}

// What every recovered run must show: all steps checked, the ledger, the
// four phases with their times, a clean end.
void ExpectRecovered(const RunResult& run) {
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    PASSED: 8/8 steps"))
      << run.output;
  ExpectLedger(run);
  EXPECT_TRUE(std::regex_search(
      run.output,
      std::regex("== recovery: .* killed at step 4; serving again after "
                 "[0-9]+\\.[0-9] ms")))
      << run.output;
  ExpectFourPhases(run);
  EXPECT_TRUE(absl::StrContains(run.output,
                                "step 4 served again and self-checked on "
                                "all 4 ranks"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "no process left behind"))
      << run.output;
  ExpectNothingLeft(run);
}

TEST(RunShRecoverTest, AKilledRankIsRestartedAndTheJobServesOn) {
  const RunResult run = RunScript(With(kSmallJob, "--kill-rank=3"));
  ExpectRecovered(run);
  EXPECT_TRUE(absl::StrContains(run.output, "kill -9 rank 3 (pid "))
      << run.output;
  EXPECT_TRUE(absl::StrContains(
      run.output, "rankrun restarted rank 3; the replacement joined epoch 2"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "all 3 surviving ranks saw"))
      << run.output;
  // The logs: the replacement loaded its shard, every survivor kept its own
  // and served step 4 again.
  const std::string dir = RunDir(run.output);
  ASSERT_FALSE(dir.empty());
  const std::string rank3 = ReadFile(absl::StrCat(dir, "/rank3.log"));
  EXPECT_TRUE(absl::StrContains(rank3, "STALLING rank=3 step=4 pid=")) << rank3;
  EXPECT_TRUE(std::regex_search(
      rank3, std::regex("JOINED rank=3 epoch=2 unix_us=[0-9]+ restart=1")))
      << rank3;
  EXPECT_TRUE(absl::StrContains(rank3, "shard=loaded")) << rank3;
  EXPECT_TRUE(absl::StrContains(rank3, "RESUMING rank=3 step=4 epoch=2"))
      << rank3;
  for (int r : {0, 1, 2}) {
    const std::string log = ReadFile(absl::StrCat(dir, "/rank", r, ".log"));
    EXPECT_TRUE(absl::StrContains(
        log, absl::StrCat("LOSS rank=", r, " step=4 epoch=1 ")))
        << log;
    EXPECT_TRUE(absl::StrContains(log, "shard=kept")) << log;
    EXPECT_FALSE(absl::StrContains(log, "shard=loaded")) << log;
    EXPECT_TRUE(absl::StrContains(
        log, absl::StrCat("RESUMED rank=", r, " step=4 epoch=2 ")))
        << log;
  }
  const std::string node1 = ReadFile(absl::StrCat(dir, "/ranks-node1.log"));
  EXPECT_TRUE(absl::StrContains(node1, "restarting it (restart 1 of 3)"))
      << node1;
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

TEST(RunShRecoverTest, AKilledNodeIsReplacedAndTheJobServesOn) {
  const RunResult run = RunScript(With(kSmallJob, "--kill-node=1"));
  ExpectRecovered(run);
  EXPECT_TRUE(absl::StrContains(run.output, "kill -9 node 1 at step 4"))
      << run.output;
  EXPECT_TRUE(std::regex_search(
      run.output,
      std::regex("the replacement daemon registered node 1 \\(\\+[0-9.]+ "
                 "ms\\) and its 2 ranks joined epoch 2")))
      << run.output;
  const std::string dir = RunDir(run.output);
  ASSERT_FALSE(dir.empty());
  // The new daemon of node 1 ran, and its ranks joined as replacements.
  const std::string daemon = ReadFile(absl::StrCat(dir, "/daemon1.2.log"));
  EXPECT_FALSE(daemon.empty());
  for (int r : {2, 3}) {
    const std::string log = ReadFile(absl::StrCat(dir, "/rank", r, ".log"));
    EXPECT_TRUE(
        absl::StrContains(log, absl::StrCat("JOINED rank=", r, " epoch=2 ")))
        << log;
    EXPECT_TRUE(absl::StrContains(log, "shard=loaded")) << log;
  }
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

// A second loss during recovery, at the data-plane level: rank 3 is killed
// at step 4; the moment the job is whole again at epoch 2 (rank 3's
// replacement joined), survivor rank 1 kills itself (the example's
// --die_at_epoch=2 --die_rank=1 drill: its client's epoch is polled every
// 2 ms, so it dies right after its Rejoin returns). What makes it land
// while the sessions of epoch 2 connect, every time: the replacement holds
// its first open for 3 s (--hold_replacement_open_ms), so no session of
// epoch 2 can finish connecting before rank 1 is gone. Survivors 0 and 2
// re-form at epoch 3 in the same Reform call and keep their shards (one
// REFORMED line each, epoch=3 shard=kept); rank 3's replacement opens at
// epoch 3 instead of exiting (its open at epoch 2 fails: LOSS step=0
// epoch=2), so it is restarted once and loads its shard once; rankrun
// restarts only rank 1. (--connect_timeout_ms=10000: a survivor whose pair
// with rank 1 was half made when rank 1 died waits for it until the connect
// timeout; docs/dataplane.md, "Re-forming after a loss".)
TEST(RunShRecoverTest, ASecondLossWhileTheSessionsReformIsRecoveredInPlace) {
  std::vector<std::string> args = With(kSmallJob, "--kill-rank=3");
  for (const char* flag :
       {"--", "--die_at_epoch=2", "--die_rank=1",
        "--hold_replacement_open_ms=3000", "--connect_timeout_ms=10000"}) {
    args.push_back(flag);
  }
  const RunResult run = RunScript(args);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    PASSED: 8/8 steps"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output,
                                "step 4 served again and self-checked on "
                                "all 4 ranks"))
      << run.output;
  EXPECT_TRUE(std::regex_search(run.output, std::regex("EPOCH +3\n")))
      << run.output;
  ExpectNothingLeft(run);
  const std::string dir = RunDir(run.output);
  ASSERT_FALSE(dir.empty());
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  // The survivors: one re-form, at epoch 3, shard kept, never restarted.
  for (int r : {0, 2}) {
    const std::string log = ReadFile(absl::StrCat(dir, "/rank", r, ".log"));
    EXPECT_EQ(count(log, "READY "), 1u) << log;
    EXPECT_EQ(count(log, "REFORMED "), 1u) << log;
    EXPECT_TRUE(std::regex_search(
        log, std::regex(absl::StrCat("REFORMED rank=", r,
                                     " epoch=3 unix_us=[0-9]+ shard=kept"))))
        << log;
    EXPECT_FALSE(absl::StrContains(log, "FAILED")) << log;
    EXPECT_TRUE(absl::StrContains(
        log, absl::StrCat("RESUMED rank=", r, " step=4 epoch=3 ")))
        << log;
  }
  // The second victim, restarted into epoch 3.
  const std::string rank1 = ReadFile(absl::StrCat(dir, "/rank1.log"));
  EXPECT_TRUE(absl::StrContains(rank1, "DYING rank=1 epoch=2 ")) << rank1;
  EXPECT_TRUE(std::regex_search(
      rank1, std::regex("JOINED rank=1 epoch=3 unix_us=[0-9]+ restart=1")))
      << rank1;
  // Rank 3's replacement: joined epoch 2, saw it end before its session
  // connected, opened at epoch 3 in the same process.
  const std::string rank3 = ReadFile(absl::StrCat(dir, "/rank3.log"));
  EXPECT_EQ(count(rank3, "JOINED "), 1u) << rank3;
  EXPECT_TRUE(std::regex_search(
      rank3, std::regex("JOINED rank=3 epoch=2 unix_us=[0-9]+ restart=1")))
      << rank3;
  EXPECT_TRUE(absl::StrContains(rank3, "LOSS rank=3 step=0 epoch=2 ")) << rank3;
  EXPECT_EQ(count(rank3, "shard=loaded"), 1u) << rank3;
  EXPECT_TRUE(std::regex_search(
      rank3, std::regex("REFORMED rank=3 epoch=3 unix_us=[0-9]+ shard=loaded")))
      << rank3;
  EXPECT_FALSE(absl::StrContains(rank3, "FAILED")) << rank3;
  // rankrun restarted rank 1 once and rank 3 once, nothing else.
  const std::string node0 = ReadFile(absl::StrCat(dir, "/ranks-node0.log"));
  const std::string node1 = ReadFile(absl::StrCat(dir, "/ranks-node1.log"));
  EXPECT_EQ(count(node0, "restarting it"), 1u) << node0;
  EXPECT_TRUE(absl::StrContains(node0, "rank 1 (local rank 1")) << node0;
  EXPECT_EQ(count(node1, "restarting it"), 1u) << node1;
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

// The baseline in-place recovery is measured against (bench/run_recovery.sh):
// the job fails, every daemon and rank is stopped and started again, and
// the new job serves from the failed step on, self-checked, with the time
// from the loss split into its six phases.
TEST(RunShRecoverTest, AFullRestartServesOnFromTheFailedStep) {
  const RunResult run =
      RunScript({"--nodes=2", "--ranks-per-node=2", "--tp=1", "--pp=2",
                 "--ep=2", "--steps=8", "--at-step=4", "--kill-rank=3",
                 "--full-restart", "--keep-logs"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    PASSED: 5/5 steps"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "served        5 steps (steps 4-8"))
      << run.output;
  EXPECT_TRUE(std::regex_search(
      run.output, std::regex("== full restart: rank 3 killed at step 4; "
                             "serving again after [0-9]+\\.[0-9] ms")))
      << run.output;
  for (const char* phase :
       {"detect", "exit", "stop", "daemons", "ranks", "first step"}) {
    EXPECT_TRUE(std::regex_search(
        run.output,
        std::regex(absl::StrCat("\n   ", phase, " +[0-9]+\\.[0-9] ms  "))))
        << phase << "\n"
        << run.output;
  }
  const std::string dir = RunDir(run.output);
  ASSERT_FALSE(dir.empty());
  // The failed job's survivors named the lost rank; every rank of the new
  // job loaded its shard and started at step 4; new daemons ran.
  for (int r : {0, 1, 2}) {
    const std::string before =
        ReadFile(absl::StrCat(dir, "/phase1-rank", r, ".log"));
    EXPECT_TRUE(std::regex_search(before, std::regex("FAILED .*rank 3")))
        << before;
  }
  for (int r : {0, 1, 2, 3}) {
    const std::string log = ReadFile(absl::StrCat(dir, "/rank", r, ".log"));
    EXPECT_TRUE(
        absl::StrContains(log, absl::StrCat("RESTARTED rank=", r, " step=4 ")))
        << log;
    EXPECT_TRUE(absl::StrContains(
        log, absl::StrCat("RESUMED rank=", r, " step=4 epoch=1 ")))
        << log;
  }
  EXPECT_FALSE(ReadFile(absl::StrCat(dir, "/daemon1.2.log")).empty());
  EXPECT_TRUE(absl::StrContains(run.output, "no process left behind"))
      << run.output;
  ExpectNothingLeft(run);
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

// Recovery by replica (--recovery=domain): world 4 = 2 replicas of a pp2
// pipeline (replica 0 = ranks 0-1 on node 0, replica 1 = ranks 2-3 on
// node 1).
const std::vector<std::string> kTwoReplicas = {"--nodes=2",
                                               "--ranks-per-node=2",
                                               "--tp=1",
                                               "--pp=2",
                                               "--ep=1",
                                               "--steps=8",
                                               "--at-step=4",
                                               "--recover",
                                               "--recovery=domain",
                                               "--keep-logs"};

// What every run recovered by replica must show: both replicas' steps
// checked, the other replica served steps meanwhile (read from the
// summary), the ledger, the phases, a clean end; the other replica's
// ranks never lost, re-formed or resumed anything.
void ExpectRecoveredByReplica(const RunResult& run, int hit, int other) {
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(
      absl::StrContains(run.output, "self-check    PASSED: 16/16 steps"))
      << run.output;
  EXPECT_TRUE(
      absl::StrContains(run.output, "served        2 replicas x 8 steps"))
      << run.output;
  std::smatch m;
  const std::regex meanwhile(
      absl::StrCat("replica ", other,
                   " +ranks [0-9]+-[0-9]+, epoch 1: 8 steps served, 8 "
                   "self-checked; served ([0-9]+) of them while replica ",
                   hit, " recovered"));
  ASSERT_TRUE(std::regex_search(run.output, m, meanwhile)) << run.output;
  EXPECT_GT(std::stoi(m[1]), 0) << run.output;
  EXPECT_TRUE(std::regex_search(
      run.output,
      std::regex(absl::StrCat("replica ", hit,
                              " +ranks [0-9]+-[0-9]+, epoch "
                              "2: 8 steps served, 8 self-checked; 1 loss "
                              "recovered in place"))))
      << run.output;
  ExpectLedger(run);
  EXPECT_TRUE(std::regex_search(
      run.output,
      std::regex(absl::StrCat("== recovery: rank [0-9]+ \\(replica ", hit,
                              ", ranks [0-9]+-[0-9]+\\) killed at step 4; "
                              "serving again after [0-9]+\\.[0-9] ms"))))
      << run.output;
  ExpectFourPhases(run);
  EXPECT_TRUE(absl::StrContains(
      run.output, absl::StrCat("step 4 served again and self-checked on all 2 "
                               "ranks of replica ",
                               hit)))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "== OK: recovered by replica"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "no process left behind"))
      << run.output;
  ExpectNothingLeft(run);
  const std::string dir = RunDir(run.output);
  ASSERT_FALSE(dir.empty());
  for (int r : {2 * other, 2 * other + 1}) {
    const std::string log = ReadFile(absl::StrCat(dir, "/rank", r, ".log"));
    EXPECT_TRUE(absl::StrContains(log, absl::StrCat("DONE rank=", r))) << log;
    for (const char* never : {"LOSS ", "REFORMED ", "RESUMED ", "JOINED "}) {
      EXPECT_FALSE(absl::StrContains(log, never)) << never << "\n" << log;
    }
  }
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

TEST(RunShRecoverTest, ByReplicaTheHitReplicaReFormsAloneAndTheOtherServes) {
  const RunResult run = RunScript(With(kTwoReplicas, "--kill-rank=3"));
  ExpectRecoveredByReplica(run, /*hit=*/1, /*other=*/0);
  EXPECT_TRUE(absl::StrContains(run.output, "--recovery=domain (2 replicas"))
      << run.output;
  EXPECT_TRUE(
      absl::StrContains(run.output, "all 1 surviving ranks saw the loss"))
      << run.output;
}

// Rank 0 too: the summary comes from the lowest rank that saw every round
// (rank 2), through the world rounds' words.
TEST(RunShRecoverTest, ByReplicaRankZeroMayBeKilled) {
  const RunResult run = RunScript(With(kTwoReplicas, "--kill-rank=0"));
  ExpectRecoveredByReplica(run, /*hit=*/0, /*other=*/1);
  EXPECT_TRUE(absl::StrContains(run.output, "== summary by rank2.log"))
      << run.output;
}

// A recovery that cannot complete (every re-form given 1 ms) fails the
// run, loudly, and still leaves nothing behind.
TEST(RunShRecoverTest, ARecoveryThatCannotCompleteFailsTheRun) {
  std::vector<std::string> args = With(kSmallJob, "--kill-rank=3");
  args.push_back("--");
  args.push_back("--recover_timeout_ms=1");
  const RunResult run = RunScript(args);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(absl::StrContains(
      run.output, "FAILED: the run with in-place recovery did not go"))
      << run.output;
  EXPECT_FALSE(absl::StrContains(run.output, "self-check    PASSED: 8/8"))
      << run.output;
  ExpectNothingLeft(run);
  const std::string dir = RunDir(run.output);
  if (!dir.empty()) std::system(absl::StrCat("rm -rf ", dir).c_str());
}

TEST(RunShRecoverTest, RefusesWhatCannotBeRecoveredClearly) {
  RunResult run = RunScript(
      {"--nodes=2", "--ranks-per-node=2", "--recover", "--kill-node=0"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "its loss is always terminal"))
      << run.output;
  run = RunScript({"--nodes=2", "--ranks-per-node=2", "--kill-node=1"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--kill-node needs --recover"))
      << run.output;
  run = RunScript(
      {"--nodes=2", "--ranks-per-node=2", "--recover", "--kill-rank=0"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "rank 0 checks every step"))
      << run.output;
  run = RunScript({"--nodes=2", "--ranks-per-node=2", "--full-restart"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--full-restart needs --kill-rank"))
      << run.output;
  run = RunScript({"--nodes=2", "--ranks-per-node=2", "--kill-rank=1",
                   "--recover", "--full-restart"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "one at a time")) << run.output;
  run = RunScript({"--nodes=2", "--ranks-per-node=2", "--recover",
                   "--kill-rank=1", "--kill-node=1"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "one drill at a time"))
      << run.output;
  // Recovery by replica: needs --recover, two replicas, and a rank (not a
  // node, which may hold a whole replica).
  run = RunScript({"--nodes=2", "--ranks-per-node=2", "--recovery=domain"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(
      absl::StrContains(run.output, "--recovery=domain needs --recover"))
      << run.output;
  run = RunScript({"--nodes=2", "--ranks-per-node=2", "--tp=2", "--pp=2",
                   "--recover", "--recovery=domain"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "leaves dp=1")) << run.output;
  run =
      RunScript({"--nodes=2", "--ranks-per-node=2", "--tp=1", "--pp=2",
                 "--ep=1", "--recover", "--recovery=domain", "--kill-node=1"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(
      absl::StrContains(run.output, "--kill-node with --recovery=domain"))
      << run.output;
  run = RunScript(
      {"--nodes=2", "--ranks-per-node=2", "--recover", "--recovery=replica"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--recovery=replica: use on"))
      << run.output;
}

}  // namespace
}  // namespace rankd::testing
