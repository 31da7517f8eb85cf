// MonotonicNow: the clock every age, deadline and timer in rankd reads.
//
// absl::Now() is the wall clock, which an operator, NTP or a virtual
// machine's host may step by seconds at any moment. Measured with it, a step
// forward makes both ends of a healthy job declare each other silent (CI saw
// "no heartbeat for 5335 ms" in a test that ran 2.3 s) and fires deadlines
// early; a step back delays them. MonotonicNow() never steps: it is the wall
// time when the process first read it plus the time elapsed since on the
// kernel's monotonic clock. It stays within seconds of the wall clock, so a
// value that reaches an API expecting wall time (a gRPC deadline) is off by
// at most the steps since the process started, never by years.
//
// Use it for anything subtracted or compared: heartbeat ages, deadlines,
// timer due times, how long a round took. Use absl::Now() for timestamps
// that people read or that leave the process (logs, events, metrics).
// Depends only on absl and the C++ standard library.
#ifndef RANKD_COMMON_MONOTONIC_CLOCK_H_
#define RANKD_COMMON_MONOTONIC_CLOCK_H_

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rankd {

// Returns the current time on the process's monotonic clock; never less than
// an earlier return in any thread. Thread-safe.
absl::Time MonotonicNow();

// Returns the std::chrono::steady_clock instant that `monotonic` (a time on
// MonotonicNow's clock) names, for waits that must not move with the wall
// clock (std::condition_variable::wait_until). Thread-safe.
std::chrono::steady_clock::time_point ToSteadyTime(absl::Time monotonic);

}  // namespace rankd

#endif  // RANKD_COMMON_MONOTONIC_CLOCK_H_
