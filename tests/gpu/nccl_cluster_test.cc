// The NCCL backend through real rankd daemons: a one-node LocalCluster
// (tests/harness) whose ranks are tests/gpu/nccl_worker processes, one per
// GPU (world size = number of GPUs, 1 works), each joining through the
// daemon, receiving NCCL unique ids through the daemon's key-value broker and
// checking its own results. Abort scenarios add one control-only rank (no
// GPU) that the test kills with SIGKILL, so that the daemon reports the job
// failed and every NCCL communicator must be aborted.
//
// The re-form case (InPlaceReformAfterALostRank; issue 38, in-place
// recovery) runs the daemon with --recovery=on and needs 2+ NCCL ranks: it
// kills the last NCCL rank itself, a replacement process joins its slot, and
// the survivors re-form their sessions (NcclSession::Reform) at epoch 2. It
// prints "RECOVERY_MS <ms>", loss to every rank's first all_reduce at epoch
// 2. It has run on the stand-in only so far, not yet on a GPU.
//
// The domain case (OneReplicaReformsAloneWhileTheOtherSums; issue 38, part
// 5) runs the daemon with --recovery=domain, dp 2 x tp 2, and needs 4 NCCL
// ranks (4+ GPUs, or the one-GPU mode below with 4+ ranks): it kills rank
// 3, and replica 1 re-forms alone while replica 0 sums on. It prints
// "RECOVERY_MS <ms>" too. It has run on the stand-in only so far
// (nccl_cluster_domain_standin_test), not yet on a GPU.
//
// The GPU kit's one-GPU mode (tests/gpu/run.sh, docs/nccl.md "One GPU,
// several ranks"): with $RANKD_KIT_RANKS_ON_ONE_GPU=N, N NCCL ranks share
// the first visible GPU, each process with CUDA_VISIBLE_DEVICES set to it
// and an NCCL_HOSTID of its own, so that NCCL takes them for ranks of
// separate hosts (its socket transport, over loopback) instead of refusing
// a duplicate GPU. A test setting, read by this test alone: rankd never
// sets NCCL_HOSTID.
//
// Skips (GTEST_SKIP with the reason) without a CUDA device. Run by
// tests/gpu/run.sh against the real libraries, and on every CI run as
// nccl_cluster_standin_test against the CPU stand-in
// (//dataplane/nccl:libcuda_nccl_standin.so, its ranks meeting across
// processes in $RANKD_STANDIN_CLIQUE_DIR).
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "dataplane/nccl/cuda_device.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.pb.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"

namespace rankd::testing {
namespace {

constexpr int kMaxGpus = 8;

struct Outcome {
  std::vector<std::string> logs;  // one per NCCL rank
  std::vector<int> statuses;
  std::string daemon_log;
};

class NcclClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto probe = dataplane::nccl::ProbeDevices();
    if (probe.device_count == 0) {
      const char* require = std::getenv("RANKD_REQUIRE_GPU");
      if (require != nullptr && std::string(require) == "1") {
        GTEST_FAIL() << "RANKD_REQUIRE_GPU=1 but no CUDA device: "
                     << probe.reason;
      }
      GTEST_SKIP() << "no CUDA device, nothing to run on: " << probe.reason;
    }
    gpus_ = std::min(probe.device_count, kMaxGpus);
    if (const char* n = std::getenv("RANKD_KIT_RANKS_ON_ONE_GPU");
        n != nullptr && *n != '\0') {
      int ranks = 0;
      ASSERT_TRUE(absl::SimpleAtoi(n, &ranks) && ranks >= 1 &&
                  ranks <= kMaxGpus)
          << "RANKD_KIT_RANKS_ON_ONE_GPU=" << n << ": want 1 to " << kMaxGpus;
      gpus_ = ranks;
      // The first GPU this process sees ("0" when nothing narrows them).
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      std::vector<std::string> gpus =
          absl::StrSplit(visible == nullptr ? "" : visible, ',');
      shared_gpu_ = gpus.empty() || gpus[0].empty() ? "0" : gpus[0];
    }
  }

  // Whether the NCCL ranks share one GPU (the kit's one-GPU mode).
  bool sharing_one_gpu() const { return !shared_gpu_.empty(); }

  // A job of `job_world` ranks on one node: ranks below gpus_ run
  // `scenario`, the others are control-only. When `marker` is set, waits
  // until every NCCL rank printed it, then kills the control-only ranks.
  // `one_gpu_each` and `without_host_ids`: as StartRank.
  Outcome Run(const std::string& scenario, uint32_t job_world,
              const std::vector<std::string>& extra = {},
              const std::string& marker = "", uint32_t tensor_parallel = 1,
              bool one_gpu_each = false, bool without_host_ids = false) {
    Outcome outcome;
    ClusterOptions options;
    options.job_id = absl::StrCat("gpu-", scenario);
    options.nnodes = 1;
    options.nproc_per_node = job_world;
    options.tensor_parallel = tensor_parallel;
    LocalCluster cluster(options);
    absl::Status started = cluster.Start();
    EXPECT_TRUE(started.ok()) << started;
    if (!started.ok()) return outcome;
    std::vector<ChildProcess> workers, controls;
    for (uint32_t l = 0; l < job_world; ++l) {
      const bool nccl = l < static_cast<uint32_t>(gpus_);
      auto child = StartRank(
          cluster, nccl ? scenario : "control_only", l, job_world,
          nccl ? extra : std::vector<std::string>{},
          absl::StrCat("rank", l, ".log"), one_gpu_each, without_host_ids);
      EXPECT_TRUE(child.ok()) << child.status();
      if (!child.ok()) return outcome;
      (nccl ? workers : controls).push_back(*std::move(child));
    }
    if (!marker.empty()) {
      const absl::Time give_up = absl::Now() + absl::Seconds(90);
      while (absl::Now() < give_up) {
        int seen = 0;
        for (auto& w : workers) {
          if (!LinesWithPrefix(w.ReadLog(), marker).empty()) ++seen;
        }
        if (seen == static_cast<int>(workers.size())) break;
        absl::SleepFor(absl::Milliseconds(20));
      }
      // Let the work (or init) really wait for the peer, then lose it.
      absl::SleepFor(absl::Milliseconds(700));
      for (auto& c : controls) c.Signal(SIGKILL);
    }
    outcome.statuses = WaitAll(workers, absl::Seconds(150));
    for (auto& w : workers) outcome.logs.push_back(w.ReadLog());
    for (auto& c : controls) c.Stop(absl::Seconds(1));
    outcome.daemon_log = cluster.daemon(0).ReadLog();
    return outcome;
  }

  // Starts local rank `l` of a one-node job of `job_world` ranks as an
  // nccl_worker running `scenario` (with `extra` flags), logging to
  // cluster.dir()/`log`. With `one_gpu_each`, an NCCL rank sees only GPU l
  // (CUDA_VISIBLE_DEVICES=l), as a launcher that gives each rank process
  // its own GPU sets it. When sharing one GPU, every NCCL rank sees that
  // GPU alone, with an NCCL_HOSTID of its own slot unless
  // `without_host_ids` (a replacement in the slot gets the same one).
  absl::StatusOr<ChildProcess> StartRank(LocalCluster& cluster,
                                         const std::string& scenario,
                                         uint32_t l, uint32_t job_world,
                                         const std::vector<std::string>& extra,
                                         const std::string& log,
                                         bool one_gpu_each = false,
                                         bool without_host_ids = false) {
    const bool nccl = scenario != "control_only";
    std::vector<std::string> argv = {
        Runfile("tests/gpu/nccl_worker"),
        absl::StrCat("--target=", cluster.socket_target(0)),
        absl::StrCat("--job_id=", cluster.options().job_id),
        absl::StrCat("--local_rank=", l),
        absl::StrCat("--world_size=", job_world),
        absl::StrCat("--scenario=", scenario),
    };
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::map<std::string, std::string> env = cluster.RankEnv(0, l);
    if (nccl && sharing_one_gpu()) {
      env["CUDA_VISIBLE_DEVICES"] = shared_gpu_;
      if (!without_host_ids) {
        env["NCCL_HOSTID"] = absl::StrCat("rankd-kit-", scenario, "-rank", l);
      }
      if (!one_gpu_each) argv.push_back("--device=0");
    } else if (nccl && one_gpu_each) {
      env["CUDA_VISIBLE_DEVICES"] = std::to_string(l);
    }
    return ChildProcess::Spawn(argv, env,
                               absl::StrCat(cluster.dir(), "/", log));
  }

  // Every NCCL rank exited 0, printed DONE, and no case failed.
  static void ExpectAllPassed(const Outcome& outcome, int min_cases) {
    ASSERT_FALSE(outcome.logs.empty());
    for (size_t r = 0; r < outcome.logs.size(); ++r) {
      const std::string& log = outcome.logs[r];
      const int st = outcome.statuses[r];
      const bool exited_ok = st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
      int passed = 0;
      for (const std::string& line : LinesWithPrefix(log, "CASE ")) {
        EXPECT_FALSE(absl::StrContains(line, " FAIL "))
            << "rank " << r << ": " << line;
        if (absl::EndsWith(line, " OK")) ++passed;
      }
      EXPECT_TRUE(exited_ok)
          << "rank " << r << " wait status " << st << "\n--- rank log:\n"
          << log << "\n--- daemon log:\n"
          << outcome.daemon_log;
      EXPECT_FALSE(LinesWithPrefix(log, "DONE").empty()) << log;
      EXPECT_GE(passed, min_cases) << "rank " << r << ":\n" << log;
    }
  }

  static void ExpectPromptAbort(const Outcome& outcome) {
    for (size_t r = 0; r < outcome.logs.size(); ++r) {
      auto lines = LinesWithPrefix(outcome.logs[r], "ABORTED_AFTER_MS ");
      ASSERT_EQ(lines.size(), 1u) << outcome.logs[r];
      int64_t ms = 0;
      ASSERT_TRUE(absl::SimpleAtoi(lines[0], &ms)) << lines[0];
      EXPECT_LT(ms, 15000) << "rank " << r;
    }
  }

  uint32_t gpus() const { return static_cast<uint32_t>(gpus_); }
  uint32_t tensor_parallel() const { return gpus_ % 2 == 0 ? 2 : 1; }

  int gpus_ = 0;
  std::string shared_gpu_;  // the GPU the kit's one-GPU mode shares, or ""
};

// Every rank's log, labelled, for failure messages.
std::string AllLogs(const std::vector<ChildProcess>& ranks) {
  std::string logs;
  for (size_t l = 0; l < ranks.size(); ++l) {
    absl::StrAppend(&logs, "--- rank ", l, ":\n", ranks[l].ReadLog());
  }
  return logs;
}

// Waits up to `patience` for every rank l's log to have a line starting
// with ready(l), polling; fails the test at once (a fatal failure) when a
// rank logged an error first. `missing`: the ranks without it at the end.
void AwaitReadyLines(const std::vector<ChildProcess>& ranks,
                     LocalCluster& cluster,
                     const std::function<const char*(uint32_t)>& ready,
                     absl::Duration patience, std::vector<uint32_t>* missing) {
  const absl::Time give_up = absl::Now() + patience;
  while (true) {
    missing->clear();
    for (uint32_t l = 0; l < ranks.size(); ++l) {
      const std::string log = ranks[l].ReadLog();
      ASSERT_TRUE(LinesWithPrefix(log, "ERROR ").empty() &&
                  !absl::StrContains(log, " FAIL "))
          << "rank " << l << " failed before the loss:\n"
          << AllLogs(ranks) << "--- daemon:\n"
          << cluster.daemon(0).ReadLog();
      if (LinesWithPrefix(log, ready(l)).empty()) missing->push_back(l);
    }
    if (missing->empty() || absl::Now() > give_up) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

TEST_F(NcclClusterTest, SessionCollectives) {
  Outcome outcome = Run("collectives", gpus(), {}, "", tensor_parallel());
  ExpectAllPassed(outcome, gpus() >= 2 ? 13 : 12);
}

TEST_F(NcclClusterTest, BackendOperations) {
  Outcome outcome = Run("backend", gpus(), {}, "", tensor_parallel());
  ExpectAllPassed(outcome, gpus() >= 2 ? 9 : 8);
}

TEST_F(NcclClusterTest, BoundedWaitQuarantinesUntilComplete) {
  ExpectAllPassed(Run("quarantine", gpus()), 1);
}

TEST_F(NcclClusterTest, BoundedWaitNativeCancelAborts) {
  ExpectAllPassed(Run("native_cancel", gpus()), 1);
}

// verify_agreement across rank processes: work whose members disagree is
// refused on every rank before the payload, and the session stays usable.
TEST_F(NcclClusterTest, VerifyAgreementRefusesDisagreeingWork) {
  ExpectAllPassed(Run("agreement", gpus()), 3);
}

// Each rank process sees one GPU of its own, as with CUDA_VISIBLE_DEVICES
// set per process by a launcher or one GPU per container: the default
// device is that GPU (device 0) whatever the local rank. It asked for
// device = local rank, which does not exist there (issue 34, defect 5).
TEST_F(NcclClusterTest, OneVisibleGpuPerProcessIsTheDefaultDevice) {
  Outcome outcome = Run("one_gpu_each", gpus(), {}, "", 1,
                        /*one_gpu_each=*/true);
  ExpectAllPassed(outcome, 2);
}

// What the one-GPU mode works around: ranks of one communicator on one GPU
// of one host are refused by NCCL ("Duplicate GPU detected"), and every
// rank's session says so instead of hanging. Only in the one-GPU mode.
TEST_F(NcclClusterTest, RanksSharingAGpuWithoutHostIdsAreRefused) {
  if (!sharing_one_gpu() || gpus() < 2) {
    GTEST_SKIP() << "only in the kit's one-GPU mode with 2+ ranks "
                    "(RANKD_KIT_RANKS_ON_ONE_GPU)";
  }
  Outcome outcome = Run("collectives", gpus(), {}, "", 1, false,
                        /*without_host_ids=*/true);
  ASSERT_EQ(outcome.logs.size(), gpus());
  for (size_t r = 0; r < outcome.logs.size(); ++r) {
    const std::string& log = outcome.logs[r];
    const int st = outcome.statuses[r];
    EXPECT_TRUE(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 3)
        << "rank " << r << " wait status " << st << "\n"
        << log;
    EXPECT_TRUE(absl::StrContains(log, "ERROR init: ") &&
                absl::StrContains(log, "Duplicate GPU"))
        << "rank " << r << ":\n"
        << log;
  }
}

TEST_F(NcclClusterTest, LostPeerAbortsRunningCollectives) {
  Outcome outcome = Run("abort_peer", gpus() + 1,
                        {absl::StrCat("--nccl_world=", gpus())}, "POSTED");
  ExpectAllPassed(outcome, 1);
  ExpectPromptAbort(outcome);
}

TEST_F(NcclClusterTest, LostPeerAbortsCommunicatorInit) {
  Outcome outcome =
      Run("init_abort", gpus() + 1, {absl::StrCat("--nccl_world=", gpus() + 1)},
          "INIT_STARTED");
  ExpectAllPassed(outcome, 1);
  ExpectPromptAbort(outcome);
}

// In-place recovery on NCCL (issue 38; docs/dataplane.md, "Re-forming after
// a loss"): the daemon runs with --recovery=on and N NCCL ranks sum at
// epoch 1; the test kills the last one with SIGKILL. The survivors' sessions
// are poisoned naming it; each re-forms with NcclSession::Reform (epoch 2,
// the same device, new communicators from new unique ids) while a
// replacement process joins the lost slot (a new incarnation) and opens its
// session at epoch 2; every rank sums again, exactly, and a device tensor
// each survivor allocated before the loss is bit-identical after it. Prints
// the recovery time, from the kill to the last rank's first all_reduce at
// epoch 2 (measured, never asserted).
TEST_F(NcclClusterTest, InPlaceReformAfterALostRank) {
  if (gpus() < 2) {
    GTEST_SKIP() << "needs 2+ NCCL ranks (2+ GPUs, or the kit's one-GPU mode "
                    "with RANKD_KIT_RANKS_ON_ONE_GPU=2+); this run has "
                 << gpus();
  }
  const uint32_t n = gpus();
  const uint32_t lost = n - 1;
  ClusterOptions options;
  options.job_id = "gpu-reform";
  options.nnodes = 1;
  options.nproc_per_node = n;
  options.extra_flags = {"--recovery=on", "--recovery_deadline_ms=60000"};
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks;
  for (uint32_t l = 0; l < n; ++l) {
    auto child =
        StartRank(cluster, "reform", l, n, {}, absl::StrCat("rank", l, ".log"));
    ASSERT_TRUE(child.ok()) << child.status();
    ranks.push_back(*std::move(child));
  }
  // Every rank summed at epoch 1 (so the victim's part is done), or one
  // gave up: then there is nothing to recover from.
  std::vector<uint32_t> missing;
  AwaitReadyLines(
      ranks, cluster, [](uint32_t) { return "SUMMED epoch=1"; },
      absl::Seconds(90), &missing);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(missing.empty()) << "ranks " << absl::StrJoin(missing, ",")
                               << " did not sum at epoch 1 within 90 s:\n"
                               << AllLogs(ranks);

  const absl::Time killed = absl::Now();
  ranks[lost].Signal(SIGKILL);
  std::optional<int> died = ranks[lost].Wait(absl::Seconds(10));
  ASSERT_TRUE(died.has_value() && WIFSIGNALED(*died)) << ranks[lost].ReadLog();
  // The replacement may join the slot once the daemon declared the rank
  // lost; before, its join would be refused (the slot taken).
  auto recovering = cluster.AwaitJob(
      0,
      [](const v1::JobStatus& j) {
        return j.state() == v1::JOB_STATE_RECOVERING;
      },
      absl::Seconds(30));
  ASSERT_TRUE(recovering.ok()) << recovering.status() << "\n" << AllLogs(ranks);
  auto replacement = StartRank(cluster, "reform", lost, n, {"--replacement"},
                               absl::StrCat("rank", lost, ".2.log"));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  ranks[lost] = *std::move(replacement);

  Outcome outcome;
  outcome.statuses = WaitAll(ranks, absl::Seconds(120));
  for (auto& r : ranks) outcome.logs.push_back(r.ReadLog());
  outcome.daemon_log = cluster.daemon(0).ReadLog();
  for (uint32_t l = 0; l < n; ++l) {
    // Survivors: epoch 1, poisoned, re-formed, epoch 2, weights, ids;
    // the replacement: opened at epoch 2, epoch 2.
    const size_t cases = l == lost ? 2 : 6;
    EXPECT_EQ(LinesWithPrefix(outcome.logs[l], "CASE ").size(), cases)
        << "rank " << l << ":\n"
        << outcome.logs[l];
  }
  ExpectAllPassed(outcome, 2);
  if (HasFailure()) return;

  // The recovery time: loss -> every rank's first all_reduce at epoch 2.
  auto latest = [&](const std::string& prefix, bool survivors_only) {
    int64_t last = 0;
    for (uint32_t l = 0; l < n; ++l) {
      if (survivors_only && l == lost) continue;
      for (const std::string& line : LinesWithPrefix(outcome.logs[l], prefix)) {
        int64_t us = 0;
        std::vector<std::string> words = absl::StrSplit(line, ' ');
        EXPECT_TRUE(absl::SimpleAtoi(words[0], &us)) << line;
        last = std::max(last, us);
      }
    }
    return absl::FromUnixMicros(last) - killed;
  };
  const absl::Duration detect = latest("POISONED unix_us=", true);
  const absl::Duration serving = latest("EPOCH2_ALL_REDUCE unix_us=", false);
  const std::string report = absl::StrCat(
      "RECOVERY_MS ", absl::ToInt64Milliseconds(serving), " (", n,
      " ranks; loss -> every rank's first all_reduce at epoch 2; the "
      "survivors saw the loss after ",
      absl::ToInt64Milliseconds(detect), " ms)");
  std::printf("%s\n", report.c_str());
  RecordProperty("recovery_ms", absl::ToInt64Milliseconds(serving));
  EXPECT_GT(serving, detect) << report;
}

// Recovery by data-parallel domain on NCCL (issue 38, part 5;
// docs/contract.md, "Data-parallel domains"; the GPU twin of
// tests/domain_session_test.cc): the daemon runs with --recovery=domain,
// dp 2 x tp 2 on 4 NCCL ranks, and every session holds only its replica's
// tensor group (the world and the data-parallel groups refused). Replica 1
// (ranks 2, 3) sums at epoch 1 and the test kills rank 3 with SIGKILL: the
// job stays READY with domain 1 RECOVERING, and replica 0 (ranks 0, 1) sums
// on while replica 1 has no rank 3 at all. Rank 2 re-forms its session
// alone (epoch 2, new communicators from new unique ids), a replacement
// process joins the lost slot, and replica 1 sums again exactly; replica 0
// was never poisoned. Prints the recovery time, from the kill to both of
// replica 1's ranks' first all_reduce at epoch 2 (measured, never
// asserted).
TEST_F(NcclClusterTest, OneReplicaReformsAloneWhileTheOtherSums) {
  constexpr uint32_t kRanks = 4, kLost = 3;
  if (gpus() < kRanks) {
    GTEST_SKIP() << "needs 4 NCCL ranks (4+ GPUs, or the kit's one-GPU mode "
                    "with RANKD_KIT_RANKS_ON_ONE_GPU=4+); this run has "
                 << gpus();
  }
  ClusterOptions options;
  options.job_id = "gpu-domain";
  options.nnodes = 1;
  options.nproc_per_node = kRanks;
  options.tensor_parallel = 2;
  options.extra_flags = {"--recovery=domain", "--recovery_deadline_ms=60000"};
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<ChildProcess> ranks;
  for (uint32_t l = 0; l < kRanks; ++l) {
    auto child = StartRank(cluster, "domain_reform", l, kRanks, {},
                           absl::StrCat("rank", l, ".log"));
    ASSERT_TRUE(child.ok()) << child.status();
    ranks.push_back(*std::move(child));
  }
  auto sums_of = [&ranks](uint32_t l) {
    return LinesWithPrefix(ranks[l].ReadLog(), "TENSOR_SUM ").size();
  };
  // Replica 0 serves and replica 1 summed at epoch 1 (so rank 3's part is
  // done), or one gave up: then there is nothing to recover from.
  std::vector<uint32_t> missing;
  AwaitReadyLines(
      ranks, cluster,
      [](uint32_t l) { return l < 2 ? "TENSOR_SUM " : "SUMMED epoch=1"; },
      absl::Seconds(90), &missing);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(missing.empty())
      << "ranks " << absl::StrJoin(missing, ",")
      << " did not sum within 90 s (replica 0 on its tensor group, replica "
         "1 at epoch 1):\n"
      << AllLogs(ranks);

  const absl::Time killed = absl::Now();
  ranks[kLost].Signal(SIGKILL);
  std::optional<int> died = ranks[kLost].Wait(absl::Seconds(10));
  ASSERT_TRUE(died.has_value() && WIFSIGNALED(*died)) << ranks[kLost].ReadLog();
  // Only domain 1 recovers: the job stays READY, domain 0 serving.
  auto domain_1_recovering = [](const v1::JobStatus& j) {
    return j.serving_domains() == 1 && j.domains_size() == 2 &&
           j.domains(1).state() == v1::DOMAIN_STATE_RECOVERING;
  };
  auto recovering = cluster.AwaitJob(0, domain_1_recovering, absl::Seconds(30));
  ASSERT_TRUE(recovering.ok()) << recovering.status() << "\n" << AllLogs(ranks);
  EXPECT_EQ(recovering->state(), v1::JOB_STATE_READY);
  // Replica 0 sums while replica 1 has no rank 3 (the replacement is not
  // started yet, so domain 1 cannot serve again meanwhile).
  const size_t before[2] = {sums_of(0), sums_of(1)};
  const absl::Time sums_due = absl::Now() + absl::Seconds(20);
  while ((sums_of(0) < before[0] + 3 || sums_of(1) < before[1] + 3) &&
         absl::Now() < sums_due) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const size_t while_recovering =
      std::min(sums_of(0) - before[0], sums_of(1) - before[1]);
  EXPECT_GE(while_recovering, 3u)
      << "replica 0 stopped summing while replica 1 recovered:\n"
      << AllLogs(ranks);
  auto still = cluster.AwaitJob(0, domain_1_recovering, absl::Seconds(1));
  EXPECT_TRUE(still.ok()) << still.status();

  auto replacement =
      StartRank(cluster, "domain_reform", kLost, kRanks, {"--replacement"},
                absl::StrCat("rank", kLost, ".2.log"));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  ranks[kLost] = *std::move(replacement);

  Outcome outcome;
  outcome.statuses = WaitAll(ranks, absl::Seconds(120));
  for (auto& r : ranks) outcome.logs.push_back(r.ReadLog());
  outcome.daemon_log = cluster.daemon(0).ReadLog();
  // Replica 0: held only its domain, served throughout, done; rank 2:
  // held, epoch 1, poisoned, re-formed alone, epoch 2, done; the
  // replacement: opened at epoch 2, held, epoch 2, done.
  const size_t cases[kRanks] = {3, 3, 6, 4};
  for (uint32_t l = 0; l < kRanks; ++l) {
    EXPECT_EQ(LinesWithPrefix(outcome.logs[l], "CASE ").size(), cases[l])
        << "rank " << l << ":\n"
        << outcome.logs[l];
  }
  ExpectAllPassed(outcome, 3);
  auto serving = cluster.AwaitJob(
      0, [](const v1::JobStatus& j) { return j.serving_domains() == 2; },
      absl::Seconds(10));
  EXPECT_TRUE(serving.ok()) << serving.status();
  if (HasFailure()) return;

  // The recovery time: loss -> replica 1's first all_reduce at epoch 2.
  int64_t last_us = 0;
  for (uint32_t l = 2; l < kRanks; ++l) {
    for (const std::string& line :
         LinesWithPrefix(outcome.logs[l], "EPOCH2_ALL_REDUCE unix_us=")) {
      int64_t us = 0;
      std::vector<std::string> words = absl::StrSplit(line, ' ');
      EXPECT_TRUE(absl::SimpleAtoi(words[0], &us)) << line;
      last_us = std::max(last_us, us);
    }
  }
  const int64_t ms =
      absl::ToInt64Milliseconds(absl::FromUnixMicros(last_us) - killed);
  const std::string report = absl::StrCat(
      "RECOVERY_MS ", ms,
      " (replica 1 of dp 2 x tp 2; loss -> both its ranks' first all_reduce "
      "at epoch 2; replica 0 summed on, at least ",
      while_recovering, " times each while replica 1 was RECOVERING)");
  std::printf("%s\n", report.c_str());
  RecordProperty("recovery_ms", ms);
  EXPECT_GT(ms, 0) << report;
}

}  // namespace
}  // namespace rankd::testing
