// Minimal timestamped logging to stderr for the daemon (Debian's abseil has
// no absl/log). One line per call; safe from any thread. Depends on absl.
#ifndef RANKD_DAEMON_LOG_H_
#define RANKD_DAEMON_LOG_H_

#include <string>

#include "absl/strings/string_view.h"

namespace rankd {

// Sets the prefix printed after the timestamp, e.g. "rankd[node 1]".
void SetLogPrefix(std::string prefix);

// Writes "2026-11-30T01:02:03.456Z rankd[node 1] <message>\n" to stderr.
void Log(absl::string_view message);

// Turns logging off (false) or back on. For programs that start many
// daemons in one process, such as the fuzzers (fuzz/).
void SetLogEnabled(bool enabled);

}  // namespace rankd

#endif  // RANKD_DAEMON_LOG_H_
