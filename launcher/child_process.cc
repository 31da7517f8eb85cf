#include "launcher/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/monotonic_clock.h"

namespace rankd::launcher {
namespace {

// Pointers into `strings`, NULL-terminated, for execve.
std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const std::string& s : strings)
    out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the child, between fork and execve: async-signal-safe calls only.
[[noreturn]] void ExecChild(const SpawnOptions& options, char* const* argv,
                            char* const* envp, pid_t parent, int error_fd) {
  auto fail = [error_fd]() {
    const int error = errno;
    ssize_t ignored = ::write(error_fd, &error, sizeof(error));
    (void)ignored;
    ::_exit(127);
  };
  if (::setpgid(0, options.process_group) != 0) fail();
  // SIGKILL, as a container runtime kills a container's processes: a
  // rankrun that was killed cannot forward a stop, and ranks that drained
  // on their own would hide a lost node from its peers.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail();
  // rankrun died before prctl took effect: do not run at all.
  if (::getppid() != parent) ::_exit(127);
  // Close-on-exec: the dup below is what PROGRAM keeps.
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || ::dup2(null_fd, STDIN_FILENO) < 0) fail();
  if (options.stdout_fd >= 0 && ::dup2(options.stdout_fd, STDOUT_FILENO) < 0) {
    fail();
  }
  if (options.stderr_fd >= 0 && ::dup2(options.stderr_fd, STDERR_FILENO) < 0) {
    fail();
  }
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  ::sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail();
  ::execve(argv[0], argv, envp);
  fail();
  ::_exit(127);  // Not reached: fail() exits.
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("no program to start");
  }
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls (rankrun has threads: gRPC's).
  std::vector<char*> argv = CStrings(options.argv);
  std::vector<char*> envp = CStrings(options.env);
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start ", options.argv[0], ": pipe: ", strerror(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(error_pipe[0]);
    ::close(error_pipe[1]);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start ", options.argv[0], ": fork: ", strerror(error)));
  }
  if (pid == 0) {
    ::close(error_pipe[0]);
    ExecChild(options, argv.data(), envp.data(), parent, error_pipe[1]);
  }
  ::close(error_pipe[1]);
  ChildProcess child;
  child.pid_ = pid;
  child.process_group_ =
      options.process_group == 0 ? pid : options.process_group;
  // Also from here, so the group exists before Spawn returns (whichever of
  // parent and child gets there first; EACCES once the child has exec'ed).
  ::setpgid(pid, child.process_group_);
  int error = 0;
  ssize_t n;
  do {
    n = ::read(error_pipe[0], &error, sizeof(error));
  } while (n < 0 && errno == EINTR);
  ::close(error_pipe[0]);
  if (n > 0) {
    // The child exits at once (127); reap it now.
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    child.reaped_ = true;
    child.pid_ = -1;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", options.argv[0], ": ", strerror(error)));
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      process_group_(std::exchange(other.process_group_, -1)),
      status_(std::exchange(other.status_, std::nullopt)),
      reaped_(std::exchange(other.reaped_, false)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    Release();
    pid_ = std::exchange(other.pid_, -1);
    process_group_ = std::exchange(other.process_group_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
    reaped_ = std::exchange(other.reaped_, false);
  }
  return *this;
}

ChildProcess::~ChildProcess() { Release(); }

void ChildProcess::Release() {
  if (pid_ <= 0 || reaped_) return;
  if (!Poll().has_value()) Signal(SIGKILL);
  SignalGroup(SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  pid_ = -1;
}

std::optional<int> ChildProcess::Poll() {
  if (status_.has_value() || pid_ <= 0) return status_;
  siginfo_t info = {};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info,
               WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid == 0) {
    return std::nullopt;
  }
  // The wait status waitpid would give.
  if (info.si_code == CLD_EXITED) {
    status_ = (info.si_status & 0xff) << 8;
  } else {
    status_ = (info.si_status & 0x7f) | (info.si_code == CLD_DUMPED ? 0x80 : 0);
  }
  return status_;
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, signal);
}

void ChildProcess::SignalGroup(int signal) {
  if (pid_ > 0 && !reaped_ && process_group_ == pid_) ::kill(-pid_, signal);
}

std::optional<int> ChildProcess::WaitFor(absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  while (true) {
    if (std::optional<int> s = Poll()) return s;
    if (MonotonicNow() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::optional<int> ChildProcess::Reap() {
  std::optional<int> status = Poll();
  if (!status.has_value() || reaped_) return status;
  int ignored = 0;
  while (::waitpid(pid_, &ignored, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  return status;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) {
    const int status = WEXITSTATUS(wait_status);
    if (status == kExitNativeAbortHung) {
      // The library ended the process itself (common/exit_codes.h).
      return absl::StrCat("exited with status ", status,
                          " (its NCCL abort hung: the GPU did not let the "
                          "communicators go; see docs/operations.md, \"Exit "
                          "statuses\")");
    }
    if (status == kExitDaemonFenced) {
      return absl::StrCat("exited with status ", status,
                          " (a daemon fenced by its coordinator: its node was "
                          "declared lost or taken over; see "
                          "docs/operations.md, \"Exit statuses\")");
    }
    return absl::StrCat("exited with status ", status);
  }
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = ::strsignal(sig);
    return absl::StrCat("was killed by signal ", sig, " (",
                        name != nullptr ? name : "unknown", ")",
                        WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

int ShellStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

size_t ReapAdoptedOrphans(absl::FunctionRef<bool(pid_t)> is_ours) {
  // The kernel lists a process's children per thread; orphans are adopted
  // by the main one. Without the file (a kernel without
  // CONFIG_PROC_CHILDREN) nothing is reaped here.
  std::ifstream children(
      absl::StrCat("/proc/self/task/", ::getpid(), "/children"));
  size_t reaped = 0;
  pid_t pid = 0;
  while (children >> pid) {
    if (pid <= 0 || is_ours(pid)) continue;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) ++reaped;
  }
  return reaped;
}

}  // namespace rankd::launcher
