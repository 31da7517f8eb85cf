// How rankd writes a moment for people and scripts to read: RFC 3339 in
// UTC with milliseconds ("2026-12-04T14:18:07.514Z"). Daemon log lines
// (daemon/log.cc) and rankctl's event lines (client/rankctl_format.cc) start
// with it, and tests parse them back with it. Header only; an absl time
// format string.
#ifndef RANKD_COMMON_TIME_FORMAT_H_
#define RANKD_COMMON_TIME_FORMAT_H_

namespace rankd {

// For absl::FormatTime / absl::ParseTime with absl::UTCTimeZone().
inline constexpr char kTimestampFormat[] = "%Y-%m-%dT%H:%M:%E3SZ";

}  // namespace rankd

#endif  // RANKD_COMMON_TIME_FORMAT_H_
