#include "dataplane/abort_deadline.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"

namespace rankd::dataplane {

AbortDeadline::AbortDeadline(absl::string_view backend, absl::Duration timeout,
                             std::function<std::string()> describe) {
  if (timeout == absl::InfiniteDuration()) return;
  monitor_ = std::thread([this, backend = std::string(backend), timeout,
                          describe = std::move(describe)] {
    if (returned_.WaitForNotificationWithTimeout(timeout)) return;
    const std::string line =
        absl::StrCat("rankd: ", backend, " abort did not return within ",
                     absl::FormatDuration(timeout), ": ", describe(),
                     "; ending the process (exit status ", kExitNativeAbortHung,
                     ", the native abort hung)\n");
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
    std::_Exit(kExitNativeAbortHung);
  });
}

AbortDeadline::~AbortDeadline() {
  returned_.Notify();
  if (monitor_.joinable()) monitor_.join();
}

}  // namespace rankd::dataplane
