// Unit tests for common/incarnation.h: never zero, different every call,
// from every thread, and in a forked child.

#include "common/incarnation.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

TEST(NewIncarnationTest, NeverZeroAndNeverRepeats) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t v = NewIncarnation();
    EXPECT_NE(v, 0u);
    EXPECT_TRUE(seen.insert(v).second) << "repeated " << v;
  }
}

TEST(NewIncarnationTest, UsesAllSixtyFourBits) {
  // A generator that filled only 32 bits would leave the high half zero.
  uint64_t any_high = 0;
  for (int i = 0; i < 64; ++i) any_high |= NewIncarnation() >> 32;
  EXPECT_NE(any_high, 0u);
}

TEST(NewIncarnationTest, ThreadsDrawDistinctValues) {
  absl::Mutex mu;
  std::set<uint64_t> seen;
  size_t draws = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        const uint64_t v = NewIncarnation();
        absl::MutexLock lock(&mu);
        seen.insert(v);
        ++draws;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(seen.size(), draws);
}

TEST(NewIncarnationTest, ForkedChildDrawsItsOwn) {
  // A generator seeded once and copied into the child would make the
  // child's next draw equal the parent's.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const uint64_t v = NewIncarnation();
    _exit(write(fds[1], &v, sizeof(v)) == sizeof(v) ? 0 : 1);
  }
  close(fds[1]);
  const uint64_t parent = NewIncarnation();
  uint64_t child = 0;
  ASSERT_EQ(read(fds[0], &child, sizeof(child)),
            static_cast<ssize_t>(sizeof(child)));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(child, 0u);
  EXPECT_NE(child, parent);
}

}  // namespace
}  // namespace rankd
