// NCCL sessions through the C ABI against real daemons: c_nccl_rank
// (capi/testing/c_nccl_rank.c, C only, linked to librankd.so) on every rank
// of a one-node job, each on its local rank's device, passing its own
// device memory and CUDA stream.
//
// Two targets run this file: capi_nccl_standin_test on every CI run, with
// the CPU stand-in for the CUDA runtime and NCCL
// (//dataplane/nccl:libcuda_nccl_standin.so: two "GPUs" whose memory is host
// memory, the ranks' communicators meeting in a directory), and
// capi_nccl_gpu_test (tagged gpu_kit) against the real libraries, which
// skips with the reason when there is no CUDA device and runs a world of
// one rank on a single GPU (point-to-point cases then skip in the rank).
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dataplane/nccl/cuda_device.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"

namespace rankd::testing {
namespace {

class CApiNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto probe = dataplane::nccl::ProbeDevices();
    if (probe.device_count == 0) {
      const char* require = std::getenv("RANKD_REQUIRE_GPU");
      if (require != nullptr && std::string(require) == "1") {
        GTEST_FAIL() << "RANKD_REQUIRE_GPU=1 but no CUDA device: "
                     << probe.reason;
      }
      GTEST_SKIP() << "no CUDA device, nothing to run NCCL on: "
                   << probe.reason;
    }
    world_ = std::min(probe.device_count, 2);
    std::cout << "running a world of " << world_ << " on " << probe.device_count
              << " device(s)\n";
  }

  // Runs c_nccl_rank `scenario` on every rank of a one-node job; returns
  // each rank's log after checking it exited 0 and printed `marker`.
  std::vector<std::string> Run(const std::string& scenario,
                               const std::string& marker) {
    ClusterOptions options;
    options.job_id = absl::StrCat("capi-nccl-", scenario);
    options.nnodes = 1;
    options.nproc_per_node = static_cast<uint32_t>(world_);
    LocalCluster cluster(options);
    EXPECT_TRUE(cluster.Start().ok());
    std::vector<ChildProcess> ranks;
    for (int l = 0; l < world_; ++l) {
      // With the rank's own token (RANKD_RANK_TOKEN), as rankrun hands it.
      const std::map<std::string, std::string> env =
          cluster.RankEnv(0, static_cast<uint32_t>(l),
                          {{"RANKD_TARGET", cluster.socket_target(0)},
                           {"RANKD_JOB_ID", options.job_id},
                           {"RANKD_LOCAL_RANK", absl::StrCat(l)}});
      auto child = ChildProcess::Spawn(
          {Runfile("capi/c_nccl_rank"), scenario}, env,
          absl::StrCat(cluster.dir(), "/c_nccl_rank", l, ".log"));
      EXPECT_TRUE(child.ok()) << child.status();
      if (child.ok()) ranks.push_back(*std::move(child));
    }
    EXPECT_EQ(ranks.size(), static_cast<size_t>(world_));
    const std::vector<int> statuses = WaitAll(ranks, absl::Seconds(120));
    std::vector<std::string> logs;
    for (size_t r = 0; r < ranks.size(); ++r) {
      logs.push_back(ranks[r].ReadLog());
      EXPECT_EQ(ExitCode(statuses[r]), 0) << "rank " << r << ":\n" << logs[r];
      EXPECT_TRUE(absl::StrContains(
          logs[r], absl::StrCat("C NCCL RANK ", r, " ", marker)))
          << logs[r];
    }
    if (!logs.empty()) std::cout << "rank 0's log:\n" << logs[0];
    return logs;
  }

  int world_ = 0;
};

TEST_F(CApiNcclTest, EveryOperationOnTheCallersStreamGivesExactValues) {
  for (const std::string& log : Run("ops", "OK")) {
    // "capturing stream refused": a caller's stream inside a CUDA graph
    // capture is refused, FailedPrecondition, the capture left unbroken
    // and the session usable (issue 34, defect 4).
    for (const char* c : {"all_reduce_sum", "stream_order", "all_gather",
                          "all_to_all_v", "capturing stream refused"}) {
      EXPECT_TRUE(absl::StrContains(log, absl::StrCat("CASE ", c, " OK")))
          << c << "\n"
          << log;
    }
    if (world_ >= 2) {
      EXPECT_TRUE(absl::StrContains(log, "CASE send_receive OK")) << log;
      EXPECT_TRUE(absl::StrContains(log, "CASE batch_send_receive OK")) << log;
    }
    if (world_ == 2) {
      // A member's own refusal (a stream of another device) reaches its
      // peer, which refuses the all_to_all_v too.
      EXPECT_TRUE(absl::StrContains(log, "CASE told refusal OK")) << log;
    }
  }
}

TEST_F(CApiNcclTest, AMissedBoundedWaitQuarantinesAndPoisons) {
  for (const std::string& log : Run("quarantine", "quarantine OK")) {
    EXPECT_TRUE(absl::StrContains(log, "QuarantineUntilComplete applied"))
        << log;
  }
}

TEST_F(CApiNcclTest, AMissedBoundedWaitCancelsNatively) {
  for (const std::string& log : Run("native", "native OK")) {
    EXPECT_TRUE(absl::StrContains(log, "NativeCancel applied")) << log;
  }
}

// rankd_session_options.restrict_capabilities on an NCCL session.
TEST_F(CApiNcclTest, ANarrowedSessionRefusesNamingTheCapability) {
  for (const std::string& log : Run("narrowed", "narrowed OK")) {
    EXPECT_TRUE(absl::StrContains(
        log,
        "REFUSED send on a narrowed NCCL session: nccl backend: send "
        "needs capability 'point_to_point'"))
        << log;
  }
}

// rankd_session_poison, rankd_session_abort and rankd_session_poison_status
// (issue 33) on NCCL sessions: the same promises as on Gloo.
TEST_F(CApiNcclTest, PoisonRefusesWithTheCauseAndAbortFailsPendingWork) {
  for (const std::string& log : Run("poison", "poison OK")) {
    for (const char* c :
         {"CAUSE poison_status after poison", "CAUSE poison_status after abort",
          "REFUSED all_reduce_sum on a poisoned session: ",
          "REFUSED the held work after abort: "}) {
      EXPECT_TRUE(absl::StrContains(log, c)) << c << "\n" << log;
    }
  }
}

}  // namespace
}  // namespace rankd::testing
