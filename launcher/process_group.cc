#include "launcher/process_group.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"

namespace rankd::launcher {

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p = {fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return;
    }
  }
}

absl::Status ProcessGroup::Start(std::vector<std::string> argv,
                                 std::vector<std::string> env,
                                 std::string label) {
  auto member = std::make_unique<Member>();
  SpawnOptions options;
  options.argv = std::move(argv);
  options.env = std::move(env);
  options.process_group = 0;  // its own
  std::vector<UniqueFd> write_ends;
  if (prefix_output_) {
    for (int to_fd : {STDOUT_FILENO, STDERR_FILENO}) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot make an output pipe: ", strerror(errno)));
      }
      ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
      member->streams.push_back(std::make_unique<Stream>(
          Stream{UniqueFd(fds[0]), to_fd, LinePrefixer(label)}));
      write_ends.emplace_back(fds[1]);
    }
    options.stdout_fd = write_ends[0].get();
    options.stderr_fd = write_ends[1].get();
  }
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(options);
  if (!child.ok()) return child.status();
  member->child = *std::move(child);
  members_.push_back(std::move(member));
  return absl::OkStatus();
}

std::optional<int> ProcessGroup::status(size_t index) {
  return members_[index]->child.Poll();
}

size_t ProcessGroup::CountRunning() {
  size_t running = 0;
  for (auto& m : members_) running += m->child.running() ? 1 : 0;
  return running;
}

std::vector<size_t> ProcessGroup::PollExits() {
  std::vector<size_t> exits;
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = *members_[i];
    if (!m.reported && m.child.Poll().has_value()) {
      m.reported = true;
      exits.push_back(i);
    }
  }
  return exits;
}

void ProcessGroup::Signal(int signal) {
  // Each leader is unreaped until Finish(), so its group id is still ours.
  for (auto& m : members_) m->child.SignalGroup(signal);
}

void ProcessGroup::KillGroupOf(size_t index) {
  members_[index]->child.SignalGroup(SIGKILL);
}

bool ProcessGroup::Contains(pid_t pid) const {
  for (const auto& m : members_) {
    if (m->child.pid() == pid) return true;
  }
  return false;
}

std::vector<int> ProcessGroup::OutputFds() const {
  std::vector<int> fds;
  for (const auto& m : members_) {
    for (const auto& s : m->streams) {
      if (s->fd.valid()) fds.push_back(s->fd.get());
    }
  }
  return fds;
}

void ProcessGroup::CloseStream(Stream& stream) {
  WriteAll(stream.to_fd, stream.prefixer.Flush());
  stream.fd.Reset();
}

void ProcessGroup::Pump(int fd) {
  for (auto& m : members_) {
    for (auto& s : m->streams) {
      if (s->fd.get() != fd) continue;
      char buffer[16 * 1024];
      // Bounded, so one chatty process cannot starve the loop.
      for (int reads = 0; reads < 16; ++reads) {
        const ssize_t n = ::read(fd, buffer, sizeof(buffer));
        if (n > 0) {
          WriteAll(s->to_fd, s->prefixer.Feed({buffer, size_t(n)}));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        CloseStream(*s);  // End of file, or an error.
        return;
      }
      return;
    }
  }
}

void ProcessGroup::Finish(absl::Duration drain) {
  // What the ranks left running in their groups (the ranks themselves have
  // exited; each unreaped leader keeps its group id ours).
  Signal(SIGKILL);
  const absl::Time deadline = MonotonicNow() + drain;
  while (true) {
    std::vector<int> fds = OutputFds();
    if (fds.empty()) break;
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) break;
    std::vector<pollfd> polls;
    for (int fd : fds) polls.push_back({fd, POLLIN, 0});
    const int ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 100));
    if (::poll(polls.data(), polls.size(), ms) < 0 && errno != EINTR) break;
    for (const pollfd& p : polls) {
      if (p.revents != 0) Pump(p.fd);
    }
  }
  for (auto& m : members_) {
    for (auto& s : m->streams) {
      if (s->fd.valid()) CloseStream(*s);
    }
  }
  for (auto& m : members_) {
    // Only a caller that broke the contract gets here with one running.
    if (m->child.running()) {
      m->child.Signal(SIGKILL);
      m->child.WaitFor(absl::Seconds(5));
    }
    m->child.Reap();
  }
}

}  // namespace rankd::launcher
