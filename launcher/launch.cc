// launch.cc: Launch (launch.h): runs a Launcher's phases in order
// (launcher.h) and turns their failures into rankrun's messages and exit
// status.

#include "launcher/launch.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"
#include "common/topology.h"
#include "launcher/child_process.h"
#include "launcher/launcher.h"

namespace rankd::launcher {

void Say(const std::string& message) {
  WriteAll(STDERR_FILENO, absl::StrCat("rankrun: ", message, "\n"));
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

int Launcher::Run() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int sig : kForwardedSignals) ::sigaddset(&set, sig);
  ::sigaddset(&set, SIGCHLD);
  signal_fd_.Reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_.valid()) {
    Say(absl::StrCat("signalfd: ", strerror(errno)));
    return kExitFailure;
  }
  interrupts_.emplace(signal_fd_.get());

  absl::StatusOr<std::vector<std::string>> argv =
      ResolveCommand(o_.command, env_);
  if (!argv.ok()) {
    Say(std::string(argv.status().message()));
    return kExitUsage;
  }
  if (std::optional<Failure> f = SetUpDaemon()) {
    Say(f->message);
    return f->exit_status;
  }
  const uint32_t first = layout_.node_rank * layout_.nproc_per_node;
  Say(absl::StrCat(
      "job '", layout_.job_id, "': node ", layout_.node_rank, " of ",
      layout_.nnodes, ", ranks ", first, "-",
      first + layout_.nproc_per_node - 1, " of ", layout_.world_size, " (",
      DescribeTopology(layout_.topology), "); ",
      started_daemon_
          ? absl::StrCat("started rankd (pid ", daemon_.pid(), ") at ", target_)
          : absl::StrCat("reusing rankd at ", target_)));
  if (int sig = interrupts_->Check(); sig != 0) {
    Say(absl::StrCat("received ", SignalName(sig), " before the start"));
    return 128 + sig;
  }
  if (std::optional<Failure> f = StartRanks(*argv)) {
    Say(f->message);
    return f->exit_status;
  }
  int code = Supervise();
  if (code == 0 && o_.exit_delay_ms > 0) Linger();
  if (started_daemon_) {
    std::optional<int> status =
        daemon_.Stop(absl::Milliseconds(o_.stop_grace_ms));
    if (status.has_value() && *status != 0 && code == 0) {
      Say(absl::StrCat("warning: rankd (pid ", daemon_.pid(), ") ",
                       DescribeWaitStatus(*status), " when stopped"));
    }
  }
  return code;
}

void BlockLauncherSignals() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int sig : kForwardedSignals) ::sigaddset(&set, sig);
  ::sigaddset(&set, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

int Launch(const LaunchOptions& options, const LaunchContext& context) {
  Launcher launcher(options, context);
  return launcher.Run();
}

}  // namespace rankd::launcher
