// supervise.cc: the ranks of a Launch (launcher.h): starting
// nproc_per_node processes with the environment the rankd libraries read,
// then supervising them until every one has exited (forwarding signals,
// restarting a failed rank into its rank while --max_restarts allows,
// else stopping the rest when one fails or a started daemon dies, SIGKILL
// after the grace), and lingering after a clean exit.

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/admin_client.h"
#include "common/credentials.h"
#include "common/monotonic_clock.h"
#include "launcher/child_process.h"
#include "launcher/launcher.h"

namespace rankd::launcher {
namespace {

// How long a restart waits, after its backoff, for the daemon to release
// the lost process's slot before it starts the replacement anyway.
constexpr absl::Duration kSlotReleaseWait = absl::Seconds(10);
// How often it asks meanwhile: the daemon releases the slot within
// milliseconds of the exit (the rank's Watch stream closes), and each poll
// lists every member (ListMembers), which a large job makes costly.
constexpr absl::Duration kSlotPollInterval = absl::Milliseconds(10);

}  // namespace

std::optional<Failure> Launcher::StartRanks(
    const std::vector<std::string>& argv) {
  group_.emplace(o_.prefix_output);
  argv_ = argv;
  for (uint32_t local = 0; local < layout_.nproc_per_node; ++local) {
    if (absl::Status s = StartRank(local, 0); !s.ok()) {
      const size_t started = group_->size();
      group_->Signal(SIGKILL);
      group_->Finish(absl::Seconds(1));
      return Failure{
          kExitUsage,
          absl::StrCat("local rank ", local, ": ", s.message(),
                       started > 0 ? absl::StrCat("; stopped the ", started,
                                                  " process(es) started")
                                   : "")};
    }
  }
  return std::nullopt;
}

absl::Status Launcher::StartRank(uint32_t local, uint32_t restarts) {
  const Layout& l = layout_;
  const uint32_t rank = l.node_rank * l.nproc_per_node + local;
  const std::vector<std::pair<std::string, std::string>> values = {
      {"{local_rank}", absl::StrCat(local)},
      {"{rank}", absl::StrCat(rank)},
      {"{node_rank}", absl::StrCat(l.node_rank)},
      {"{world_size}", absl::StrCat(l.world_size)},
      {"{nproc_per_node}", absl::StrCat(l.nproc_per_node)},
      {"{job_id}", l.job_id},
      {"{target}", target_},
  };
  std::vector<std::string> args = argv_;
  for (size_t i = 1; i < args.size(); ++i) {
    args[i] = absl::StrReplaceAll(args[i], values);
  }
  std::map<std::string, std::string> env = env_;
  env["RANKD_TARGET"] = target_;
  env["RANKD_JOB_ID"] = l.job_id;
  env["RANKD_LOCAL_RANK"] = absl::StrCat(local);
  env["RANKD_RANK"] = absl::StrCat(rank);
  env["RANKD_WORLD_SIZE"] = absl::StrCat(l.world_size);
  env["RANKD_NPROC_PER_NODE"] = absl::StrCat(l.nproc_per_node);
  env["RANKD_NODE_RANK"] = absl::StrCat(l.node_rank);
  env["RANKD_NNODES"] = absl::StrCat(l.nnodes);
  // A replacement can tell it is one (and, e.g., rejoin rather than
  // start from scratch).
  env["RANKD_RESTART_COUNT"] = absl::StrCat(restarts);
  // This rank's own token, in its environment alone; a token file of
  // rankrun's own environment would name another credential. A
  // replacement gets the same token: the slot, not the process, owns it.
  env.erase("RANKD_TOKEN_FILE");
  if (local < rank_tokens_.size() && !rank_tokens_[local].empty()) {
    env[kRankTokenEnv] = rank_tokens_[local];
  } else {
    env.erase(kRankTokenEnv);
  }
  env["LOCAL_RANK"] = absl::StrCat(local);
  env["RANK"] = absl::StrCat(rank);
  env["GROUP_RANK"] = absl::StrCat(l.node_rank);
  env["WORLD_SIZE"] = absl::StrCat(l.world_size);
  env["LOCAL_WORLD_SIZE"] = absl::StrCat(l.nproc_per_node);
  absl::Status started =
      group_->Start(args, EnvList(env), absl::StrCat("[rank ", rank, "] "));
  if (started.ok()) local_of_.push_back(local);
  return started;
}

absl::StatusOr<v1::MemberList> Launcher::ListMembers() {
  if (slot_admin_ == nullptr) {
    ClientOptions options;
    options.target = target_;
    options.connect_timeout = absl::Milliseconds(500);
    options.call_timeout = absl::Milliseconds(500);
    if (!o_.credentials_dir.empty()) {
      // Over TCP the Admin service wants the operator's token; the Unix
      // socket needs none.
      absl::StatusOr<std::string> token =
          ReadCredentialFile(o_.credentials_dir, kOperatorTokenFile);
      if (token.ok()) options.bearer_token = *token;
    }
    absl::StatusOr<std::unique_ptr<AdminClient>> admin =
        AdminClient::Connect(options);
    if (!admin.ok()) return admin.status();
    slot_admin_ = *std::move(admin);
  }
  absl::StatusOr<v1::MemberList> members = slot_admin_->ListMembers();
  if (!members.ok()) slot_admin_.reset();  // connect again at the next poll
  return members;
}

bool Launcher::SlotReleased(const v1::MemberList& members, uint32_t rank,
                            pid_t old_pid) {
  for (const v1::MemberStatus& m : members.members()) {
    if (m.rank() == rank && m.pid() == static_cast<uint32_t>(old_pid) &&
        (m.state() == v1::MEMBER_STATE_JOINED ||
         m.state() == v1::MEMBER_STATE_IN_ROUND)) {
      return false;
    }
  }
  return true;
}

int Launcher::Supervise() {
  ProcessGroup& group = *group_;
  const absl::Duration grace = absl::Milliseconds(o_.stop_grace_ms);
  std::optional<size_t> failed;  // The first process that failed.
  size_t stopped_others = 0;
  std::optional<int> daemon_status;  // A started daemon that died.
  int stop_signal = 0;
  std::optional<absl::Time> kill_at;
  bool killed = false;
  std::optional<size_t> first_nonzero;
  // --max_restarts: each local rank's restarts so far, and when the next
  // is due for a rank whose process failed (none while stopping).
  std::vector<uint32_t> restarts(layout_.nproc_per_node, 0);
  struct PendingRestart {
    absl::Time at;       // Not before: the backoff, then the next check.
    absl::Time give_up;  // Start it then even if the slot still looks held.
    pid_t old_pid;
  };
  std::map<uint32_t, PendingRestart> restart_at;
  std::optional<std::string> restart_error;  // A restart that could not run.
  const auto rank_of = [&](uint32_t local) {
    return layout_.node_rank * layout_.nproc_per_node + local;
  };
  const auto stopping = [&] {
    return failed.has_value() || stop_signal != 0 ||
           daemon_status.has_value() || restart_error.has_value();
  };

  // As a container's first process rankrun is every orphan's parent.
  const bool reaps_orphans = ::getpid() == 1;
  auto begin_stop = [&](int sig) {
    restart_at.clear();
    group.Signal(sig);
    if (!kill_at.has_value()) kill_at = MonotonicNow() + grace;
  };
  while (true) {
    for (size_t i : group.PollExits()) {
      const int status = *group.status(i);
      if (status == 0) continue;
      const uint32_t local = local_of_[i];
      if (!stopping() && restarts[local] < o_.max_restarts) {
        ++restarts[local];
        Say(absl::StrCat("rank ", rank_of(local), " (local rank ", local,
                         ", pid ", group.pid(i), ") ",
                         DescribeWaitStatus(status),
                         "; restarting it (restart ", restarts[local], " of ",
                         o_.max_restarts, ")"));
        // What it started itself (workers holding memory, ports, its
        // token) goes before its replacement comes; the other ranks' groups
        // are untouched.
        group.KillGroupOf(i);
        const absl::Time at =
            MonotonicNow() + RestartBackoff(o_, restarts[local]);
        restart_at[local] = {at, at + kSlotReleaseWait, group.pid(i)};
        continue;
      }
      if (!first_nonzero.has_value()) first_nonzero = i;
      if (!stopping()) {
        failed = i;
        stopped_others = group.CountRunning();
        if (stopped_others > 0) begin_stop(SIGTERM);
      }
    }
    // Asked at most once per turn of the loop, whatever number of restarts
    // wait: a daemon that does not answer costs a turn about a second, not
    // a second per restart (signals and the stop grace wait for the turn).
    std::optional<absl::StatusOr<v1::MemberList>> members;
    for (auto it = restart_at.begin(); it != restart_at.end();) {
      PendingRestart& pending = it->second;
      const absl::Time now = MonotonicNow();
      if (now < pending.at) {
        ++it;
        continue;
      }
      const uint32_t local = it->first;
      // The daemon notices the loss a moment after rankrun sees the exit
      // (at once through the rank's Watch stream, else at the heartbeat
      // timeout); until then it refuses a replacement's join as another
      // process acting for a live rank.
      if (now < pending.give_up && !members.has_value()) {
        members = ListMembers();
      }
      if (now < pending.give_up &&
          (!members->ok() ||
           !SlotReleased(**members, rank_of(local), pending.old_pid))) {
        pending.at = MonotonicNow() + kSlotPollInterval;
        ++it;
        continue;
      }
      it = restart_at.erase(it);
      if (absl::Status s = StartRank(local, restarts[local]); !s.ok()) {
        restart_error =
            absl::StrCat("cannot restart rank ", rank_of(local),
                         " (local rank ", local, "): ", s.message());
        stopped_others = group.CountRunning();
        begin_stop(SIGTERM);
        break;
      }
    }
    if (started_daemon_ && !daemon_status.has_value() && !failed.has_value()) {
      if (std::optional<int> s = daemon_.Poll()) {
        daemon_status = *s;
        stopped_others = group.CountRunning();
        if (stopped_others > 0) begin_stop(SIGTERM);
      }
    }
    if (restart_at.empty()) slot_admin_.reset();  // no restart waits
    if (group.CountRunning() == 0 && restart_at.empty()) break;
    if (kill_at.has_value() && !killed && MonotonicNow() >= *kill_at) {
      group.Signal(SIGKILL);
      killed = true;
    }
    std::vector<pollfd> polls = {{signal_fd_.get(), POLLIN, 0}};
    for (int fd : group.OutputFds()) polls.push_back({fd, POLLIN, 0});
    int timeout_ms = 100;
    if (kill_at.has_value() && !killed) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(*kill_at - MonotonicNow()) + 1, 0, 100));
    }
    for (const auto& [local, pending] : restart_at) {
      timeout_ms = std::min(
          timeout_ms,
          static_cast<int>(std::clamp<int64_t>(
              absl::ToInt64Milliseconds(pending.at - MonotonicNow()) + 1, 0,
              100)));
    }
    if (::poll(polls.data(), polls.size(), timeout_ms) < 0 && errno != EINTR) {
      Say(absl::StrCat("poll: ", strerror(errno)));
      begin_stop(SIGKILL);
    }
    for (size_t p = 1; p < polls.size(); ++p) {
      if (polls[p].revents != 0) group.Pump(polls[p].fd);
    }
    if (reaps_orphans) {
      ReapAdoptedOrphans([&](pid_t pid) {
        return group.Contains(pid) || (started_daemon_ && pid == daemon_.pid());
      });
    }
    signalfd_siginfo info;
    while (::read(signal_fd_.get(), &info, sizeof(info)) == sizeof(info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) continue;
      if (stop_signal == 0) stop_signal = sig;
      // Forwarded every time (a second Ctrl-C reaches the ranks again).
      begin_stop(sig);
    }
  }
  group.Finish(absl::Seconds(2));

  if (restart_error.has_value()) {
    Say(absl::StrCat(*restart_error, "; stopped the other ", stopped_others,
                     " process(es)"));
    return kExitFailure;
  }
  if (failed.has_value()) {
    const size_t i = *failed;
    const uint32_t local = local_of_[i];
    const int status = *group.status(i);
    Say(absl::StrCat(
        "local rank ", local, " (rank ", rank_of(local), ", pid ", group.pid(i),
        ") ", DescribeWaitStatus(status),
        o_.max_restarts > 0
            ? absl::StrCat(" after ", restarts[local], " restart(s), its last")
            : "",
        "; stopped the other ", stopped_others, " process(es)"));
    return ShellStatus(status);
  }
  if (daemon_status.has_value()) {
    Say(absl::StrCat("the rankd daemon rankrun started (pid ", daemon_.pid(),
                     ") ", DescribeWaitStatus(*daemon_status), "; stopped the ",
                     stopped_others, " process(es)"));
    return kExitFailure;
  }
  if (stop_signal != 0) {
    std::string outcome = "every one exited 0";
    int code = 0;
    if (first_nonzero.has_value()) {
      const size_t i = *first_nonzero;
      const uint32_t local = local_of_[i];
      const int status = *group.status(i);
      outcome = absl::StrCat("local rank ", local, " (rank ", rank_of(local),
                             ", pid ", group.pid(i), ") ",
                             DescribeWaitStatus(status));
      code = ShellStatus(status);
    }
    Say(absl::StrCat("received ", SignalName(stop_signal),
                     "; forwarded it to the ", layout_.nproc_per_node,
                     " process(es): ", outcome));
    return code;
  }
  return 0;
}

void Launcher::Linger() {
  const absl::Time until =
      MonotonicNow() + absl::Milliseconds(o_.exit_delay_ms);
  while (MonotonicNow() < until) {
    if (interrupts_->Check() != 0) return;
    pollfd p = {signal_fd_.get(), POLLIN, 0};
    const int ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(until - MonotonicNow()) + 1, 0, 100));
    ::poll(&p, 1, ms);
  }
}

}  // namespace rankd::launcher
