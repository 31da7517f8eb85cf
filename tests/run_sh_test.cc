// The README's first command, tools/run.sh, at a small size with the
// binaries this test depends on (RANKD_BIN_DIR: no install, no build):
// a normal run whose self-check passes, the failure drill (every survivor
// names the killed rank), a run whose self-check must fail loudly, the
// network-namespace mode (root only), and clear refusals. After every run no
// process that mentions the run's folder and no namespace may be left. The
// drills with in-place recovery are //tests:run_sh_recover_test.
#include "tests/harness/run_sh.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rankd::testing {
namespace {

TEST(RunShTest, ServesAndPassesTheSelfCheck) {
  const RunResult run =
      RunScript({"--nodes=2", "--ranks-per-node=4", "--steps=6"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "tp2 pp2 ep2 dp1")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    PASSED: 6/6 steps"))
      << run.output;
  for (const char* kind : {"all_gather_words", "all_reduce_sum", "all_to_all_v",
                           "send/receive", "all_gather"}) {
    EXPECT_TRUE(absl::StrContains(run.output, absl::StrCat("  ", kind, " ")))
        << kind << "\n"
        << run.output;
  }
  EXPECT_TRUE(absl::StrContains(run.output, "PROGRESS step 6/6")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "ranks 8/8 up")) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "no process left behind"))
      << run.output;
  ExpectNothingLeft(run);
}

TEST(RunShTest, FailureDrillNamesTheKilledRankOnEverySurvivor) {
  const RunResult run =
      RunScript({"--nodes=2", "--ranks-per-node=2", "--tp=1", "--pp=2",
                 "--ep=2", "--steps=8", "--kill-rank=3", "--at-step=4"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "kill -9 rank 3")) << run.output;
  for (int r : {0, 1, 2}) {
    EXPECT_TRUE(absl::StrContains(
        run.output, absl::StrCat("rank ", r, ": detected the loss of rank 3 ")))
        << "rank " << r << "\n"
        << run.output;
  }
  EXPECT_TRUE(absl::StrContains(run.output,
                                "all 3 surviving ranks reported "
                                "rank 3 lost"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "no process left behind"))
      << run.output;
  ExpectNothingLeft(run);
}

TEST(RunShTest, CorruptedOutputsFailTheSelfCheckLoudly) {
  const RunResult run =
      RunScript({"--nodes=2", "--ranks-per-node=2", "--tp=2", "--pp=1",
                 "--ep=2", "--steps=6", "--", "--inject_error_at_step=3"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output,
                                "SELF-CHECK FAILED self-check "
                                "failed at step 3"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    FAILED"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "== FAILED")) << run.output;
  ExpectNothingLeft(run);
  // The failed run keeps its logs for a person to read; remove them here.
  const std::string dir = RunDir(run.output);
  if (!dir.empty()) std::system(absl::StrCat("rm -rf ", dir).c_str());
}

bool CanUseNetworkNamespaces() {
  if (geteuid() != 0) return false;
  const std::string name = absl::StrCat("rankd-probe-", getpid());
  if (std::system(
          absl::StrCat("ip netns add ", name, " >/dev/null 2>&1").c_str()) !=
      0) {
    return false;
  }
  std::system(absl::StrCat("ip netns del ", name).c_str());
  return true;
}

TEST(RunShTest, EachNodeInItsOwnNetworkNamespace) {
  if (!CanUseNetworkNamespaces()) {
    GTEST_SKIP() << "needs root and ip netns (iproute2)";
  }
  const RunResult run = RunScript(
      {"--hosts=netns", "--nodes=2", "--ranks-per-node=2", "--steps=4"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "self-check    PASSED: 4/4 steps"))
      << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "network namespaces removed"))
      << run.output;
  ExpectNothingLeft(run);
  // No namespace of this run is left (names start with rankd-<tag>-).
  const size_t at = run.output.find("== hosts: rankd-");
  ASSERT_NE(at, std::string::npos) << run.output;
  const std::string tag = run.output.substr(at + 10, 10);  // "rankd-XXXX"
  FILE* list = popen("ip netns list", "r");
  ASSERT_NE(list, nullptr);
  char line[256];
  while (fgets(line, sizeof(line), list) != nullptr) {
    EXPECT_FALSE(absl::StartsWith(line, tag)) << "left behind: " << line;
  }
  pclose(list);
}

TEST(RunShTest, RefusesClearly) {
  RunResult run = RunScript({"--nodes=2", "--ranks-per-node=2", "--tp=3"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "--tp=3 does not divide"))
      << run.output;

  run = RunScript({"--kill-rank=9", "--nodes=2", "--ranks-per-node=2"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "must be a rank in 0..3"))
      << run.output;

  if (access("/dev/nvidiactl", F_OK) != 0) {
    run = RunScript({"--backend=nccl", "--nodes=1", "--ranks-per-node=2"});
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(
        absl::StrContains(run.output, "--backend=nccl needs a CUDA GPU"))
        << run.output;
  }
}

}  // namespace
}  // namespace rankd::testing
