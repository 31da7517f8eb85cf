// ChildProcess: one process rankrun started, owned RAII-style by its pid.
//
// A child is started with fork + execve and, before it runs PROGRAM:
//   - joins the process group it is told to (or leads a new one), so that
//     rankrun can stop it and whatever it started together, and so that a
//     terminal's Ctrl-C reaches only rankrun, which forwards it once;
//   - gets rankrun's blocked signals unblocked and default dispositions;
//   - gets SIGKILL should rankrun die (PR_SET_PDEATHSIG), so that nothing
//     outlives a rankrun that was killed, and its peers see the ranks lost;
//   - reads stdin from /dev/null and writes to the fds it is given.
// A failed execve is reported by Spawn (through a close-on-exec pipe), not
// as an exit status.
//
// The child is not reaped when it exits: Poll() notices the exit without
// reaping (waitid WNOWAIT), so the pid, and with it the process group it
// leads, stays ours until Reap(). Signalling a group is therefore safe for
// as long as its leader is unreaped. The destructor SIGKILLs (the group, for
// a leader) and reaps a child that is still there.
//
// Not thread-safe; use from one thread. Depends on POSIX and absl.
#ifndef RANKD_LAUNCHER_CHILD_PROCESS_H_
#define RANKD_LAUNCHER_CHILD_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rankd::launcher {

struct SpawnOptions {
  // argv[0] must be a path to an executable file (no PATH search here).
  std::vector<std::string> argv;
  // The child's whole environment, "NAME=value" each.
  std::vector<std::string> env;
  // Process group to join; 0 = lead a new one (its id is the child's pid).
  pid_t process_group = 0;
  // Where the child's stdout and stderr go (dup2'ed); -1 = inherit.
  int stdout_fd = -1;
  int stderr_fd = -1;
};

class ChildProcess {
 public:
  // Starts the child. FailedPrecondition naming argv[0] and the error when
  // fork or execve fails; nothing is left running then.
  static absl::StatusOr<ChildProcess> Spawn(const SpawnOptions& options);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  pid_t process_group() const { return process_group_; }

  // The wait status once the child has exited (without reaping it), else
  // nullopt. Never blocks.
  std::optional<int> Poll();
  // True from Spawn until Poll() has seen the exit.
  bool running() { return pid_ > 0 && !Poll().has_value(); }

  // Sends `signal` to the child (by pid) while it is unreaped.
  void Signal(int signal);
  // Sends `signal` to the child's whole process group, only while this
  // child leads it and is unreaped (so the group id cannot have been
  // reused).
  void SignalGroup(int signal);

  // Waits up to `timeout` for the exit (polling); the wait status, or
  // nullopt when it is still running.
  std::optional<int> WaitFor(absl::Duration timeout);

  // Reaps an exited child (after Poll() saw the exit); the pid is no longer
  // ours afterwards. Returns its wait status; nullopt when it has not
  // exited.
  std::optional<int> Reap();

 private:
  void Release();

  pid_t pid_ = -1;
  pid_t process_group_ = -1;
  std::optional<int> status_;
  bool reaped_ = false;
};

// "exited with status 3", "was killed by signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

// The shell's view of a wait status: the exit status, or 128 + signal.
int ShellStatus(int wait_status);

// For rankrun as PID 1 (a container's first process), which the kernel
// makes the parent of every orphan in the container, such as a worker a
// dead rank left: reaps those that exited, never a child `is_ours` names
// (its own, which it reaps itself). Returns how many it reaped. Never
// blocks.
size_t ReapAdoptedOrphans(absl::FunctionRef<bool(pid_t)> is_ours);

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_CHILD_PROCESS_H_
