// ChildProcess: a process started by a test, owned RAII-style. Tests stop
// only the processes they started, by pid; a ChildProcess still running at
// destruction is killed (SIGKILL) and reaped. Depends on POSIX and absl.
#ifndef RANKD_TESTS_HARNESS_PROCESS_H_
#define RANKD_TESTS_HARNESS_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rankd::testing {

class ChildProcess {
 public:
  // Starts `argv` (argv[0] is a path) with the test's environment plus
  // `env`, stdout and stderr appended to `log_path`.
  static absl::StatusOr<ChildProcess> Spawn(
      const std::vector<std::string>& argv,
      const std::map<std::string, std::string>& env,
      const std::string& log_path);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  bool running();

  // Sends `signal` to this process (by pid).
  void Signal(int signal);

  // Waits up to `timeout` for the process to exit. Returns its wait status
  // (as from waitpid), or nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);

  // SIGTERM, then SIGKILL after `grace`. Returns the wait status.
  int Stop(absl::Duration grace = absl::Seconds(5));

  // The whole log so far.
  std::string ReadLog() const;

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string log_path_;
};

// The exit code in a wait status, or -1 when the process did not exit
// normally (killed by a signal).
int ExitCode(int wait_status);

// Waits until `process`'s log contains `needle`; false after `timeout`.
bool WaitForLog(ChildProcess& process, const std::string& needle,
                absl::Duration timeout);

// Every process's log, each under a "--- <path>" header, for failure
// messages.
std::string Logs(std::vector<ChildProcess>& processes);

// Path of a runfile such as "daemon/rankd" (relative to the workspace):
// under $RANKD_BIN_DIR when set (a bazel-bin, or the GPU kit's bin/, which
// mirrors it: tests/gpu/run.sh), else under Bazel's runfiles
// ($TEST_SRCDIR), else `path` itself.
std::string Runfile(const std::string& path);

// A free TCP port on 127.0.0.1 (bound and released; small race acceptable
// in tests), never one this process was given before.
int FreePort();

// A fresh folder under /tmp (short, so socket paths fit); the caller removes
// it.
std::string MakeTempDir(const std::string& prefix);

}  // namespace rankd::testing

#endif  // RANKD_TESTS_HARNESS_PROCESS_H_
