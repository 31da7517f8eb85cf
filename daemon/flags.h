// Command-line flags of the rankd daemon.
//
// Defines one absl flag per RawConfig field (--job_id, --world_size, ...;
// `rankd --helpfull` lists them with their RANKD_* variables and defaults).
// A flag remembers whether it was given at all, even with an empty value, so
// that "--socket=" (disable the socket) differs from leaving --socket out
// (use RANKD_SOCKET or the default). Booleans take an explicit value:
// --tls_require_client_cert=true.
//
// This file only collects what was typed; merging with the environment,
// defaults and validation happen in ResolveConfig (daemon/config.h).
// Depends on abseil flags and daemon/config.h.

#ifndef RANKD_DAEMON_FLAGS_H_
#define RANKD_DAEMON_FLAGS_H_

#include "daemon/config.h"

namespace rankd {

// Returns the rankd flags as given on the command line: each field holds the
// flag's text, or nullopt when the flag was not given. Call after
// absl::ParseCommandLine. Never fails.
RawConfig RawConfigFromFlags();

}  // namespace rankd

#endif  // RANKD_DAEMON_FLAGS_H_
