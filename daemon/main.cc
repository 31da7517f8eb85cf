// rankd: the per-node daemon of a rankd job. See docs/operations.md for the
// flags, and daemon/daemon.h for what it runs.
#include <signal.h>

#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/command_help.h"
#include "common/exit_codes.h"
#include "common/lock_order_checks.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/descriptor_limit.h"
#include "daemon/flags.h"
#include "daemon/log.h"

int main(int argc, char** argv) {
  // Block the shutdown signals in every thread; main waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Abseil's lock-order checker: about 4% of a busy coordinator's CPU.
  rankd::UseReleaseLockOrderChecks();

  constexpr absl::string_view kUsage =
      "rankd: per-node control-plane daemon of a distributed serving job.\n"
      "Usage: rankd [flags]    (every flag also reads the RANKD_* variable "
      "its help names)\n"
      "Example: rankd --job_id=demo --nnodes=2 --node_index=0 "
      "--nproc_per_node=4 --listen=0.0.0.0:7421 "
      "--socket=/run/rankd/rankd.sock\n"
      "See docs/operations.md for the configuration and its environment.";
  if (rankd::HandleHelpOrVersion(argc, argv, "rankd", kUsage,
                                 {"daemon/flags.cc"})) {
    return 0;
  }
  absl::SetProgramUsageMessage(kUsage);
  absl::ParseCommandLine(argc, argv);
  auto config =
      rankd::ResolveConfig(rankd::RawConfigFromFlags(), rankd::ProcessEnv());
  if (!config.ok()) {
    std::fprintf(stderr, "rankd: configuration error: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  rankd::SetLogPrefix(absl::StrCat("rankd[", config->job_id, " node ",
                                   config->node_index, "]"));
  // Open files for what the limits let the daemon hold: the soft limit
  // raised, or --max_tcp_connections lowered to what the hard limit allows.
  if (auto lowered = rankd::ApplyDescriptorLimit(&*config); !lowered.ok()) {
    rankd::Log(absl::StrCat("cannot start: ", lowered.status().message()));
    return 1;
  } else if (!lowered->empty()) {
    rankd::Log(*lowered);
  }
  rankd::Log(rankd::DescribeConfig(*config));
  auto daemon = rankd::Daemon::Start(*config);
  if (!daemon.ok()) {
    rankd::Log(absl::StrCat("cannot start: ", daemon.status().ToString()));
    return 1;
  }
  rankd::Log(absl::StrCat(
      "serving on port ", (*daemon)->tcp_port(),
      config->socket_path.empty() ? "" : " and unix:" + config->socket_path,
      config->is_coordinator ? " (coordinator)" : ""));

  // Wait for SIGTERM/SIGINT, or for registration to fail.
  bool registration_checked = false;
  while (true) {
    timespec tick{0, 100 * 1000 * 1000};
    int signal = sigtimedwait(&signals, nullptr, &tick);
    if (signal == SIGTERM || signal == SIGINT) {
      (*daemon)->Shutdown(signal == SIGTERM ? "SIGTERM" : "SIGINT",
                          absl::Seconds(5));
      rankd::Log("stopped");
      return 0;
    }
    if (std::string fenced = (*daemon)->fenced(); !fenced.empty()) {
      rankd::Log(absl::StrCat("fenced by the coordinator, ending (exit status ",
                              rankd::kExitDaemonFenced, "): ", fenced));
      (*daemon)->Shutdown("fenced", absl::Seconds(2));
      return rankd::kExitDaemonFenced;
    }
    if (!registration_checked) {
      absl::Status registered = (*daemon)->WaitRegistered(absl::ZeroDuration());
      if (registered.code() != absl::StatusCode::kDeadlineExceeded) {
        registration_checked = true;
        if (!registered.ok()) {
          (*daemon)->Shutdown("registration failed", absl::Seconds(2));
          return 1;
        }
      }
    }
  }
}
