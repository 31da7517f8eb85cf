#include "tests/harness/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"

extern char** environ;

namespace rankd::testing {

absl::StatusOr<ChildProcess> ChildProcess::Spawn(
    const std::vector<std::string>& argv,
    const std::map<std::string, std::string>& env,
    const std::string& log_path) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos)
      merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  // Open the log before forking: the child may only make async-signal-safe
  // calls.
  int log_fd =
      ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", log_path, ": ", std::strerror(errno)));
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    ::close(null_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Die with the test: a test that crashes must not leave daemons behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::execve(argp[0], argp.data(), envp.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  ChildProcess child;
  child.pid_ = pid;
  child.log_path_ = log_path;
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      status_(std::exchange(other.status_, std::nullopt)),
      log_path_(std::move(other.log_path_)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_.has_value()) Stop(absl::ZeroDuration());
    pid_ = std::exchange(other.pid_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
    log_path_ = std::move(other.log_path_);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_.has_value()) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

bool ChildProcess::running() {
  if (pid_ <= 0 || status_.has_value()) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    status_ = status;
    return false;
  }
  return true;
}

void ChildProcess::Signal(int signal) {
  if (running()) ::kill(pid_, signal);
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  absl::Time deadline = MonotonicNow() + timeout;
  while (true) {
    if (!running()) return status_;
    if (MonotonicNow() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

int ChildProcess::Stop(absl::Duration grace) {
  if (!running()) return status_.value_or(0);
  ::kill(pid_, SIGTERM);
  if (auto s = Wait(grace); s.has_value()) return *s;
  ::kill(pid_, SIGKILL);
  return Wait(absl::Seconds(30)).value_or(-1);
}

std::string ChildProcess::ReadLog() const {
  std::ifstream in(log_path_);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

int ExitCode(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
}

bool WaitForLog(ChildProcess& process, const std::string& needle,
                absl::Duration timeout) {
  absl::Time deadline = MonotonicNow() + timeout;
  while (MonotonicNow() < deadline) {
    if (absl::StrContains(process.ReadLog(), needle)) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

std::string Logs(std::vector<ChildProcess>& processes) {
  std::string out;
  for (auto& p : processes) {
    absl::StrAppend(&out, "--- ", p.log_path(), "\n", p.ReadLog());
  }
  return out;
}

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  const char* bin_dir = std::getenv("RANKD_BIN_DIR");
  if (bin_dir != nullptr && bin_dir[0] != '\0') {
    return absl::StrCat(bin_dir, "/", path);
  }
  if (srcdir == nullptr || srcdir[0] == '\0') return path;
  return absl::StrCat(srcdir, "/", workspace ? workspace : "rankd", "/", path);
}

int FreePort() {
  // The kernel may hand the same free port out twice in a row; a test that
  // asks for several (a cluster's nodes, their metrics listeners) must get
  // distinct ones: a node given the coordinator's port takes its role.
  static absl::Mutex mu(absl::kConstInit);
  static std::set<int>* given ABSL_GUARDED_BY(mu) = new std::set<int>();
  absl::MutexLock lock(&mu);
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    int port = ntohs(addr.sin_port);
    ::close(fd);
    if (given->insert(port).second) return port;
  }
}

std::string MakeTempDir(const std::string& prefix) {
  // Not $TEST_TMPDIR: Unix socket paths must stay under 108 bytes.
  std::string pattern = absl::StrCat("/tmp/", prefix, "-XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  char* dir = ::mkdtemp(buffer.data());
  return dir ? std::string(dir) : std::string("/tmp");
}

}  // namespace rankd::testing
