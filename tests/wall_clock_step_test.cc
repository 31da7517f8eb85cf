// A real job stays healthy while its wall clock is stepped, as NTP, an
// operator's `date -s` or a virtual machine's host may do at any moment.
//
// Every daemon and rank process runs with tests/harness/wall_clock_shift.cc
// preloaded, which moves their CLOCK_REALTIME (absl::Now()) by a value this
// test writes, while the monotonic clock runs on. Heartbeat ages, deadlines
// and timers read common/monotonic_clock.h, so a step 30 s back and then a
// 60 s jump forward during rounds must cost nothing: no node is declared
// lost, no round misses its deadline. (Measured with the wall clock, the
// jump made both ends of a healthy job declare the other silent.) The test
// also checks that the step reached the daemons, so it cannot pass by the
// shim doing nothing.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/time_format.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

// The shift file the preloaded processes map, mapped writable here.
class WallClockShift {
 public:
  explicit WallClockShift(const std::string& path) : path_(path) {
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0 || ftruncate(fd_, sizeof(int64_t)) != 0) return;
    void* map = mmap(nullptr, sizeof(int64_t), PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd_, 0);
    if (map != MAP_FAILED) shift_ns_ = static_cast<int64_t*>(map);
  }
  ~WallClockShift() {
    if (shift_ns_ != nullptr) munmap(shift_ns_, sizeof(int64_t));
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return shift_ns_ != nullptr; }
  const std::string& path() const { return path_; }
  // The wall clock of every process preloaded with the shim reads real time
  // plus `shift` from now on.
  void Set(absl::Duration shift) {
    __atomic_store_n(shift_ns_, absl::ToInt64Nanoseconds(shift),
                     __ATOMIC_RELAXED);
  }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t* shift_ns_ = nullptr;
};

// The time stamp of the last line of a daemon log ("2026-...Z message").
absl::Time LastLogTime(const std::string& log) {
  absl::Time last = absl::InfinitePast();
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
    absl::Time when;
    std::string error;
    if (!words.empty() &&
        absl::ParseTime(kTimestampFormat, std::string(words[0]), &when,
                        &error)) {
      last = when;
    }
  }
  return last;
}

TEST(WallClockStepTest, JobRidesOutStepsBackAndForward) {
  ClusterOptions options;
  options.job_id = "clockstep";
  options.nnodes = 2;
  options.nproc_per_node = 2;
  options.heartbeat_interval_ms = 100;
  options.heartbeat_timeout_ms = 1000;
  LocalCluster cluster(options);
  WallClockShift shift(cluster.dir() + "/wall_clock_shift");
  ASSERT_TRUE(shift.ok()) << shift.path();
  cluster.mutable_options().env = {
      {"LD_PRELOAD", Runfile("tests/libwall_clock_shift.so")},
      {"RANKD_TEST_WALL_CLOCK_SHIFT_FILE", shift.path()},
  };
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;

  // About 5 s of rounds, each with a deadline shorter than the steps.
  auto workers = cluster.StartAllWorkers(
      {"--rounds=50", "--round_pause_ms=100", "--round_timeout_ms=5000"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  absl::SleepFor(absl::Seconds(1));
  shift.Set(absl::Seconds(-30));
  absl::SleepFor(absl::Seconds(1.5));
  shift.Set(absl::Seconds(30));

  std::vector<int> statuses = WaitAll(*workers, absl::Seconds(60));
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
        << "rank " << r << ": " << (*workers)[r].ReadLog();
    EXPECT_TRUE(absl::StrContains((*workers)[r].ReadLog(), "ROUNDS_OK n=50"))
        << "rank " << r << ": " << (*workers)[r].ReadLog();
  }
  for (uint32_t n = 0; n < options.nnodes; ++n) {
    const std::string log = cluster.daemon(n).ReadLog();
    EXPECT_FALSE(absl::StrContains(log, "lost")) << "node " << n << "\n" << log;
    // The daemon logged the ranks leaving on the stepped clock.
    EXPECT_GT(LastLogTime(log), absl::Now() + absl::Seconds(20))
        << "node " << n << ": the shim did not reach the daemon\n"
        << log;
  }
}

}  // namespace
}  // namespace rankd::testing
