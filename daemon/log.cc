#include "daemon/log.h"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <string>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/time_format.h"

namespace rankd {
namespace {

// What one Log call may wait for at most at exit, for lines still queued.
constexpr absl::Duration kExitFlush = absl::Seconds(2);

std::atomic<bool> log_enabled{true};

// Lines wait here only while stderr does not take them at once; the
// writer thread hands them on in order.
struct LogState {
  absl::Mutex mu;
  std::string prefix ABSL_GUARDED_BY(mu) = "rankd";
  std::deque<std::string> queued ABSL_GUARDED_BY(mu);
  size_t queued_bytes ABSL_GUARDED_BY(mu) = 0;
  // The writer thread holds lines taken off the queue (outside the lock).
  bool writing ABSL_GUARDED_BY(mu) = false;
  bool writer_started ABSL_GUARDED_BY(mu) = false;
  // Lines dropped since the last notice was queued.
  uint64_t dropped ABSL_GUARDED_BY(mu) = 0;
};

LogState& State() {
  static LogState& state = *new LogState;  // lives forever: the writer runs
  return state;                            // past static destruction
}

// Writes what stderr takes now, in pieces a pipe takes whole; returns how
// many bytes it wrote. A closed or failed stderr counts as written. (A
// process sharing the pipe may fill it between the poll and the write,
// which then waits: a narrow window, where the daemon's stderr is shared.)
size_t WriteWithoutWaiting(absl::string_view text) {
  size_t written = 0;
  while (written < text.size()) {
    pollfd p{STDERR_FILENO, POLLOUT, 0};
    const int ready = ::poll(&p, 1, 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return written;  // full: a reader falls behind
    if (ready < 0 || (p.revents & (POLLERR | POLLNVAL | POLLHUP)) != 0) {
      return text.size();
    }
    const size_t piece = std::min<size_t>(text.size() - written, PIPE_BUF);
    const ssize_t n = ::write(STDERR_FILENO, text.data() + written, piece);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text.size();
    written += static_cast<size_t>(n);
  }
  return written;
}

// Writes all of `text`, waiting as long as stderr makes it.
void WriteAll(absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

std::string DroppedNotice(absl::string_view prefix, uint64_t dropped) {
  return absl::StrCat(
      absl::FormatTime(kTimestampFormat, absl::Now(), absl::UTCTimeZone()), " ",
      prefix, " ", dropped,
      " log line(s) dropped: stderr was not read for a while (at most ",
      kMaxQueuedLogBytes, " bytes wait)\n");
}

// Queues `text` behind what waits, or counts it dropped when that is full.
void QueueLocked(LogState& s, std::string text)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (s.queued_bytes + text.size() > kMaxQueuedLogBytes) {
    ++s.dropped;
    return;
  }
  if (s.dropped > 0) {
    std::string notice = DroppedNotice(s.prefix, s.dropped);
    s.dropped = 0;
    s.queued_bytes += notice.size();
    s.queued.push_back(std::move(notice));
  }
  s.queued_bytes += text.size();
  s.queued.push_back(std::move(text));
}

void WriterLoop() {
  LogState& s = State();
  absl::MutexLock lock(&s.mu);
  while (true) {
    s.mu.Await(absl::Condition(
        +[](LogState* st)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return !st->queued.empty(); },
        &s));
    std::string text;
    for (const std::string& line : s.queued) text += line;
    s.queued.clear();
    s.queued_bytes = 0;
    if (s.dropped > 0) {
      text += DroppedNotice(s.prefix, s.dropped);
      s.dropped = 0;
    }
    s.writing = true;
    s.mu.Unlock();
    WriteAll(text);
    s.mu.Lock();
    s.writing = false;
  }
}

// At exit: lets queued lines out, for a bounded time.
void FlushAtExit() {
  LogState& s = State();
  absl::MutexLock lock(&s.mu);
  s.mu.AwaitWithTimeout(absl::Condition(
                            +[](LogState* st) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                              return st->queued.empty() && !st->writing;
                            },
                            &s),
                        kExitFlush);
}

}  // namespace

void SetLogPrefix(std::string prefix) {
  LogState& s = State();
  absl::MutexLock lock(&s.mu);
  s.prefix = std::move(prefix);
}

void Log(absl::string_view message) {
  if (!log_enabled.load(std::memory_order_relaxed)) return;
  LogState& s = State();
  std::string line = absl::StrCat(
      absl::FormatTime(kTimestampFormat, absl::Now(), absl::UTCTimeZone()),
      " ");
  absl::MutexLock lock(&s.mu);
  absl::StrAppend(&line, s.prefix, " ", message, "\n");
  if (s.queued.empty() && !s.writing) {
    // Nothing waits: the line goes out before Log returns, as far as
    // stderr takes it without waiting (a line logged just before a crash
    // is not lost).
    const size_t written = WriteWithoutWaiting(line);
    if (written == line.size()) return;
    line.erase(0, written);
  }
  QueueLocked(s, std::move(line));
  if (!s.writer_started) {
    // No thread to be had (the process's limit): the lines wait, and the
    // next Log tries again; Log itself never throws.
    try {
      std::thread(WriterLoop).detach();
    } catch (const std::system_error&) {
      return;
    }
    s.writer_started = true;
    std::atexit(FlushAtExit);
  }
}

void SetLogEnabled(bool enabled) {
  log_enabled.store(enabled, std::memory_order_relaxed);
}

}  // namespace rankd
