// Minimal timestamped logging to stderr for the daemon (Debian's abseil has
// no absl/log). One line per call; safe from any thread. Log never waits
// for stderr: a daemon logs under locks its job depends on (the
// coordinator's), and a log reader that falls behind (a full pipe) must not
// stall heartbeats. Depends on absl.
#ifndef RANKD_DAEMON_LOG_H_
#define RANKD_DAEMON_LOG_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace rankd {

// Sets the prefix printed after the timestamp, e.g. "rankd[node 1]".
void SetLogPrefix(std::string prefix);

// How many bytes of lines may wait for a stderr that does not take them.
inline constexpr size_t kMaxQueuedLogBytes = size_t{4} << 20;

// Writes "2026-11-30T01:02:03.456Z rankd[node 1] <message>\n" to stderr:
// before returning while nothing waits and stderr takes it at once (the
// usual case); else the line waits, in order, for a writer thread, and
// beyond kMaxQueuedLogBytes waiting it is dropped and counted, and a line
// saying how many were dropped follows once stderr takes lines again. At
// exit (return from main, exit()) waiting lines get up to two seconds.
void Log(absl::string_view message);

// Turns logging off (false) or back on. For programs that start many
// daemons in one process, such as the fuzzers (fuzz/).
void SetLogEnabled(bool enabled);

}  // namespace rankd

#endif  // RANKD_DAEMON_LOG_H_
