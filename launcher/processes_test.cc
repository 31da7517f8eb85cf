// ChildProcess, ProcessGroup and LinePrefixer with real processes
// (/bin/sh, /bin/sleep) and real pipes.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/child_process.h"
#include "launcher/line_prefixer.h"
#include "launcher/process_group.h"

namespace rankd::launcher {
namespace {

using ::testing::HasSubstr;

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0; }

TEST(LinePrefixer, LabelsWholeLinesOnly) {
  LinePrefixer p("[rank 3] ");
  EXPECT_EQ(p.Feed("hel"), "");
  EXPECT_EQ(p.Feed("lo\nwor"), "[rank 3] hello\n");
  EXPECT_EQ(p.Feed("ld\n\nx"), "[rank 3] world\n[rank 3] \n");
  EXPECT_EQ(p.Flush(), "[rank 3] x\n");
  EXPECT_EQ(p.Flush(), "");
}

TEST(LinePrefixer, SplitsOverlongLines) {
  LinePrefixer p("> ");
  const std::string big(LinePrefixer::kMaxLineBytes + 10, 'a');
  const std::string out = p.Feed(big);
  EXPECT_EQ(
      out,
      absl::StrCat("> ", std::string(LinePrefixer::kMaxLineBytes, 'a'), "\n"));
  EXPECT_EQ(p.Feed("\n"), absl::StrCat("> ", std::string(10, 'a'), "\n"));
}

TEST(ChildProcess, ExitStatusAndSignals) {
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn({{"/bin/sh", "-c", "exit 3"}, {}});
  ASSERT_TRUE(child.ok()) << child.status();
  std::optional<int> status = child->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*status), "exited with status 3");
  EXPECT_EQ(ShellStatus(*status), 3);
  // Exited but not reaped: the pid is still ours.
  EXPECT_TRUE(Alive(child->pid()));
  EXPECT_EQ(child->Reap(), status);
  EXPECT_FALSE(Alive(child->pid()));

  // The status a rankd library ends a process with says what it means.
  absl::StatusOr<ChildProcess> hung =
      ChildProcess::Spawn({{"/bin/sh", "-c", "exit 86"}, {}});
  ASSERT_TRUE(hung.ok()) << hung.status();
  std::optional<int> hung_status = hung->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(hung_status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*hung_status),
            "exited with status 86 (its NCCL abort hung: the GPU did not let "
            "the communicators go; see docs/operations.md, \"Exit statuses\")");
  hung->Reap();

  child = ChildProcess::Spawn({{"/bin/sleep", "30"}, {}});
  ASSERT_TRUE(child.ok());
  EXPECT_TRUE(child->running());
  child->Signal(SIGKILL);
  status = child->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(DescribeWaitStatus(*status), "was killed by signal 9 (Killed)");
  EXPECT_EQ(ShellStatus(*status), 137);
}

TEST(ChildProcess, ExecFailureIsReportedBySpawn) {
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn({{"/nonexistent/program"}, {}});
  ASSERT_FALSE(child.ok());
  EXPECT_THAT(child.status().message(),
              HasSubstr("cannot run /nonexistent/program: No such file"));
}

TEST(ChildProcess, DestructorKillsAndReaps) {
  pid_t pid;
  {
    absl::StatusOr<ChildProcess> child =
        ChildProcess::Spawn({{"/bin/sleep", "30"}, {}});
    ASSERT_TRUE(child.ok());
    pid = child->pid();
    EXPECT_TRUE(Alive(pid));
  }
  EXPECT_FALSE(Alive(pid));
}

TEST(ChildProcess, GetsTheEnvironmentItIsGiven) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(
      {{"/bin/sh", "-c", "echo \"$ONLY\" \"${HOME:-nohome}\""},
       {"ONLY=this"},
       0,
       fds[1],
       -1});
  ::close(fds[1]);
  ASSERT_TRUE(child.ok());
  char buffer[64] = {};
  ssize_t n = ::read(fds[0], buffer, sizeof(buffer) - 1);
  ::close(fds[0]);
  EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "this nohome\n");
  EXPECT_EQ(child->WaitFor(absl::Seconds(10)), 0);
}

// Whether `pid` is gone (not even a zombie) within `timeout`.
bool GoneWithin(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Alive(pid)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// The first exits PollExits reports (within 10 s; none after).
std::vector<size_t> FirstExits(ProcessGroup& group) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<size_t> exits;
  while (exits.empty() && absl::Now() < deadline) {
    exits = group.PollExits();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return exits;
}

TEST(ProcessGroup, SignalsTheGroupAndFinishKillsWhatIsLeft) {
  ProcessGroup group(/*prefix_output=*/false);
  const std::string pidfile = ::testing::TempDir() + "/grandchild.pid";
  ::unlink(pidfile.c_str());
  // Process 0 leaves a grandchild that ignores SIGTERM and exits at once;
  // process 1 sleeps until signalled.
  ASSERT_TRUE(
      group
          .Start({"/bin/sh", "-c",
                  "(trap '' TERM; exec sleep 30) & echo $! > " + pidfile},
                 {}, "[rank 0] ")
          .ok());
  ASSERT_TRUE(group.Start({"/bin/sleep", "30"}, {}, "[rank 1] ").ok());
  EXPECT_EQ(group.size(), 2u);
  // Each leads its own group.
  EXPECT_EQ(::getpgid(group.pid(0)), group.pid(0));
  EXPECT_EQ(::getpgid(group.pid(1)), group.pid(1));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<size_t> exits = FirstExits(group);
  ASSERT_EQ(exits, std::vector<size_t>{0});
  EXPECT_EQ(group.status(0), 0);
  EXPECT_TRUE(group.PollExits().empty());  // Each exit is reported once.
  pid_t grandchild = 0;
  if (FILE* in = std::fopen(pidfile.c_str(), "r")) {
    if (std::fscanf(in, "%d", &grandchild) != 1) grandchild = 0;
    std::fclose(in);
  }
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(::getpgid(grandchild), group.pid(0));

  group.Signal(SIGTERM);
  while (exits.size() < 2 && absl::Now() < deadline) {
    for (size_t i : group.PollExits()) exits.push_back(i);
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(DescribeWaitStatus(*group.status(1)),
            "was killed by signal 15 (Terminated)");
  EXPECT_EQ(group.CountRunning(), 0u);
  EXPECT_TRUE(Alive(grandchild));  // It ignores SIGTERM.
  const pid_t first = group.pid(0);
  group.Finish(absl::Seconds(1));
  EXPECT_TRUE(GoneWithin(grandchild, absl::Seconds(10)));
  EXPECT_FALSE(Alive(first));
}

// The pid `path` holds, once a process wrote it (0 after 10 s).
pid_t PidIn(const std::string& path) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    pid_t pid = 0;
    if (FILE* in = std::fopen(path.c_str(), "r")) {
      if (std::fscanf(in, "%d", &pid) != 1) pid = 0;
      std::fclose(in);
    }
    if (pid > 0) return pid;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return 0;
}

// A failed rank's leftovers go before its restart: KillGroupOf stops what
// one process left running, and nothing of another's.
TEST(ProcessGroup, KillGroupOfStopsOneProcesssLeftoversOnly) {
  ProcessGroup group(/*prefix_output=*/false);
  const std::string dir = ::testing::TempDir();
  const std::string left0 = dir + "/left0.pid", left1 = dir + "/left1.pid";
  ::unlink(left0.c_str());
  ::unlink(left1.c_str());
  ASSERT_TRUE(group
                  .Start({"/bin/sh", "-c", "sleep 30 & echo $! > " + left0}, {},
                         "[rank 0] ")
                  .ok());
  ASSERT_TRUE(group
                  .Start({"/bin/sh", "-c",
                          "sleep 30 & echo $! > " + left1 + "; exec sleep 30"},
                         {}, "[rank 1] ")
                  .ok());
  const pid_t worker0 = PidIn(left0), worker1 = PidIn(left1);
  ASSERT_GT(worker0, 0);
  ASSERT_GT(worker1, 0);
  std::vector<size_t> exits = FirstExits(group);
  ASSERT_EQ(exits, std::vector<size_t>{0});
  EXPECT_TRUE(Alive(worker0));
  group.KillGroupOf(0);
  EXPECT_TRUE(GoneWithin(worker0, absl::Seconds(10)));
  EXPECT_TRUE(Alive(worker1));
  EXPECT_TRUE(Alive(group.pid(1)));
  EXPECT_TRUE(group.Contains(group.pid(1)));
  EXPECT_FALSE(group.Contains(worker1));
  group.Signal(SIGKILL);
  group.Finish(absl::Seconds(1));
  EXPECT_TRUE(GoneWithin(worker1, absl::Seconds(10)));
}

// rankrun as PID 1 is the parent of every orphan; here this process plays
// it as a subreaper: the orphan a child leaves is adopted, and reaped once
// it exits, while the process's own children are left to it.
TEST(ReapAdoptedOrphans, ReapsOrphansAndNeverOwnChildren) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const std::string path = ::testing::TempDir() + "/orphan.pid";
  ::unlink(path.c_str());
  absl::StatusOr<ChildProcess> own =
      ChildProcess::Spawn({{"/bin/sleep", "0.2"}, {}, 0, -1, -1});
  ASSERT_TRUE(own.ok());
  // Its parent exits at once; the orphan lives half a second.
  absl::StatusOr<ChildProcess> parent = ChildProcess::Spawn(
      {{"/bin/sh", "-c", "sleep 0.5 & echo $! > " + path}, {}, 0, -1, -1});
  ASSERT_TRUE(parent.ok());
  const pid_t orphan = PidIn(path);
  ASSERT_GT(orphan, 0);
  ASSERT_EQ(parent->WaitFor(absl::Seconds(10)), 0);
  ASSERT_TRUE(own->WaitFor(absl::Seconds(10)).has_value());
  const pid_t mine = own->pid();
  auto is_ours = [&](pid_t pid) { return pid == mine || pid == parent->pid(); };
  size_t reaped = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Alive(orphan) && absl::Now() < deadline) {
    reaped += ReapAdoptedOrphans(is_ours);
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_FALSE(Alive(orphan)) << "pid " << orphan << " left a zombie";
  EXPECT_EQ(reaped, 1u);
  // The own child is still there to be reaped by its owner.
  EXPECT_TRUE(own->Reap().has_value());
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(ProcessGroup, PrefixesEveryLine) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(fds[1], STDOUT_FILENO);
  ::close(fds[1]);
  {
    ProcessGroup group(/*prefix_output=*/true);
    ASSERT_TRUE(
        group.Start({"/bin/sh", "-c", "echo one; printf two"}, {}, "[rank 5] ")
            .ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (group.CountRunning() > 0 && absl::Now() < deadline) {
      for (int fd : group.OutputFds()) group.Pump(fd);
      absl::SleepFor(absl::Milliseconds(10));
    }
    group.Finish(absl::Seconds(2));
  }
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  char buffer[256] = {};
  ssize_t n = ::read(fds[0], buffer, sizeof(buffer) - 1);
  ::close(fds[0]);
  EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "[rank 5] one\n[rank 5] two\n");
}

}  // namespace
}  // namespace rankd::launcher
