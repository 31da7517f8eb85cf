// launcher.h: Launcher, the state of one Launch (launch.h) and its phases,
// private to the :launch target. Its member functions are defined by phase:
//   launch.cc        Run: the phases in order, and the messages;
//   daemon_setup.cc  reusing the node's daemon or starting one, and the
//                    ranks' tokens;
//   supervise.cc     starting the ranks, supervising them, lingering.
// Finding PROGRAM and rankd is program.h; the job's sizes, job_layout.h.
//
// Depends on the launcher's options, processes, node daemon, program and
// job layout, the client's channel options and abseil.
#ifndef RANKD_LAUNCHER_LAUNCHER_H_
#define RANKD_LAUNCHER_LAUNCHER_H_

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/admin_client.h"
#include "client/channel.h"
#include "launcher/job_layout.h"
#include "launcher/launch.h"
#include "launcher/node_daemon.h"
#include "launcher/options.h"
#include "launcher/process_group.h"
#include "launcher/program.h"
#include "launcher/temp_dir.h"
#include "launcher/unique_fd.h"
#include "rankd/v1/admin.pb.h"

namespace rankd::launcher {

// The signals rankrun forwards to its ranks.
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// A failure that ends Launch with `exit_status`, after `message` is printed.
struct Failure {
  int exit_status;
  std::string message;
};

// Prints "rankrun: <message>" on stderr.
void Say(const std::string& message);

// "SIGINT", "SIGTERM", "SIGHUP", else "a signal".
const char* SignalName(int sig);

// Stops early while waiting for a daemon: a signal, or the daemon's exit.
class Interrupts {
 public:
  explicit Interrupts(int signal_fd) : signal_fd_(signal_fd) {}
  // The forwarded signal received so far (0 = none); drains the signalfd.
  int Check() {
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      for (int sig : kForwardedSignals) {
        if (static_cast<int>(info.ssi_signo) == sig) signal_ = sig;
      }
    }
    return signal_;
  }

 private:
  int signal_fd_;
  int signal_ = 0;
};

// Everything Launch owns, in destruction order (ranks, then the daemon,
// then the folder holding its socket and credentials).
class Launcher {
 public:
  Launcher(const LaunchOptions& o, const LaunchContext& c)
      : o_(o), context_(c), env_(EnvMap(c.environment)) {}

  int Run();

 private:
  absl::Status EnsureTempDir();
  // Finds or starts the daemon; fills layout_, target_, rank_tokens_.
  std::optional<Failure> SetUpDaemon();
  std::optional<Failure> StartDaemon(const std::string& socket);
  std::optional<Failure> ReuseDaemon(const ClientOptions& client);
  std::optional<Failure> StartRanks(const std::vector<std::string>& argv);
  // Starts local rank `local`'s process (index group_->size()) in the
  // ranks' group, with RANKD_RESTART_COUNT=`restarts`. Errors as
  // ProcessGroup::Start.
  absl::Status StartRank(uint32_t local, uint32_t restarts);
  // The daemon's members, for SlotReleased; an error when it cannot be
  // asked (within about a second).
  absl::StatusOr<v1::MemberList> ListMembers();
  // Whether `members` no longer holds `rank`'s slot for the process
  // `old_pid` (that member is lost, left, or never joined), so that a
  // replacement's join can take it.
  static bool SlotReleased(const v1::MemberList& members, uint32_t rank,
                           pid_t old_pid);
  int Supervise();
  void Linger();

  const LaunchOptions& o_;
  const LaunchContext& context_;
  std::map<std::string, std::string> env_;
  UniqueFd signal_fd_;
  std::optional<Interrupts> interrupts_;
  TempDir temp_;
  StartedDaemon daemon_;
  bool started_daemon_ = false;
  Layout layout_;
  std::string target_;
  // Each local rank's own token (docs/operations.md, "Credentials"); empty
  // when the daemon runs without authentication.
  std::vector<std::string> rank_tokens_;
  // SlotReleased's connection to the daemon, kept while restarts wait (a
  // new channel per poll cost more than the poll); dropped when a call on
  // it fails and once no restart waits.
  std::unique_ptr<AdminClient> slot_admin_;
  // Fills rank_tokens_ from the node key or node token in `credentials`.
  absl::Status MintRankTokens(const std::string& credentials);
  std::optional<ProcessGroup> group_;
  // PROGRAM's resolved command line, for every start and restart.
  std::vector<std::string> argv_;
  // The local rank of each process in group_, by index: a restarted rank
  // has a new process (a new index) and keeps its old one, exited, in the
  // group until the end, so the group's id stays valid.
  std::vector<uint32_t> local_of_;
};

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_LAUNCHER_H_
