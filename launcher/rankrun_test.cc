// rankrun end to end: the real launcher binary starts (or reuses) real rankd
// daemons on real sockets and real rank processes (launcher/testing/
// env_rank.cc), which join and run an all_gather_words round through the
// environment rankrun gives them. Checks what a user sees: exit statuses,
// the messages naming a failed rank, signal forwarding, nothing left
// running, and refused command lines.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/admin_client.h"
#include "client/channel.h"
#include "common/credentials.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/node_daemon.h"
#include "rankd/v1/common.pb.h"

namespace rankd::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kRankrun[] = "launcher/rankrun";
constexpr char kEnvRank[] = "launcher/env_rank";
constexpr char kRankd[] = "daemon/rankd";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A private folder with a short path (Unix sockets allow 107 bytes).
std::string ShortTempDir() {
  std::string path = "/tmp/rrt-XXXXXX";
  if (::mkdtemp(path.data()) == nullptr) return "";
  return path;
}

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// One rankrun run: its stdout and stderr go to files, so the test can read
// them while it runs.
class RankrunJob {
 public:
  explicit RankrunJob(std::vector<std::string> args) {
    static int counter = 0;
    const std::string dir = ::testing::TempDir();
    out_path_ =
        absl::StrCat(dir, "/rankrun-", ::getpid(), "-", counter, ".out");
    err_path_ =
        absl::StrCat(dir, "/rankrun-", ::getpid(), "-", counter++, ".err");
    args.insert(args.begin(), kRankrun);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int out =
          ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err =
          ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, STDOUT_FILENO);
      ::dup2(err, STDERR_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  RankrunJob(const RankrunJob&) = delete;
  RankrunJob& operator=(const RankrunJob&) = delete;
  ~RankrunJob() {
    if (pid_ > 0 && !status_.has_value()) {
      ::kill(pid_, SIGKILL);
      int ignored;
      ::waitpid(pid_, &ignored, 0);
    }
  }

  pid_t pid() const { return pid_; }

  // rankrun's shell exit status, or -1 when it did not exit within
  // `timeout` (it is killed then).
  int Wait(absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!status_.has_value()) {
      int status;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        status_ = status;
        break;
      }
      if (absl::Now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        status_ = -1;
        return -1;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (*status_ == -1) return -1;
    return WIFEXITED(*status_) ? WEXITSTATUS(*status_)
                               : 128 + WTERMSIG(*status_);
  }

  // Waits until stdout has `count` lines starting with `prefix`.
  bool WaitForLines(absl::string_view prefix, size_t count,
                    absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (Lines(prefix).size() >= count) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  std::string out() const { return ReadFile(out_path_); }
  std::string err() const { return ReadFile(err_path_); }
  // stdout's lines that start with `prefix` (after any "[rank N] ").
  std::vector<std::string> Lines(absl::string_view prefix) const {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(out(), '\n')) {
      if (absl::StartsWith(line, "[rank ")) {
        line.remove_prefix(std::min(line.size(), line.find("] ") + 2));
      }
      if (absl::StartsWith(line, prefix)) lines.emplace_back(line);
    }
    return lines;
  }
  std::string Describe() const {
    return absl::StrCat("stdout:\n", out(), "\nstderr:\n", err());
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string out_path_;
  std::string err_path_;
};

// The value of `name` in env_rank's "ENV k=v ..." line.
std::string EnvValue(const std::string& env_line, absl::string_view name) {
  for (absl::string_view word : absl::StrSplit(env_line, ' ')) {
    if (absl::StartsWith(word, absl::StrCat(name, "="))) {
      return std::string(word.substr(name.size() + 1));
    }
  }
  return "<missing>";
}

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(Rankrun, StartsADaemonAndTwoRanksThatJoinAndGather) {
  RankrunJob run({"--nproc_per_node=2", "--job_id=two", "--prefix_output",
                  "--rankd_log=" + ::testing::TempDir() + "/two.log", "--",
                  kEnvRank, "--join", "--gather", "--lr={local_rank}",
                  "--ws={world_size}"});
  ASSERT_EQ(run.Wait(), 0) << run.Describe();
  EXPECT_EQ(run.Lines("GATHERED 0,1").size(), 2u) << run.Describe();
  EXPECT_THAT(run.err(), HasSubstr("job 'two': node 0 of 1, ranks 0-1 of 2"));
  EXPECT_THAT(run.err(), HasSubstr("started rankd (pid "));
  const std::string out = run.out();
  for (int r = 0; r < 2; ++r) {
    const std::string label = absl::StrCat("[rank ", r, "] ");
    std::string env_line;
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      if (absl::StartsWith(line, label + "ENV ")) env_line = std::string(line);
    }
    ASSERT_FALSE(env_line.empty()) << run.Describe();
    EXPECT_EQ(EnvValue(env_line, "RANKD_RANK"), absl::StrCat(r));
    EXPECT_EQ(EnvValue(env_line, "RANKD_LOCAL_RANK"), absl::StrCat(r));
    EXPECT_EQ(EnvValue(env_line, "LOCAL_RANK"), absl::StrCat(r));
    EXPECT_EQ(EnvValue(env_line, "RANK"), absl::StrCat(r));
    EXPECT_EQ(EnvValue(env_line, "RANKD_WORLD_SIZE"), "2");
    EXPECT_EQ(EnvValue(env_line, "WORLD_SIZE"), "2");
    EXPECT_EQ(EnvValue(env_line, "RANKD_JOB_ID"), "two");
    EXPECT_TRUE(absl::StartsWith(EnvValue(env_line, "RANKD_TARGET"),
                                 "unix:///tmp/rankrun-"));
    // Its own token, minted by rankrun (docs/operations.md, "Credentials").
    EXPECT_EQ(EnvValue(env_line, "RANKD_RANK_TOKEN"), absl::StrCat("rank-", r));
    EXPECT_EQ(EnvValue(env_line, "RANKD_TOKEN_FILE"), "<unset>");
    EXPECT_THAT(out, HasSubstr(absl::StrCat(
                         label, "ARGS --join --gather --lr=", r, " --ws=2")));
  }
  // The daemon's output went to --rankd_log, not to rankrun's stderr; it
  // declares torch programs' store keys shared (python/rankd/torch.py).
  EXPECT_THAT(ReadFile(::testing::TempDir() + "/two.log"),
              HasSubstr(" kv_shared=torch/ "));
}

// The credentials rankrun makes for its daemon are gone before any rank
// starts: a rank runs as the same user and can read the daemon's
// --credentials_dir (/proc/PID/cmdline), and with the node key it could
// mint every other rank's token. Its own token is all it gets.
TEST(Rankrun, NoRankFindsTheNodeKeyOfTheCredentialsItMade) {
  RankrunJob run(
      {"--nproc_per_node=1", "--job_id=keyless", "--", "/bin/sh", "-c",
       "d=$(dirname \"${RANKD_TARGET#unix://}\"); "
       "if [ -e \"$d/credentials\" ]; then ls -a \"$d/credentials\"; "
       "echo KEY_FOUND; exit 3; fi; "
       "[ -n \"$RANKD_RANK_TOKEN\" ] && echo KEYLESS"});
  ASSERT_EQ(run.Wait(), 0) << run.Describe();
  EXPECT_THAT(run.out(), HasSubstr("KEYLESS")) << run.Describe();
}

TEST(Rankrun, AddsTorchToTheSharedPrefixesTheUserDeclares) {
  RankrunJob run({"--nproc_per_node=1", "--job_id=prefixes",
                  "--rankd_arg=--kv_shared_prefixes=mine/,leases/",
                  "--rankd_log=" + ::testing::TempDir() + "/prefixes.log", "--",
                  kEnvRank, "--join"});
  ASSERT_EQ(run.Wait(), 0) << run.Describe();
  EXPECT_THAT(ReadFile(::testing::TempDir() + "/prefixes.log"),
              HasSubstr(" kv_shared=mine/,leases/,torch/ "));
}

// Line `i` of rank `rank` as env_rank --lines writes it
// (launcher/testing/env_rank.cc).
std::string LongLine(int rank, int i, int bytes) {
  std::string line = absl::StrCat("L", rank, ":", i, ":");
  if (static_cast<int>(line.size()) < bytes) {
    line.append(bytes - line.size(), static_cast<char>('a' + rank % 26));
  }
  return line;
}

// `out`'s lines by the rank of their "[rank N] " label (label removed),
// without `skip`'s lines; `unlabelled` gets the first line without a label.
std::vector<std::vector<std::string>> LinesByRank(
    const std::string& out, int ranks, const std::vector<std::string>& skip,
    std::string& unlabelled) {
  std::vector<std::vector<std::string>> by_rank(ranks);
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    int rank = -1;
    for (int r = 0; r < ranks; ++r) {
      const std::string label = absl::StrCat("[rank ", r, "] ");
      if (absl::StartsWith(line, label)) {
        rank = r;
        line.remove_prefix(label.size());
      }
    }
    if (rank < 0) {
      if (unlabelled.empty()) unlabelled = std::string(line.substr(0, 200));
      continue;
    }
    bool skipped = false;
    for (const std::string& s : skip) skipped |= absl::StartsWith(line, s);
    if (!skipped) by_rank[rank].emplace_back(line);
  }
  return by_rank;
}

// The issue-35 report: two ranks writing long lines at once, each line in
// pieces (an unbuffered print() writes the text, then the newline), came
// out of rankrun mixed within lines. By default every line is one whole
// line of one rank, labelled with it, and the last line, which has no
// newline, is written when the rank exits.
TEST(Rankrun, LabelsEveryLineAndNeverMixesTwoRanksInOne) {
  constexpr int kLines = 300;
  constexpr int kBytes = 3000;
  RankrunJob run({"--nproc_per_node=2", "--job_id=lines",
                  "--rankd_log=" + ::testing::TempDir() + "/lines.log", "--",
                  kEnvRank, absl::StrCat("--lines=", kLines),
                  absl::StrCat("--line_bytes=", kBytes)});
  ASSERT_EQ(run.Wait(), 0) << run.err();
  const std::string out = run.out();
  std::string unlabelled;
  auto by_rank = LinesByRank(out, 2, {"ENV ", "ARGS "}, unlabelled);
  EXPECT_EQ(unlabelled, "") << "a line without a rank's label";
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> want;
    for (int i = 0; i < kLines; ++i) want.push_back(LongLine(r, i, kBytes));
    want.push_back(absl::StrCat("TAIL", r));
    ASSERT_EQ(by_rank[r].size(), want.size()) << "rank " << r;
    int wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (by_rank[r][i] != want[i]) {
        if (wrong++ == 0) {
          ADD_FAILURE() << "rank " << r << " line " << i << ": "
                        << by_rank[r][i].substr(0, 200);
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "rank " << r << ": lines not as written";
  }
  EXPECT_TRUE(absl::EndsWith(out, "\n"));
}

// The same with the report's program: Python, unbuffered (-u, as
// PYTHONUNBUFFERED=1), print() of long lines on two ranks at once.
TEST(Rankrun, UnbufferedPythonRanksKeepTheirLinesWhole) {
  constexpr char kProgram[] =
      "import os\n"
      "r = int(os.environ['RANK'])\n"
      "for i in range(300):\n"
      "    print(f'P{r}:{i}:' + chr(97 + r) * 2000)\n";
  RankrunJob run({"--nproc_per_node=2", "--job_id=py",
                  "--rankd_log=" + ::testing::TempDir() + "/py.log", "--",
                  "/usr/bin/python3", "-u", "-c", kProgram});
  ASSERT_EQ(run.Wait(), 0) << run.err();
  std::string unlabelled;
  auto by_rank = LinesByRank(run.out(), 2, {}, unlabelled);
  EXPECT_EQ(unlabelled, "") << "a line without a rank's label";
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(by_rank[r].size(), 300u) << "rank " << r;
    for (int i = 0; i < 300; ++i) {
      const std::string want =
          absl::StrCat("P", r, ":", i, ":", std::string(2000, 'a' + r));
      if (by_rank[r][i] != want) {
        ADD_FAILURE() << "rank " << r << " line " << i << ": "
                      << by_rank[r][i].substr(0, 200);
        break;
      }
    }
  }
}

// --prefix_output=false: the process writes to rankrun's stdout itself,
// byte for byte: no label, and its last line keeps its missing newline.
TEST(Rankrun, WithoutPrefixesOutputPassesThroughByteForByte) {
  RankrunJob run({"--nproc_per_node=1", "--job_id=raw", "--prefix_output=false",
                  "--rankd_log=" + ::testing::TempDir() + "/raw.log", "--",
                  kEnvRank, "--lines=50", "--line_bytes=3000"});
  ASSERT_EQ(run.Wait(), 0) << run.err();
  std::string want;
  for (int i = 0; i < 50; ++i)
    absl::StrAppend(&want, LongLine(0, i, 3000), "\n");
  absl::StrAppend(&want, "TAIL0");
  const std::string out = run.out();
  EXPECT_TRUE(absl::EndsWith(out, want)) << out.substr(0, 300);
  EXPECT_TRUE(absl::StartsWith(out, "ENV ")) << out.substr(0, 300);
  EXPECT_THAT(out, Not(HasSubstr("[rank ")));
}

TEST(Rankrun, AFailedRankStopsTheOthersAndIsNamed) {
  RankrunJob run({"--nproc_per_node=3", "--stop_grace_ms=2000", kEnvRank,
                  "--fail_rank=1", "--fail_code=3", "--sleep_ms=60000"});
  const absl::Time start = absl::Now();
  EXPECT_EQ(run.Wait(), 3) << run.Describe();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_THAT(run.err(), HasSubstr("local rank 1 (rank 1, pid "));
  EXPECT_THAT(run.err(),
              HasSubstr("exited with status 3; stopped the other 2 process"));
}

TEST(Rankrun, AKilledRankGivesItsSignalAsTheExitStatus) {
  RankrunJob run(
      {"--nproc_per_node=2", kEnvRank, "--kill_rank=0", "--sleep_ms=60000"});
  EXPECT_EQ(run.Wait(), 128 + SIGKILL) << run.Describe();
  EXPECT_THAT(run.err(), HasSubstr("local rank 0 (rank 0, pid "));
  EXPECT_THAT(run.err(), HasSubstr("was killed by signal 9"));
}

TEST(Rankrun, ForwardsSigtermToEveryRank) {
  RankrunJob run(
      {"--nproc_per_node=2", kEnvRank, "--term_exit=0", "--sleep_ms=60000"});
  ASSERT_TRUE(run.WaitForLines("SLEEPING", 2)) << run.Describe();
  ::kill(run.pid(), SIGTERM);
  EXPECT_EQ(run.Wait(), 0) << run.Describe();
  EXPECT_EQ(run.Lines("TERM").size(), 2u) << run.Describe();
  EXPECT_THAT(run.err(), HasSubstr("received SIGTERM; forwarded it to the 2 "
                                   "process(es): every one exited 0"));
}

TEST(Rankrun, KillsARankThatIgnoresSigtermAfterTheGrace) {
  RankrunJob run({"--nproc_per_node=2", "--stop_grace_ms=300", kEnvRank,
                  "--ignore_term", "--fail_rank=1", "--fail_code=7",
                  "--sleep_ms=60000"});
  const absl::Time start = absl::Now();
  EXPECT_EQ(run.Wait(), 7) << run.Describe();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_THAT(run.err(), HasSubstr("stopped the other 1 process(es)"));
}

TEST(Rankrun, LeavesNothingOfTheRanksBehind) {
  RankrunJob run({"--nproc_per_node=1", kEnvRank, "--grandchild"});
  EXPECT_EQ(run.Wait(), 0) << run.Describe();
  std::vector<std::string> lines = run.Lines("GRANDCHILD pid=");
  ASSERT_EQ(lines.size(), 1u) << run.Describe();
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(lines[0].substr(strlen("GRANDCHILD pid=")),
                               &grandchild));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Alive(grandchild) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(Alive(grandchild)) << "pid " << grandchild;
}

TEST(Rankrun, KillingRankrunKillsItsRanks) {
  RankrunJob run({"--nproc_per_node=2", kEnvRank, "--sleep_ms=60000"});
  ASSERT_TRUE(run.WaitForLines("SLEEPING", 2)) << run.Describe();
  std::vector<int> ranks;
  for (const std::string& line : run.Lines("SLEEPING pid=")) {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(line.substr(strlen("SLEEPING pid=")), &pid));
    ranks.push_back(pid);
  }
  ::kill(run.pid(), SIGKILL);
  EXPECT_EQ(run.Wait(), 128 + SIGKILL);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (int pid : ranks) {
    while (Alive(pid) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_FALSE(Alive(pid)) << "rank pid " << pid;
  }
  // A killed rankrun cannot remove its folder (the daemon's socket and
  // credentials): the test does.
  const std::string err = run.err();
  const size_t at = err.find("unix:///tmp/rankrun-");
  if (at != std::string::npos) {
    const std::string dir =
        err.substr(at + strlen("unix://"), strlen("/tmp/rankrun-XXXXXX"));
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

TEST(Rankrun, RefusesBadCommandLinesWithUsageStatus) {
  {
    RankrunJob run({"--nproc_per_node=0", kEnvRank});
    EXPECT_EQ(run.Wait(), 2);
    EXPECT_THAT(run.err(),
                HasSubstr("--nproc_per_node=0 is not a whole number"));
  }
  {
    RankrunJob run({"--nproc_per_node=1"});
    EXPECT_EQ(run.Wait(), 2);
    EXPECT_THAT(run.err(), HasSubstr("missing PROGRAM"));
  }
  {
    RankrunJob run({"--nproc_per_node=1", "/nonexistent/program"});
    EXPECT_EQ(run.Wait(), 2);
    EXPECT_THAT(run.err(), HasSubstr("PROGRAM /nonexistent/program is not an "
                                     "executable file"));
  }
  {
    RankrunJob run({"--nnodes=2", "--node_rank=2", kEnvRank});
    EXPECT_EQ(run.Wait(), 2);
    EXPECT_THAT(run.err(),
                HasSubstr("--node_rank=2 must be below --nnodes(2)"));
  }
}

TEST(Rankrun, HelpListsTheOptionsAndExitsZero) {
  RankrunJob run({"--help"});
  EXPECT_EQ(run.Wait(), 0);
  for (const char* option :
       {"--nproc_per_node", "--nnodes", "--node_rank", "--coordinator",
        "--tensor_parallel", "--daemon"}) {
    EXPECT_THAT(run.out(), HasSubstr(option));
  }
}

// A daemon the test starts itself, for --daemon=reuse.
struct OwnDaemon {
  std::string dir;
  std::string socket;
  StartedDaemon daemon;
};

absl::StatusOr<OwnDaemon> StartOwnDaemon(
    int nproc_per_node, std::vector<std::string> extra_flags = {}) {
  OwnDaemon d;
  d.dir = ShortTempDir();
  d.socket = d.dir + "/rankd.sock";
  if (absl::Status s = CreateCredentials(d.dir + "/creds"); !s.ok()) return s;
  const int log = ::open((::testing::TempDir() + "/own-rankd.log").c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  std::vector<std::string> argv = {
      kRankd,
      "--job_id=shared",
      "--nnodes=1",
      "--node_index=0",
      absl::StrCat("--nproc_per_node=", nproc_per_node),
      absl::StrCat("--world_size=", nproc_per_node),
      "--socket=" + d.socket,
      absl::StrCat("--listen=127.0.0.1:", FreePort()),
      "--credentials_dir=" + d.dir + "/creds"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  absl::StatusOr<StartedDaemon> started =
      StartedDaemon::Start(argv, {"PATH=/usr/bin:/bin"}, log);
  ::close(log);
  if (!started.ok()) return started.status();
  d.daemon = *std::move(started);
  ClientOptions client;
  client.target = "unix://" + d.socket;
  if (absl::Status s = WaitUntilReady(client, absl::Now() + absl::Seconds(30),
                                      [] { return absl::OkStatus(); });
      !s.ok()) {
    return s;
  }
  return d;
}

TEST(Rankrun, ReusesARunningDaemonAndTakesItsSizes) {
  absl::StatusOr<OwnDaemon> d = StartOwnDaemon(2);
  ASSERT_TRUE(d.ok()) << d.status();
  RankrunJob run({"--daemon=reuse", "--rankd_socket=" + d->socket,
                  "--credentials_dir=" + d->dir + "/creds", kEnvRank, "--join",
                  "--gather"});
  EXPECT_EQ(run.Wait(), 0) << run.Describe();
  EXPECT_EQ(run.Lines("GATHERED 0,1").size(), 2u) << run.Describe();
  EXPECT_THAT(run.err(),
              HasSubstr("job 'shared': node 0 of 1, ranks 0-1 of 2"));
  EXPECT_THAT(run.err(), HasSubstr("reusing rankd at unix://" + d->socket));
  // The daemon is the test's: rankrun leaves it running.
  EXPECT_TRUE(Alive(d->daemon.pid()));
  std::error_code ignored;
  d->daemon.Stop(absl::Seconds(5));
  std::filesystem::remove_all(d->dir, ignored);
}

// Beside a daemon it did not start and without the job's credentials (a
// Kubernetes sidecar), rankrun gets the ranks' tokens from the daemon,
// which hands them out once: a later caller (a rank that went bad) gets
// none. A daemon that does not issue them is refused clearly.
TEST(Rankrun, ReusesASidecarThatIssuesTheRankTokensOnce) {
  absl::StatusOr<OwnDaemon> d = StartOwnDaemon(2, {"--issue_rank_tokens=true"});
  ASSERT_TRUE(d.ok()) << d.status();
  {
    RankrunJob run({"--daemon=reuse", "--rankd_socket=" + d->socket, kEnvRank,
                    "--join", "--gather"});
    EXPECT_EQ(run.Wait(), 0) << run.Describe();
    EXPECT_EQ(run.Lines("GATHERED 0,1").size(), 2u) << run.Describe();
    std::vector<std::string> tokens;
    for (const std::string& line : run.Lines("ENV ")) {
      tokens.push_back(EnvValue(line, "RANKD_RANK_TOKEN"));
    }
    std::sort(tokens.begin(), tokens.end());
    EXPECT_EQ(tokens, (std::vector<std::string>{"rank-0", "rank-1"}));
  }
  {
    RankrunJob again(
        {"--daemon=reuse", "--rankd_socket=" + d->socket, kEnvRank, "--join"});
    EXPECT_EQ(again.Wait(), 1) << again.Describe();
    EXPECT_THAT(again.err(), HasSubstr("rank tokens were issued already"));
    EXPECT_THAT(again.out(), Not(HasSubstr("ENV ")));
  }
  std::error_code ignored;
  d->daemon.Stop(absl::Seconds(5));
  std::filesystem::remove_all(d->dir, ignored);

  absl::StatusOr<OwnDaemon> plain = StartOwnDaemon(1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  RankrunJob refused({"--daemon=reuse", "--rankd_socket=" + plain->socket,
                      kEnvRank, "--join"});
  EXPECT_EQ(refused.Wait(), 1) << refused.Describe();
  EXPECT_THAT(refused.err(), HasSubstr("does not issue rank tokens"));
  EXPECT_THAT(refused.err(), HasSubstr("--issue_rank_tokens=true"));
  plain->daemon.Stop(absl::Seconds(5));
  std::filesystem::remove_all(plain->dir, ignored);
}

TEST(Rankrun, RefusesOptionsThatContradictTheReusedDaemon) {
  absl::StatusOr<OwnDaemon> d = StartOwnDaemon(2);
  ASSERT_TRUE(d.ok()) << d.status();
  RankrunJob run({"--daemon=reuse", "--rankd_socket=" + d->socket,
                  "--nproc_per_node=4", kEnvRank});
  EXPECT_EQ(run.Wait(), 2) << run.Describe();
  EXPECT_THAT(run.err(), HasSubstr("serves job 'shared'"));
  EXPECT_THAT(run.err(), HasSubstr("--nproc_per_node=4 (the daemon's 2)"));
  EXPECT_THAT(run.out(), Not(HasSubstr("ENV ")));  // Nothing was started.
  std::error_code ignored;
  d->daemon.Stop(absl::Seconds(5));
  std::filesystem::remove_all(d->dir, ignored);
}

TEST(Rankrun, ReuseWithoutADaemonFailsWithinItsTimeout) {
  const std::string dir = ShortTempDir();
  const absl::Time start = absl::Now();
  RankrunJob run({"--daemon=reuse", "--rankd_socket=" + dir + "/none.sock",
                  "--daemon_timeout_ms=500", kEnvRank});
  EXPECT_EQ(run.Wait(), 1) << run.Describe();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_THAT(run.err(), HasSubstr(dir + "/none.sock"));
  EXPECT_THAT(run.err(), HasSubstr("--daemon=reuse never starts one"));
  ::rmdir(dir.c_str());
}

TEST(Rankrun, TwoNodesEachWithItsOwnDaemonFormOneJob) {
  const std::string dir = ShortTempDir();
  ASSERT_TRUE(CreateCredentials(dir + "/creds").ok());
  const std::string coordinator = absl::StrCat("127.0.0.1:", FreePort());
  auto node = [&](int index) {
    return std::vector<std::string>{
        "--nnodes=2", absl::StrCat("--node_rank=", index), "--nproc_per_node=1",
        "--daemon=start", "--job_id=pair", "--coordinator=" + coordinator,
        "--credentials_dir=" + dir + "/creds",
        absl::StrCat("--rankd_log=", ::testing::TempDir(), "/node", index,
                     ".log"),
        // Node 0's daemon coordinates: it stays until node 1's rank left.
        index == 0 ? "--exit_delay_ms=2000" : "--exit_delay_ms=0", kEnvRank,
        "--join", "--gather"};
  };
  RankrunJob node0(node(0));
  RankrunJob node1(node(1));
  EXPECT_EQ(node1.Wait(), 0) << node1.Describe();
  EXPECT_EQ(node0.Wait(), 0) << node0.Describe();
  EXPECT_EQ(node0.Lines("GATHERED 0,1").size(), 1u) << node0.Describe();
  EXPECT_EQ(node1.Lines("GATHERED 0,1").size(), 1u) << node1.Describe();
  EXPECT_THAT(node1.err(),
              HasSubstr("job 'pair': node 1 of 2, ranks 1-1 of 2"));
  EXPECT_EQ(EnvValue(node1.Lines("ENV ").at(0), "RANKD_RANK"), "1");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// The job as the daemon at `socket` reports it, until `done` holds or
// `timeout` passes; the last status read (or error) either way.
absl::StatusOr<v1::JobStatus> AwaitJob(
    const std::string& socket,
    const std::function<bool(const v1::JobStatus&)>& done,
    absl::Duration timeout = absl::Seconds(30)) {
  ClientOptions options;
  options.target = "unix://" + socket;
  options.connect_timeout = absl::Seconds(5);
  options.call_timeout = absl::Seconds(5);
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<v1::JobStatus> job = absl::UnavailableError("never asked");
  while (absl::Now() < deadline) {
    absl::StatusOr<std::unique_ptr<AdminClient>> admin =
        AdminClient::Connect(options);
    if (admin.ok()) {
      job = (*admin)->GetJob();
      if (job.ok() && done(*job)) return job;
    } else {
      job = admin.status();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return job;
}

// Lines of `text` that contain `part`.
size_t CountLinesWith(const std::string& text, absl::string_view part) {
  size_t n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, part)) ++n;
  }
  return n;
}

// issue 38, part 3: rank 1 joins, then dies by SIGKILL in its first life;
// rankrun starts a new process for rank 1 (same rank, same token,
// RANKD_RESTART_COUNT=1), whose join the daemon (--recovery=on, set by
// rankrun) takes into epoch 2: the job goes RECOVERING, then READY at
// epoch 2 once the survivor, rank 0, joined epoch 2 again (Client::Rejoin,
// as a serving process does); SIGTERM then ends the run cleanly,
// restarting nothing.
TEST(Rankrun, RestartsAKilledRankIntoItsSlotAtTheNextEpoch) {
  const std::string dir = ShortTempDir();
  ASSERT_FALSE(dir.empty());
  const std::string socket = dir + "/rankd.sock";
  RankrunJob run({"--nproc_per_node=2", "--job_id=restarts", "--max_restarts=1",
                  "--restart_backoff_ms=100", "--recovery_deadline_ms=30000",
                  "--stop_grace_ms=5000", "--rankd_socket=" + socket,
                  "--rankd_log=" + ::testing::TempDir() + "/restarts.log", "--",
                  kEnvRank, "--join", "--kill_after_join_rank=1",
                  "--kill_lives=1", "--hold", "--rejoin", "--term_exit=0"});
  // Rank 0 holds, rank 1 joined twice (its first life, then its
  // replacement).
  ASSERT_TRUE(run.WaitForLines("JOINED rank=1 ", 2)) << run.Describe();
  ASSERT_TRUE(run.WaitForLines("JOINED rank=0 ", 1)) << run.Describe();
  absl::StatusOr<v1::JobStatus> job =
      AwaitJob(socket, [](const v1::JobStatus& j) {
        return j.state() == v1::JOB_STATE_READY && j.epoch() == 2;
      });
  ASSERT_TRUE(job.ok()) << job.status() << "\n" << run.Describe();
  EXPECT_EQ(job->state(), v1::JOB_STATE_READY) << job->DebugString();
  EXPECT_EQ(job->epoch(), 2u) << job->DebugString();
  // The way there, from the event log: READY at epoch 1, RECOVERING at
  // epoch 2 for rank 1, READY at epoch 2; nothing failed.
  std::vector<std::string> kinds;
  {
    ClientOptions options;
    options.target = "unix://" + socket;
    options.connect_timeout = absl::Seconds(5);
    options.call_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<AdminClient>> admin =
        AdminClient::Connect(options);
    ASSERT_TRUE(admin.ok()) << admin.status();
    ASSERT_TRUE((*admin)
                    ->WatchEvents(
                        0,
                        [&](const v1::JobEvent& e) {
                          if (e.kind() == v1::EVENT_KIND_JOB_RECOVERING) {
                            EXPECT_THAT(e.ranks(), ::testing::ElementsAre(1u))
                                << e.DebugString();
                          }
                          if (e.kind() == v1::EVENT_KIND_JOB_READY ||
                              e.kind() == v1::EVENT_KIND_JOB_RECOVERING ||
                              e.kind() == v1::EVENT_KIND_JOB_FAILED) {
                            kinds.push_back(
                                absl::StrCat(v1::EventKind_Name(e.kind()), "@",
                                             std::max<uint64_t>(e.epoch(), 1)));
                          }
                          // Stop at READY at epoch 2 (already logged).
                          return !(e.kind() == v1::EVENT_KIND_JOB_READY &&
                                   e.epoch() == 2);
                        },
                        absl::Seconds(10))
                    .ok());
  }
  EXPECT_THAT(kinds, ::testing::ElementsAre("EVENT_KIND_JOB_READY@1",
                                            "EVENT_KIND_JOB_RECOVERING@2",
                                            "EVENT_KIND_JOB_READY@2"));

  EXPECT_THAT(run.err(), HasSubstr("rank 1 (local rank 1, pid "));
  EXPECT_THAT(run.err(), HasSubstr("was killed by signal 9"));
  EXPECT_THAT(run.err(), HasSubstr("restarting it (restart 1 of 1)"));
  std::vector<std::string> rank1_env;
  for (absl::string_view line : absl::StrSplit(run.out(), '\n')) {
    if (absl::StartsWith(line, "[rank 1] ENV ")) {
      rank1_env.emplace_back(line);
    }
  }
  ASSERT_EQ(rank1_env.size(), 2u) << run.Describe();
  EXPECT_EQ(EnvValue(rank1_env[0], "RANKD_RESTART_COUNT"), "0");
  EXPECT_EQ(EnvValue(rank1_env[1], "RANKD_RESTART_COUNT"), "1");
  EXPECT_EQ(EnvValue(rank1_env[1], "RANK"), "1");
  EXPECT_EQ(EnvValue(rank1_env[1], "LOCAL_RANK"), "1");
  EXPECT_EQ(EnvValue(rank1_env[1], "RANKD_RANK_TOKEN"), "rank-1");
  EXPECT_NE(EnvValue(rank1_env[0], "pid"), EnvValue(rank1_env[1], "pid"));

  ASSERT_EQ(::kill(run.pid(), SIGTERM), 0);
  EXPECT_EQ(run.Wait(), 0) << run.Describe();
  EXPECT_EQ(CountLinesWith(run.err(), "restarting it"), 1u) << run.Describe();
  EXPECT_EQ(run.Lines("TERM").size(), 2u) << run.Describe();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// A rank that keeps failing is restarted --max_restarts times and then
// fails the run as without restarts, naming it. Rank 0 leads the ranks'
// process group, so its restarts also show that a new process joins the
// group of an exited leader.
TEST(Rankrun, ARankOutOfRestartsFailsTheRunNamingIt) {
  RankrunJob run({"--nproc_per_node=2", "--max_restarts=2",
                  "--restart_backoff_ms=50", "--stop_grace_ms=2000", kEnvRank,
                  "--kill_rank=0", "--sleep_ms=60000", "--term_exit=0"});
  EXPECT_EQ(run.Wait(), 128 + SIGKILL) << run.Describe();
  EXPECT_THAT(run.err(), HasSubstr("restarting it (restart 1 of 2)"));
  EXPECT_THAT(run.err(), HasSubstr("restarting it (restart 2 of 2)"));
  EXPECT_EQ(CountLinesWith(run.err(), "restarting it"), 2u) << run.Describe();
  EXPECT_THAT(run.err(), HasSubstr("local rank 0 (rank 0, pid "));
  EXPECT_THAT(run.err(), HasSubstr("after 2 restart(s), its last; stopped "
                                   "the other 1 process(es)"));
  size_t rank0_lives = 0;
  for (absl::string_view line : absl::StrSplit(run.out(), '\n')) {
    if (absl::StartsWith(line, "[rank 0] ENV ")) ++rank0_lives;
  }
  EXPECT_EQ(rank0_lives, 3u) << run.Describe();
  EXPECT_EQ(run.Lines("TERM").size(), 1u) << run.Describe();
}

// Whether `pid` is a process that has not exited (a zombie has).
bool Running(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() &&
         line[paren + 2] != 'Z';
}

// What a failed rank started itself (a worker still holding its memory,
// ports and token) is stopped before its replacement starts, and the other
// rank's own worker is left alone.
TEST(Rankrun, ARestartStopsWhatTheFailedRankLeftRunning) {
  RankrunJob run({"--nproc_per_node=2", "--max_restarts=1",
                  "--restart_backoff_ms=50", "--stop_grace_ms=2000", kEnvRank,
                  "--grandchild", "--kill_rank=0", "--kill_lives=1",
                  "--sleep_ms=60000", "--term_exit=0"});
  // Rank 0's first life and rank 1 each started a worker; rank 0's second
  // life (which lives on) starts one too.
  ASSERT_TRUE(run.WaitForLines("GRANDCHILD pid=", 3)) << run.Describe();
  std::vector<int> workers;
  for (absl::string_view line : absl::StrSplit(run.out(), '\n')) {
    int pid = 0;
    if (absl::ConsumePrefix(&line, "[rank 0] GRANDCHILD pid=") &&
        absl::SimpleAtoi(line, &pid)) {
      workers.push_back(pid);
    }
  }
  ASSERT_GE(workers.size(), 1u) << run.Describe();
  ASSERT_EQ(workers.size(), 2u) << run.Describe();
  // While the second life runs, the first life's worker is gone and the
  // second's is not.
  EXPECT_FALSE(Running(workers[0])) << "pid " << workers[0];
  EXPECT_TRUE(Running(workers[1])) << "pid " << workers[1];
  ::kill(run.pid(), SIGTERM);
  EXPECT_GE(run.Wait(), 0) << run.Describe();
}

// Restarts are for failures: a rank that exits 0 is done, and the run
// ends 0 without restarting anything.
TEST(Rankrun, NeverRestartsARankThatExitedZero) {
  RankrunJob run({"--nproc_per_node=2", "--job_id=clean", "--max_restarts=3",
                  "--restart_backoff_ms=50",
                  "--rankd_log=" + ::testing::TempDir() + "/clean.log",
                  kEnvRank, "--join", "--gather"});
  ASSERT_EQ(run.Wait(), 0) << run.Describe();
  EXPECT_EQ(run.Lines("GATHERED 0,1").size(), 2u) << run.Describe();
  EXPECT_EQ(run.Lines("ENV ").size(), 2u) << run.Describe();
  EXPECT_THAT(run.err(), Not(HasSubstr("restarting")));
}

// Without --max_restarts a killed rank stops the job at once: no restart.
TEST(Rankrun, WithoutMaxRestartsAFailedRankIsNeverRestarted) {
  RankrunJob run({"--nproc_per_node=2", "--stop_grace_ms=2000", kEnvRank,
                  "--kill_rank=1", "--sleep_ms=60000", "--term_exit=0"});
  EXPECT_EQ(run.Wait(), 128 + SIGKILL) << run.Describe();
  EXPECT_THAT(run.err(), Not(HasSubstr("restarting")));
  EXPECT_THAT(run.err(), HasSubstr("local rank 1 (rank 1, pid "));
  EXPECT_THAT(run.err(), Not(HasSubstr("restart(s)")));
  // Rank 1 ran once (rank 0 may be stopped before it prints anything).
  EXPECT_EQ(CountLinesWith(run.out(), "[rank 1] ENV "), 1u) << run.Describe();
}

// --recovery=domain starts the daemon recovering by replica: with dp = 2
// (two ranks of the default topology) the join says so.
TEST(Rankrun, RecoveryByDomainReachesTheDaemonItStarts) {
  RankrunJob run({"--nproc_per_node=2", "--job_id=by-domain",
                  "--max_restarts=1", "--recovery=domain",
                  "--stop_grace_ms=5000", "--", kEnvRank, "--join", "--hold",
                  "--term_exit=0"});
  ASSERT_TRUE(run.WaitForLines("HOLDING", 2)) << run.Describe();
  const std::vector<std::string> joined = run.Lines("JOINED rank=");
  ASSERT_EQ(joined.size(), 2u) << run.Describe();
  for (const std::string& line : joined) {
    EXPECT_THAT(line, HasSubstr("recovery_by_domain=1")) << run.Describe();
  }
  ASSERT_EQ(::kill(run.pid(), SIGTERM), 0);
  EXPECT_EQ(run.Wait(), 0) << run.Describe();
}

TEST(Rankrun, RefusesRecoveryFlagsThatContradictMaxRestarts) {
  {
    RankrunJob run({"--recovery_deadline_ms=5000", kEnvRank});
    EXPECT_EQ(run.Wait(), 2);
    EXPECT_THAT(run.err(), HasSubstr("needs --max_restarts above 0"));
  }
  {
    RankrunJob run(
        {"--max_restarts=1", "--rankd_arg=--recovery=off", kEnvRank});
    EXPECT_EQ(run.Wait(), 2);
    EXPECT_THAT(run.err(),
                HasSubstr("rankrun sets the daemon's --recovery itself"));
  }
  {
    RankrunJob run({"--max_restarts=1001", kEnvRank});
    EXPECT_EQ(run.Wait(), 2);
    EXPECT_THAT(run.err(), HasSubstr("--max_restarts=1001 is not a whole"));
  }
}

}  // namespace
}  // namespace rankd::launcher
