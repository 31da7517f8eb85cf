#include "daemon/log.h"

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/time_format.h"

namespace rankd {
namespace {

absl::Mutex log_mu(absl::kConstInit);
std::string* log_prefix ABSL_GUARDED_BY(log_mu) = nullptr;
std::atomic<bool> log_enabled{true};

}  // namespace

void SetLogPrefix(std::string prefix) {
  absl::MutexLock lock(&log_mu);
  if (log_prefix == nullptr) log_prefix = new std::string;  // lives forever
  *log_prefix = std::move(prefix);
}

void Log(absl::string_view message) {
  if (!log_enabled.load(std::memory_order_relaxed)) return;
  std::string line = absl::StrCat(
      absl::FormatTime(kTimestampFormat, absl::Now(), absl::UTCTimeZone()),
      " ");
  absl::MutexLock lock(&log_mu);
  absl::StrAppend(&line, log_prefix ? *log_prefix : "rankd", " ", message,
                  "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void SetLogEnabled(bool enabled) {
  log_enabled.store(enabled, std::memory_order_relaxed);
}

}  // namespace rankd
