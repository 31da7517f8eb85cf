// Log against a stderr nobody reads: it returns at once, drops what does
// not fit its queue and says so, and keeps the order of what it writes.
#include "daemon/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

// Points this process's stderr at a pipe for the test's life.
class PipedStderr {
 public:
  PipedStderr() {
    saved_ = ::dup(STDERR_FILENO);
    int fds[2];
    ok_ = saved_ >= 0 && ::pipe(fds) == 0;
    if (!ok_) return;
    read_ = fds[0];
    ::fcntl(fds[1], F_SETPIPE_SZ, 4096);
    capacity_ = ::fcntl(fds[1], F_GETPIPE_SZ);
    ok_ = capacity_ > 0 && ::dup2(fds[1], STDERR_FILENO) == STDERR_FILENO;
    ::close(fds[1]);
  }
  ~PipedStderr() {
    if (saved_ >= 0) {
      ::dup2(saved_, STDERR_FILENO);
      ::close(saved_);
    }
    if (read_ >= 0) ::close(read_);
  }
  bool ok() const { return ok_; }
  // Fills the pipe: a write of its whole capacity into it while empty.
  bool Fill() {
    std::string filler(capacity_, '#');
    return ::write(STDERR_FILENO, filler.data(), filler.size()) == capacity_;
  }
  // Reads until `text` has `until` in it or `deadline` passes.
  std::string ReadUntil(absl::string_view until, absl::Time deadline) {
    std::string text;
    ::fcntl(read_, F_SETFL, O_NONBLOCK);
    char buf[65536];
    while (!absl::StrContains(text, until) && absl::Now() < deadline) {
      const ssize_t n = ::read(read_, buf, sizeof(buf));
      if (n > 0) {
        text.append(buf, n);
      } else {
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    return text;
  }

 private:
  int saved_ = -1;
  int read_ = -1;
  int capacity_ = 0;
  bool ok_ = false;
};

TEST(Log, AFullStderrDoesNotHoldTheCallerAndDropsAreCounted) {
  SetLogPrefix("rankd[log test]");
  PipedStderr err;
  ASSERT_TRUE(err.ok());
  // While stderr takes lines, a line is out before Log returns.
  Log("first line");
  EXPECT_TRUE(absl::StrContains(
      err.ReadUntil("first line\n", absl::Now() + absl::Seconds(5)),
      "rankd[log test] first line\n"));
  ASSERT_TRUE(err.Fill());
  // 6 MiB of lines into a full pipe: before, the first of them waited
  // until someone read stderr.
  const std::string payload(300, 'x');
  constexpr int kLines = 20000;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kLines; ++i) Log(absl::StrCat("line ", i, " ", payload));
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(2));
  // What was queued comes out in order once stderr is read again, then
  // the count of what was not.
  const std::string text = err.ReadUntil("dropped: stderr was not read",
                                         absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(absl::StrContains(text, "line 0 x")) << text.substr(0, 200);
  int last = -1;
  int written = 0;
  uint64_t dropped = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t at = line.find(" line ");
    if (at != absl::string_view::npos) {
      std::vector<absl::string_view> words =
          absl::StrSplit(line.substr(at + 6), ' ');
      int n = -1;
      ASSERT_TRUE(absl::SimpleAtoi(words[0], &n)) << line;
      EXPECT_EQ(n, last + 1) << "out of order: " << line.substr(0, 80);
      last = n;
      ++written;
    }
    const size_t d = line.find(" log line(s) dropped");
    if (d != absl::string_view::npos) {
      std::vector<absl::string_view> words =
          absl::StrSplit(line.substr(0, d), ' ');
      ASSERT_TRUE(absl::SimpleAtoi(words.back(), &dropped)) << line;
    }
  }
  EXPECT_GT(written, 0);
  EXPECT_LT(written, kLines);  // 6 MiB does not fit 4 MiB
  EXPECT_EQ(static_cast<uint64_t>(written) + dropped, kLines)
      << written << " written, " << dropped << " dropped";
  // Lines logged after the drops come out after the notice.
  Log("after the drops");
  EXPECT_TRUE(absl::StrContains(
      err.ReadUntil("after the drops\n", absl::Now() + absl::Seconds(5)),
      "after the drops\n"));
}

}  // namespace
}  // namespace rankd
