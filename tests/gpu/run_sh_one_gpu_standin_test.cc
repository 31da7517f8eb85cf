// tools/run.sh in the GPU kit's one-GPU mode (RANKD_KIT_RANKS_ON_ONE_GPU=1;
// docs/nccl.md, "One GPU, several ranks") on one stand-in GPU, as the GPU
// kit's serving example runs it on a one-GPU host: two NCCL serving ranks
// share the GPU, each process with its own NCCL_HOSTID. The target sets
// the environment (the stand-in for CUDA and NCCL, one device). The
// stand-in refuses two ranks of one communicator on one GPU under one host
// id ("Duplicate GPU detected"), as NCCL does, so a run that serves shows
// that every rank had an id of its own, also with --recover, where rankrun
// starts a node's ranks with one environment and run.sh gives each its id
// through rankrun's {rank}; rank 1 is then killed, restarted into its slot
// and the job serves on; and with --recovery=domain (two replicas of a pp2
// pipeline, four ranks on the GPU), a rank of replica 1 is killed and its
// replica re-forms its NCCL sessions alone while replica 0 serves on.
// Test-only settings and libraries: no proof that the GPU path works. Depends
// on the run.sh test harness.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/harness/run_sh.h"

namespace rankd::testing {
namespace {

const std::vector<std::string> kTwoRanksOnOneGpu = {
    "--backend=nccl", "--nodes=1", "--ranks-per-node=2", "--steps=8"};

TEST(RunShOneGpuStandinTest, TwoRanksServeOnOneGpuWithAHostIdEach) {
  const RunResult run = RunScript(kTwoRanksOnOneGpu);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    PASSED: 8/8 steps"))
      << run.output;
  ExpectNothingLeft(run);
}

TEST(RunShOneGpuStandinTest, AKilledRankIsRestartedIntoItsSlotAndServesOn) {
  std::vector<std::string> args = kTwoRanksOnOneGpu;
  args.insert(args.end(), {"--recover", "--kill-rank=1", "--at-step=4"});
  const RunResult run = RunScript(args);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    PASSED: 8/8 steps"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "kill -9 rank 1 (pid "))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output,
                                "step 4 served again and self-checked on "
                                "all 2 ranks"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "== OK: recovered in place"))
      << run.output;
  ExpectNothingLeft(run);
}

TEST(RunShOneGpuStandinTest, ByReplicaOnlyTheHitReplicaReFormsItsSessions) {
  const RunResult run =
      RunScript({"--backend=nccl", "--nodes=1", "--ranks-per-node=4", "--tp=1",
                 "--pp=2", "--ep=1", "--steps=8", "--recover",
                 "--recovery=domain", "--kill-rank=3", "--at-step=4"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(
      absl::StrContains(run.output, "self-check    PASSED: 16/16 steps"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output,
                                "step 4 served again and self-checked on "
                                "all 2 ranks of replica 1"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "== OK: recovered by replica"))
      << run.output;
  ExpectNothingLeft(run);
}

}  // namespace
}  // namespace rankd::testing
