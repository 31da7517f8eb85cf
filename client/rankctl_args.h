// client/rankctl_args.h: rankctl's command line.
//
// rankctl parses its own flags (rather than with absl flags) so that every
// usage error exits with status 2 and the parser can be tested.
//
// Depends only on abseil. Pure functions; thread-safe.

#ifndef RANKD_CLIENT_RANKCTL_ARGS_H_
#define RANKD_CLIENT_RANKCTL_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rankd {

// rankctl's exit statuses.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRpcError = 1;
inline constexpr int kExitUsage = 2;
// `health` got an answer, and it was not SERVING.
inline constexpr int kExitNotServing = 3;

struct RankctlArgs {
  enum class Command {
    kTopology,
    kMembers,
    kStatus,
    kHealth,
    kKvGet,
    kWatch,
    // Local commands: no daemon is contacted.
    kCredentialsCreate,
    kCredentialsNodeToken,
    kCredentialsRankToken,
  };

  bool help = false;  // --help / -h: print RankctlUsage() and exit 0.
  Command command = Command::kStatus;
  std::string target;  // --target; empty = DefaultTarget().
  bool json = false;   // --json
  // --timeout_ms: connect and per-call deadline; for `watch`, how long to
  // watch (0 = until interrupted; connecting then uses the default).
  int64_t timeout_ms = 5000;
  std::string token_file;       // --token_file
  std::string tls_ca;           // --tls_ca
  std::string tls_cert;         // --tls_cert
  std::string tls_key;          // --tls_key
  std::string tls_server_name;  // --tls_server_name
  std::string service;          // --service (health)
  uint64_t after = 0;           // --after (watch): replay events after this
  std::string key;              // kv get KEY
  std::string credentials_dir;  // credentials create|node-token|rank-token DIR
  std::string job_id;           // credentials node-token|rank-token DIR JOB
  uint32_t node_index = 0;      // ... NODE
  uint32_t rank = 0;            // credentials rank-token DIR JOB NODE RANK
};

// Parses `args` (without the program name). Flags may come before or after
// the command, as --name=value or --name value; "--" ends the flags.
// Returns InvalidArgument, with a message meant for the user, for an unknown
// flag or command, a missing or malformed value, extra arguments, or a flag
// that does not apply to the command.
absl::StatusOr<RankctlArgs> ParseRankctlArgs(
    const std::vector<std::string>& args);

// The --help text.
std::string RankctlUsage();

}  // namespace rankd

#endif  // RANKD_CLIENT_RANKCTL_ARGS_H_
