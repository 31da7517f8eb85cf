// The GPU run kit, checked on a machine without a GPU: it is assembled
// from this build's binaries by the same script make_kit.sh uses
// (tests/gpu/assemble_kit.sh), then
//   - it fits its size limit, and the limit is enforced;
//   - every binary and library in it resolves every dependency inside the
//     kit, except glibc, libstdc++, libgcc and the host's CUDA and NCCL;
//   - in a mount namespace where the system library folder holds only the
//     C and C++ runtime and every CUDA/NCCL folder is hidden
//     (tests/gpu/kit_sandbox.sh), rankd starts and answers health, the
//     unit tests pass, every GPU test binary skips saying "no GPU", and
//     the binaries find a CUDA runtime and NCCL installed as Python wheels
//     (where this machine has the real libraries to stand in for them);
//   - the kit's runner exits non-zero saying no GPU can be used, and with
//     --without-gpu runs every binary and reports every case (the CPU
//     twins against the kit's own stand-in pass).
// The sandbox needs root; without it those cases skip, saying so.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/harness/process.h"

namespace rankd::testing {
namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

// Runs argv to completion (at most `timeout`), output captured.
CommandResult RunToEnd(const std::vector<std::string>& argv,
                       const std::map<std::string, std::string>& env = {},
                       absl::Duration timeout = absl::Seconds(120)) {
  static int counter = 0;
  const std::string log =
      absl::StrCat(TempDir(), "/kit_test_run", ++counter, ".log");
  CommandResult run;
  auto child = ChildProcess::Spawn(argv, env, log);
  if (!child.ok()) {
    run.output = std::string(child.status().message());
    return run;
  }
  std::optional<int> status = child->Wait(timeout);
  if (!status.has_value()) {
    child->Stop(absl::Seconds(2));
    run.output = absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                              "\n", child->ReadLog());
    return run;
  }
  run.exit_code = ExitCode(*status);
  run.output = child->ReadLog();
  return run;
}

uint64_t TreeBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

bool IsElf(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 0x7f && magic[1] == 'E' &&
         magic[2] == 'L' && magic[3] == 'F';
}

class KitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    kit_ = new std::string(absl::StrCat(TempDir(), "/gpu-kit"));
    assembly_ = new CommandResult(
        RunToEnd({"/bin/bash", Runfile("tests/gpu/assemble_kit.sh"), BinRoot(),
                  *kit_, BinRoot()}));
  }
  static void TearDownTestSuite() {
    delete kit_;
    delete assembly_;
  }
  // The runfiles root mirrors bazel-bin for the kit's binaries.
  static std::string BinRoot() { return Runfile(""); }

  void SetUp() override {
    ASSERT_EQ(assembly_->exit_code, 0) << assembly_->output;
  }

  // Skips unless the sandbox can be made here (root, unshare).
  void RequireSandbox() {
    if (::geteuid() != 0)
      GTEST_SKIP() << "the kit sandbox needs root (unshare --mount)";
    CommandResult probe =
        RunToEnd({Runfile("tests/gpu/kit_sandbox.sh"), "/bin/true"});
    if (probe.exit_code != 0) {
      GTEST_SKIP() << "cannot make a mount namespace here: " << probe.output;
    }
  }

  CommandResult InSandbox(std::vector<std::string> argv,
                          const std::map<std::string, std::string>& env = {},
                          absl::Duration timeout = absl::Seconds(120)) {
    argv.insert(argv.begin(), Runfile("tests/gpu/kit_sandbox.sh"));
    return RunToEnd(argv, env, timeout);
  }

  std::string Bin(const std::string& path) {
    return absl::StrCat(*kit_, "/bin/", path);
  }

  static std::string* kit_;
  static CommandResult* assembly_;
};
std::string* KitTest::kit_ = nullptr;
CommandResult* KitTest::assembly_ = nullptr;

TEST_F(KitTest, FitsItsSizeLimitAndTheLimitIsEnforced) {
  // 56 MiB, the size of a kit the device accepts (tests/gpu/kit_contents.sh),
  // which make_kit.sh enforces on the -c opt kit it sends. This test's kit is
  // built as the test is (never sent to a device), so .bazelrc sets a larger
  // KIT_MAX_BYTES: unoptimized and instrumented binaries are larger.
  uint64_t limit = 56ull << 20;
  if (const char* env = std::getenv("KIT_MAX_BYTES")) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &limit)) << env;
  }
  EXPECT_TRUE(absl::StrContains(assembly_->output,
                                absl::StrCat("limit ", limit >> 20, " MiB")))
      << assembly_->output;
  EXPECT_LE(TreeBytes(*kit_), limit);
  const std::string small = absl::StrCat(TempDir(), "/too-small-kit");
  CommandResult over =
      RunToEnd({"/bin/bash", Runfile("tests/gpu/assemble_kit.sh"), BinRoot(),
                small, BinRoot()},
               {{"KIT_MAX_BYTES", "1048576"}});
  EXPECT_NE(over.exit_code, 0) << over.output;
  EXPECT_TRUE(absl::StrContains(over.output, "over the 1048576-byte limit"))
      << over.output;
}

TEST_F(KitTest, HoldsEveryBinaryAndTheRunners) {
  for (const char* b :
       {"daemon/rankd", "client/rankctl", "examples/serving",
        "dataplane/nccl/nccl_types_test",
        "dataplane/nccl/unique_id_broker_test",
        "dataplane/nccl/native_library_test",
        "dataplane/nccl/nccl_fail_closed_test", "dataplane/nccl/nccl_gpu_test",
        "tests/gpu/nccl_cluster_test", "tests/gpu/nccl_worker",
        "capi/librankd.so", "capi/c_nccl_rank", "capi/capi_nccl_gpu_test",
        "dataplane/conformance/nccl_conformance_gpu_test"}) {
    EXPECT_EQ(::access(Bin(b).c_str(), X_OK), 0) << b;
  }
  for (const char* f :
       {"run.sh", "tools/run.sh", "kit_contents.sh", "KIT_INFO",
        "python/rankd/__init__.py", "python/rankd/session.py",
        "python/tests/torch_nccl.py", "python/tests/torch_dist_nccl.py",
        "python/rankd/torch.py", "python/tests/rank_program.py",
        "python/tests/local_job.py"}) {
    EXPECT_TRUE(fs::exists(absl::StrCat(*kit_, "/", f))) << f;
  }
}

// Every dependency of every ELF file resolves inside the kit or is one the
// host provides (the same list the assembly uses).
TEST_F(KitTest, NeedsNothingButItselfAndTheHostRuntime) {
  const std::string lib_dir =
      fs::canonical(absl::StrCat(*kit_, "/lib")).string();
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(*kit_)) {
    if (!entry.is_regular_file() || !IsElf(entry.path())) continue;
    ++checked;
    CommandResult ldd = RunToEnd({"/usr/bin/ldd", entry.path().string()},
                                 {{"LD_LIBRARY_PATH", ""}});
    ASSERT_EQ(ldd.exit_code, 0) << entry.path() << ": " << ldd.output;
    for (absl::string_view line : absl::StrSplit(ldd.output, '\n')) {
      std::vector<std::string> f =
          absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (f.size() < 3 || f[1] != "=>") continue;
      const std::string& name = f[0];
      EXPECT_NE(f[2], "not")
          << entry.path() << " needs " << name << ", which is not found";
      const bool host = absl::StartsWith(name, "libc.so") ||
                        absl::StartsWith(name, "libm.so") ||
                        absl::StartsWith(name, "libstdc++.so") ||
                        absl::StartsWith(name, "libgcc_s.so") ||
                        absl::StartsWith(name, "libpthread.so") ||
                        absl::StartsWith(name, "libdl.so") ||
                        absl::StartsWith(name, "librt.so") ||
                        absl::StartsWith(name, "linux-vdso.so");
      if (!host && f[2] != "not") {
        const std::string from = fs::weakly_canonical(f[2]).string();
        EXPECT_TRUE(absl::StartsWith(from, lib_dir + "/"))
            << entry.path() << " takes " << name << " from " << from
            << ", outside the kit";
      }
      EXPECT_FALSE(absl::StartsWith(name, "libcudart.so") ||
                   absl::StartsWith(name, "libnccl.so"))
          << entry.path() << " links " << name
          << " (CUDA and NCCL are opened at run time)";
    }
  }
  EXPECT_GE(checked, 10);
}

TEST_F(KitTest, RankdStartsAndAnswersHealthWithOnlyTheKit) {
  RequireSandbox();
  const int port = FreePort();
  const std::string dir = MakeTempDir("rankd-kit");
  const std::string target = absl::StrCat("127.0.0.1:", port);
  // The kit's rankctl issues the job's credentials, as tools/run.sh does.
  CommandResult creds = InSandbox(
      {Bin("client/rankctl"), "credentials", "create", dir + "/credentials"});
  ASSERT_EQ(creds.exit_code, 0) << creds.output;
  auto rankd = ChildProcess::Spawn(
      {Runfile("tests/gpu/kit_sandbox.sh"), Bin("daemon/rankd"), "--job_id=kit",
       "--nnodes=1", "--node_index=0", "--nproc_per_node=1",
       absl::StrCat("--listen=", target),
       absl::StrCat("--socket=", dir, "/node0.sock"),
       absl::StrCat("--credentials_dir=", dir, "/credentials")},
      {}, absl::StrCat(dir, "/rankd.log"));
  ASSERT_TRUE(rankd.ok()) << rankd.status();
  CommandResult health;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  do {
    health = InSandbox(
        {Bin("client/rankctl"), absl::StrCat("--target=", target), "health"});
    if (health.exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(200));
  } while (absl::Now() < deadline && rankd->running());
  EXPECT_EQ(health.exit_code, 0) << health.output << "\n" << rankd->ReadLog();
  EXPECT_TRUE(absl::StrContains(health.output, "SERVING")) << health.output;
  EXPECT_EQ(ExitCode(rankd->Stop()), 0) << rankd->ReadLog();
  fs::remove_all(dir);
}

TEST_F(KitTest, UnitTestsPassAndGpuTestsSkipWithoutAGpu) {
  RequireSandbox();
  for (const char* unit : {"dataplane/nccl/nccl_types_test",
                           "dataplane/nccl/unique_id_broker_test",
                           "dataplane/nccl/native_library_test",
                           "dataplane/nccl/nccl_fail_closed_test"}) {
    CommandResult r = InSandbox({Bin(unit)});
    EXPECT_EQ(r.exit_code, 0) << unit << ":\n" << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "[  PASSED  ]")) << unit;
  }
  for (const char* gpu :
       {"dataplane/nccl/nccl_gpu_test", "tests/gpu/nccl_cluster_test"}) {
    CommandResult r =
        InSandbox({Bin(gpu)}, {{"RANKD_BIN_DIR", absl::StrCat(*kit_, "/bin")}});
    EXPECT_EQ(r.exit_code, 0) << gpu << ":\n" << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "[  SKIPPED ]")) << gpu << ":\n"
                                                             << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "no GPU")) << gpu << ":\n"
                                                       << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "[  FAILED  ]")) << r.output;
  }
}

// The path of `soname` in the loader cache, or "".
std::string CachedLibrary(const std::string& soname) {
  CommandResult r = RunToEnd({"/sbin/ldconfig", "-p"});
  for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
    std::vector<std::string> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (!f.empty() && f[0] == soname && f.size() >= 3) return f.back();
  }
  return "";
}

// A host whose CUDA runtime and NCCL come as PyTorch's wheels: with every
// other CUDA folder hidden, the kit's binaries find them in the wheel
// folders of a Python environment. Needs the real libraries on this
// machine (linked, not copied, into a fake environment).
TEST_F(KitTest, FindsTheHostLibrariesInPythonWheelFolders) {
  RequireSandbox();
  const std::string cudart = CachedLibrary("libcudart.so.13");
  const std::string nccl = CachedLibrary("libnccl.so.2");
  std::error_code missing;
  if (cudart.empty() || nccl.empty() || !fs::exists(cudart, missing) ||
      !fs::exists(nccl, missing)) {
    GTEST_SKIP() << "this machine has no libcudart.so.13 and libnccl.so.2 "
                    "to stand in for the wheels";
  }
  const std::string venv = absl::StrCat(TempDir(), "/venv");
  const std::string site = absl::StrCat(venv, "/lib/python3.12/site-packages");
  const std::string wheel_cudart =
      absl::StrCat(site, "/nvidia/cu13/lib/libcudart.so.13");
  const std::string wheel_nccl =
      absl::StrCat(site, "/nvidia/nccl/lib/libnccl.so.2");
  std::error_code error;
  for (const auto& [from, to] :
       {std::pair{cudart, wheel_cudart}, std::pair{nccl, wheel_nccl}}) {
    fs::create_directories(fs::path(to).parent_path());
    fs::remove(to, error);
    fs::create_hard_link(fs::canonical(from, error), to, error);
    if (error)
      GTEST_SKIP() << "cannot link " << from << ": " << error.message();
  }
  CommandResult probe =
      InSandbox({Bin("examples/serving"), "--backend=nccl", "--probe_backend"},
                {{"VIRTUAL_ENV", venv}, {"LD_LIBRARY_PATH", ""}});
  EXPECT_TRUE(absl::StrContains(probe.output, wheel_cudart)) << probe.output;
  EXPECT_TRUE(absl::StrContains(probe.output, wheel_nccl)) << probe.output;
  EXPECT_TRUE(absl::StrContains(probe.output, "NCCL 2.")) << probe.output;
  // No GPU here: refused, with the reason.
  EXPECT_EQ(probe.exit_code, 2) << probe.output;
  EXPECT_TRUE(absl::StrContains(probe.output, "no GPU")) << probe.output;
  fs::remove_all(venv, error);
}

TEST_F(KitTest, TheRunnerFailsSayingNoGpuCanBeUsed) {
  const std::string out = absl::StrCat(TempDir(), "/gpu-out");
  CommandResult r = RunToEnd({"/bin/bash", absl::StrCat(*kit_, "/run.sh"),
                              absl::StrCat("--out=", out)},
                             {{"TEST_SRCDIR", ""}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "no GPU")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "0 passed, 1 failed, 0 skipped"))
      << r.output;
  EXPECT_TRUE(fs::exists(absl::StrCat(out, "/run.log")));
  std::ifstream summary(absl::StrCat(out, "/summary.txt"));
  std::stringstream text;
  text << summary.rdbuf();
  EXPECT_TRUE(absl::StartsWith(text.str(), "FAILED")) << text.str();
}

// The runner's own logic (running each binary, reading every case's
// outcome and skip reason, the summary), checked where there is no GPU.
TEST_F(KitTest, TheRunnerReportsEveryCaseWhenAskedToGoOnWithoutAGpu) {
  const std::string out = absl::StrCat(TempDir(), "/gpu-out-without-gpu");
  CommandResult r = RunToEnd({"/bin/bash", absl::StrCat(*kit_, "/run.sh"),
                              "--without-gpu", absl::StrCat("--out=", out)},
                             {{"TEST_SRCDIR", ""}}, absl::Seconds(240));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream file(absl::StrCat(out, "/summary.txt"));
  std::stringstream text;
  text << file.rdbuf();
  const std::string summary = text.str();
  EXPECT_TRUE(absl::StrContains(summary,
                                "PASSED   "
                                "nccl_types_test:NcclTypesTest."
                                "DefaultDeviceFollowsTheVisibleDeviceCount"))
      << summary;
  EXPECT_TRUE(absl::StrContains(
      summary,
      "PASSED   nccl_cluster_standin_test:NcclClusterTest.SessionCollectives"))
      << summary;
  EXPECT_TRUE(absl::StrContains(
      summary, "PASSED   nccl_standin_test:NcclGpuTest.CudaHandles"))
      << summary;
  EXPECT_TRUE(absl::StrContains(
      summary, "SKIPPED  nccl_gpu_test:NcclGpuTest.CudaHandles"))
      << summary;
  EXPECT_TRUE(absl::StrContains(summary, "needs 1 CUDA device(s)")) << summary;
  EXPECT_TRUE(
      absl::StrContains(summary,
                        "PASSED   capi_nccl_standin_test:CApiNcclTest."
                        "EveryOperationOnTheCallersStreamGivesExactValues"))
      << summary;
  EXPECT_TRUE(absl::StrContains(
      summary,
      "SKIPPED  capi_nccl_gpu_test:CApiNcclTest."
      "EveryOperationOnTheCallersStreamGivesExactValues  (no CUDA device"))
      << summary;
  // No GPU here: torch (if this python3 has it) has no CUDA device.
  EXPECT_TRUE(absl::StrContains(summary, "SKIPPED  python_torch_nccl  ("))
      << summary;
  EXPECT_TRUE(absl::StrContains(summary, "SKIPPED  python_torch_dist_nccl  ("))
      << summary;
  EXPECT_TRUE(absl::StrContains(summary, "SKIPPED  serving_example:nccl"))
      << summary;
  // The one-GPU mode's plumbing, on one stand-in GPU: two rank processes
  // with their own NCCL_HOSTID, NCCL's refusal without them, and a lost
  // rank replaced with the survivors' sessions re-formed.
  EXPECT_TRUE(absl::StrContains(
      summary,
      "PASSED   nccl_cluster_one_gpu_2_ranks_test:NcclClusterTest."
      "SessionCollectives"))
      << summary;
  EXPECT_TRUE(absl::StrContains(
      summary,
      "PASSED   nccl_cluster_one_gpu_2_ranks_test:NcclClusterTest."
      "RanksSharingAGpuWithoutHostIdsAreRefused"))
      << summary;
  // The NCCL re-form case (issue 38) in the mode the kit runs it in, its
  // recovery time on its verdict line.
  EXPECT_TRUE(absl::StrContains(
      summary,
      "PASSED   nccl_cluster_one_gpu_2_ranks_test:NcclClusterTest."
      "InPlaceReformAfterALostRank  (RECOVERY_MS "))
      << summary;
  // The domain case needs 4 NCCL ranks: with the twin's 2 stand-in GPUs it
  // skips, and the summary says why (CI runs it with 4:
  // nccl_cluster_domain_standin_test).
  EXPECT_TRUE(absl::StrContains(
      summary,
      "SKIPPED  nccl_cluster_standin_test:NcclClusterTest."
      "OneReplicaReformsAloneWhileTheOtherSums  (needs 4 NCCL ranks"))
      << summary;
  EXPECT_TRUE(absl::StrContains(r.output, "time limits sum to")) << r.output;
  // Everything comes back in three files: the log, the summary and one
  // archive of the tests' own logs.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(out)) {
    files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(absl::StrJoin(files, " "), "logs.tar.gz run.log summary.txt");
  EXPECT_FALSE(absl::StrContains(summary, "FAILED")) << summary;
  // The closing line counts what the summary lists.
  int passed = 0, skipped = 0;
  for (absl::string_view line : absl::StrSplit(summary, '\n')) {
    if (absl::StartsWith(line, "PASSED")) ++passed;
    if (absl::StartsWith(line, "SKIPPED")) ++skipped;
  }
  EXPECT_GE(passed, 20);
  EXPECT_TRUE(absl::StrContains(
      r.output,
      absl::StrCat(passed, " passed, 0 failed, ", skipped, " skipped")))
      << r.output;
}

}  // namespace
}  // namespace rankd::testing
