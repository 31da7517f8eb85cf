// daemon/internal/limit_settings.h: the stages of ResolveConfig
// (daemon/config.h) that set what callers and peers may make a daemon
// hold: the key-value broker's and streams' limits (CallerLimits, with the
// job's shared key prefixes) and the listeners' bounds (NetworkLimits).
// Private to //daemon. Depends on daemon/config.h, setting.h and abseil.
#ifndef RANKD_DAEMON_INTERNAL_LIMIT_SETTINGS_H_
#define RANKD_DAEMON_INTERNAL_LIMIT_SETTINGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/config.h"
#include "daemon/internal/setting.h"

namespace rankd::internal {

// Fills `limits` from `flags` or their variables, each at least 1; an
// unset one keeps the value `limits` holds (CallerLimits' defaults). The
// per-rank key-value byte share defaults to the broker's bytes over
// `world_size`. Appends --kv_shared_prefixes to `shared_prefixes`, refusing
// one longer than a key or shaped like a rank's own prefix (r<N>/).
// InvalidArgument naming the setting otherwise.
absl::Status ResolveCallerLimits(const RawConfig& flags,
                                 const SettingLookup& lookup,
                                 uint32_t world_size, CallerLimits* limits,
                                 std::vector<std::string>* shared_prefixes);

// Fills `network` from `flags` or their variables. Idle and age limits may
// be 0 (none); every other at least 1. --max_tcp_connections defaults to
// max(256, 2 x `nnodes` + 64); the unauthenticated and health limits default
// to shares of it and must stay below it, so that nodes always find room.
// InvalidArgument naming the setting otherwise.
absl::Status ResolveNetworkLimits(const RawConfig& flags,
                                  const SettingLookup& lookup, uint32_t nnodes,
                                  NetworkLimits* network);

}  // namespace rankd::internal

#endif  // RANKD_DAEMON_INTERNAL_LIMIT_SETTINGS_H_
