// A job's credentials: one per role, so that what an operator holds never
// lets it act as a node or a rank, and a node's credential names the node.
//
//   node.key        the job's node key. The coordinator verifies every
//                   node's token with it; a daemon holding it derives its
//                   own node token. Peer service.
//   node.token      one node's token (NodeToken below), for a daemon that
//                   should hold only its own identity instead of the key.
//   operator.token  what operators present to the Admin service over TCP
//                   and, everywhere, to read key-value values.
//
// A rank's credential is no file of the folder: each rank gets a token of
// its own, RankToken below, derived from its node's token, so it names one
// rank of one node and nothing else. Whoever holds the node's token (its
// daemon, a launcher given the folder) mints it and hands it to that rank's
// process alone ($RANKD_RANK_TOKEN). The job-wide rank.token of earlier
// versions named no rank; daemons ignore it.
//
// Every file holds one line of printable ASCII. docs/operations.md
// ("Credentials") says how to issue, mount and rotate them. Depends on absl
// and OpenSSL's libcrypto (HMAC-SHA256, the random generator, a
// constant-time comparison).
#ifndef RANKD_COMMON_CREDENTIALS_H_
#define RANKD_COMMON_CREDENTIALS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd {

inline constexpr char kNodeKeyFile[] = "node.key";
inline constexpr char kNodeTokenFile[] = "node.token";
// No longer issued nor read (see above); named for the daemon's warning.
inline constexpr char kRankTokenFile[] = "rank.token";
// The environment variable holding a rank's own token, which the client
// libraries present (client/client.h).
inline constexpr char kRankTokenEnv[] = "RANKD_RANK_TOKEN";
inline constexpr char kOperatorTokenFile[] = "operator.token";

// Longest secret or token a credential file may hold, and the longest
// "authorization" value a daemon looks at.
inline constexpr size_t kMaxCredentialBytes = 512;

// 32 bytes from the operating system's random generator, as 64 hex digits.
// Internal error only when the generator fails.
absl::StatusOr<std::string> NewSecret();

// The token of node `node_index` of job `job_id` under `node_key`:
// "node-<index>.<64 hex digits of HMAC-SHA256(key, job and index)>". The
// job id is part of the MAC so a token of one job is refused by another
// job that happens to share the key.
std::string NodeToken(absl::string_view node_key, absl::string_view job_id,
                      uint32_t node_index);

// The node index `token` names when it is NodeToken(node_key, job_id, that
// index); Unauthenticated otherwise, without echoing the token. Compares
// in constant time.
absl::StatusOr<uint32_t> VerifyNodeToken(absl::string_view node_key,
                                         absl::string_view job_id,
                                         absl::string_view token);

// The token of rank `rank` of job `job_id`, joining through the node whose
// token is `node_token`: "rank-<rank>.<64 hex digits of
// HMAC-SHA256(node_token, job and rank)>". Only that node's daemon accepts
// it (it verifies with its own node token), and only for that rank.
std::string RankToken(absl::string_view node_token, absl::string_view job_id,
                      uint32_t rank);

// The rank `token` names when it is RankToken(node_token, job_id, that
// rank); Unauthenticated otherwise, without echoing the token. Compares in
// constant time.
absl::StatusOr<uint32_t> VerifyRankToken(absl::string_view node_token,
                                         absl::string_view job_id,
                                         absl::string_view token);

// HMAC-SHA256 of `transcript` under `token`: 32 raw bytes. What a holder of
// a token shows so the token itself never crosses the wire (the round
// link's handshake, daemon/transport/round_link_protocol.h).
std::string TokenProof(absl::string_view token, absl::string_view transcript);

// True when `a` equals `b`; the time taken depends only on the lengths.
bool SecretsEqual(absl::string_view a, absl::string_view b);

// Reads the credential file `dir`/`name`: its one line with surrounding
// whitespace removed. NotFound when it does not exist; InvalidArgument when
// it is empty, longer than kMaxCredentialBytes or not printable ASCII;
// PermissionDenied when it cannot be read. Messages name the path, never
// the contents.
absl::StatusOr<std::string> ReadCredentialFile(const std::string& dir,
                                               absl::string_view name);
// The same for the file at `path` (a token file named on a command line):
// a regular file only, so a device or a pipe is refused before any read.
absl::StatusOr<std::string> ReadCredentialPath(const std::string& path);

// Creates `dir` (mode 0700) holding a fresh node.key and operator.token
// (mode 0600). AlreadyExists when any of them is already
// there (credentials are never overwritten: rotate them on purpose);
// FailedPrecondition naming the path when the folder or a file cannot be
// written, or when `dir` exists but is not a folder of this user that no
// one else may write to (its owner could replace the key).
absl::Status CreateCredentials(const std::string& dir);

// Removes what CreateCredentials made in `dir`, then `dir` (which must
// hold nothing else): for a launcher that made credentials for a daemon,
// once the daemon has read them, so that no process started later finds
// the node key. What is already gone is fine; FailedPrecondition naming the
// path otherwise.
absl::Status RemoveCredentials(const std::string& dir);

}  // namespace rankd

#endif  // RANKD_COMMON_CREDENTIALS_H_
