// ProcessGroup: the ranks rankrun starts on one node, as one unit.
//
// Every process leads a process group of its own, so that a signal to the
// ranks also reaches what each started itself, a failed rank's leftovers
// can be stopped before it is restarted without touching the other ranks
// (KillGroupOf), and Finish() can leave nothing of theirs behind. With
// prefix_output (rankrun's default), each process's stdout and stderr are pipes
// whose lines rankrun copies to its own stdout and stderr, whole and each
// labelled "[rank N] " (launcher/line_prefixer.h), so two processes' bytes
// never share a line; without it, the processes write to rankrun's stdout and
// stderr directly (byte for byte, but a line written in pieces can mix with
// another's).
//
// Exits are noticed without reaping (launcher/child_process.h) until
// Finish(), so the group ids stay valid for signals all along. The
// destructor kills and reaps whatever Finish() did not.
//
// Not thread-safe; rankrun's main loop drives it (launcher/launch.h).
// Depends on POSIX and absl.
#ifndef RANKD_LAUNCHER_PROCESS_GROUP_H_
#define RANKD_LAUNCHER_PROCESS_GROUP_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "launcher/child_process.h"
#include "launcher/line_prefixer.h"
#include "launcher/unique_fd.h"

namespace rankd::launcher {

class ProcessGroup {
 public:
  explicit ProcessGroup(bool prefix_output) : prefix_output_(prefix_output) {}
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ~ProcessGroup() = default;

  // Starts the next process (index size()) with `argv` and `env` (see
  // SpawnOptions); `label` prefixes its lines with prefix_output. Errors as
  // ChildProcess::Spawn.
  absl::Status Start(std::vector<std::string> argv,
                     std::vector<std::string> env, std::string label);

  size_t size() const { return members_.size(); }
  pid_t pid(size_t index) const { return members_[index]->child.pid(); }
  // The wait status of process `index` once it has exited, else nullopt.
  std::optional<int> status(size_t index);
  // Processes that have not exited.
  size_t CountRunning();

  // Indexes of the processes whose exit was noticed since the last call,
  // ascending; each exit is reported once. Never blocks.
  std::vector<size_t> PollExits();

  // Sends `signal` to every process's group (every process still there and
  // what they started in their groups).
  void Signal(int signal);
  // SIGKILLs what process `index` (which has exited) left running in its
  // group.
  void KillGroupOf(size_t index);
  // Whether `pid` is one of the processes started (exited or not).
  bool Contains(pid_t pid) const;

  // The read ends of the output pipes still open (none without
  // prefix_output), for poll(2).
  std::vector<int> OutputFds() const;
  // Copies what can be read from `fd` now (one of OutputFds()) to rankrun's
  // stdout or stderr, labelled; closes it at end of file.
  void Pump(int fd);

  // Once every process has exited: SIGKILLs what they left in the group,
  // copies the rest of their output (for at most `drain`), and reaps them.
  void Finish(absl::Duration drain);

 private:
  struct Stream {
    UniqueFd fd;
    int to_fd;  // STDOUT_FILENO or STDERR_FILENO
    LinePrefixer prefixer;
  };
  struct Member {
    ChildProcess child;
    bool reported = false;
    std::vector<std::unique_ptr<Stream>> streams;
  };
  void CloseStream(Stream& stream);

  const bool prefix_output_;
  std::vector<std::unique_ptr<Member>> members_;
};

// Writes all of `data` to `fd`, retrying on EINTR and short writes; gives
// up silently when the fd is gone (EPIPE, ...).
void WriteAll(int fd, const std::string& data);

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_PROCESS_GROUP_H_
