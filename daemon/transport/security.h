// Transport security and authentication for the daemon: TLS credentials for
// its TCP listener and its channel to the coordinator, and the Authenticator
// that decides which role a call comes from (docs/operations.md,
// "Credentials"). Depends on gRPC, absl, common/credentials,
// proto/status_details (a status's reason in its gRPC details) and
// daemon/config.
#ifndef RANKD_DAEMON_SECURITY_H_
#define RANKD_DAEMON_SECURITY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/config.h"
#include "grpcpp/grpcpp.h"

namespace rankd {

// Reads a whole TLS file of at most kMaxTlsFileBytes (common/limits.h);
// ReadBoundedFile's errors (NotFound, PermissionDenied, InvalidArgument for
// a device, a pipe or a larger file), naming the flag and the path.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           const std::string& flag);

// Insecure credentials when TLS is off; otherwise TLS from the PEM files,
// requesting and verifying client certificates when require_client_cert.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls);

// Credentials for calls to another daemon: insecure when TLS is off,
// otherwise TLS verifying the peer with ca_file (or system roots) and
// presenting cert/key as the client certificate.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& tls);

// Who may call what. Each role has its own credential, sent as
// "authorization: Bearer <credential>"; none grants another role's rights:
//   - Rank service: on every transport, the rank's own token
//     (common/credentials.h RankToken), which names one rank of this node;
//     a call may act only for that rank (and the services also hold a rank
//     to the connection it joined on, node_agent.h). IssueRankTokens, on
//     the Unix socket only, needs none (services.h says who gets them).
//   - Peer service: never on the Unix socket; over TCP, a node token
//     (common/credentials.h), which names the node the caller may act as.
//   - Admin service: callers on the Unix socket; over TCP, the operator
//     token. Reading key-value values (Admin.KvGet) is off unless
//     --admin_kv_read, and then needs the operator token everywhere.
// Health and reflection need no credential. With --allow_unauthenticated
// every check passes, except that the Peer service stays off the Unix
// socket and Admin.KvGet still needs --admin_kv_read.
// Immutable after Load; thread-safe.
class Authenticator {
 public:
  // Loads what `config` names. With credentials_dir: node.key (required on
  // the coordinator; elsewhere node.key or node.token; the node token also
  // verifies this node's rank tokens), and operator.token when present
  // (without it the Admin service refuses TCP callers). A rank.token there
  // is ignored (legacy_rank_token_ignored()). Errors: FailedPrecondition saying
  // how to create credentials when none are configured and
  // allow_unauthenticated is off; the file's error (common/credentials.h) when
  // one is unreadable; InvalidArgument when node.token names another node.
  static absl::StatusOr<Authenticator> Load(const DaemonConfig& config);

  // False only with --allow_unauthenticated.
  bool enabled() const { return enabled_; }

  // The node token this daemon presents to the coordinator ("" when
  // authentication is off).
  const std::string& node_token() const { return node_token_; }

  // True when the folder held the job-wide rank.token of earlier versions,
  // which no longer grants anything (the daemon logs a warning).
  bool legacy_rank_token_ignored() const { return legacy_rank_token_; }

  // The rank a Rank service caller's token names (RankToken under this
  // node's token); nullopt when authentication is off. Unauthenticated
  // without a token or with one that is not a rank token of this node,
  // never echoing what it sent.
  absl::StatusOr<std::optional<uint32_t>> AuthenticateRank(
      const grpc::CallbackServerContext* context) const;

  // RankToken(this node's token, job, rank): what a rank of this node
  // presents. "" when authentication is off.
  std::string MintRankToken(uint32_t rank) const;

  // OK or Unauthenticated / PermissionDenied saying what the caller lacks,
  // never echoing what it sent.
  absl::Status AuthorizeOperator(
      const grpc::CallbackServerContext* context) const;
  absl::Status AuthorizeKvRead(
      const grpc::CallbackServerContext* context) const;

  // The node a Peer caller authenticated as; nullopt when authentication is
  // off. PermissionDenied on the Unix socket, or when this daemon holds no
  // node key to verify with; Unauthenticated without a valid node token.
  absl::StatusOr<std::optional<uint32_t>> AuthenticateNode(
      const grpc::CallbackServerContext* context) const;

  // The same for a round link's hello (daemon/transport/round_link_protocol.h),
  // where the node shows TokenProof(its token, `transcript`) instead of the
  // token: OK when `proof` is that of node `node_index` of this job, or when
  // authentication is off; PermissionDenied when this daemon holds no node
  // key; Unauthenticated otherwise.
  absl::Status VerifyNodeProof(uint32_t node_index,
                               absl::string_view transcript,
                               absl::string_view proof) const;

  // TokenProof(node `node_index`'s token, `transcript`): what the
  // coordinator shows a round link's node so the node knows it holds the
  // node key. "" when authentication is off or no node key is held.
  std::string ProveToNode(uint32_t node_index,
                          absl::string_view transcript) const;

  // Called with a call's peer (grpc::ServerContext::peer()) each time a
  // call presents a valid credential: the TCP listener's gate
  // (daemon/transport/tcp_gate.h) then lifts that connection's unauthenticated
  // bounds. Set before the services serve; must be thread-safe.
  void set_authenticated_observer(
      std::function<void(const std::string& peer)> observer) {
    authenticated_observer_ = std::move(observer);
  }

 private:
  // Tells the observer that `context`'s call presented a valid credential;
  // passes `status` through.
  absl::Status Authenticated(const grpc::CallbackServerContext* context,
                             absl::Status status) const;

  Authenticator() = default;

  // A role whose callers on the Unix socket pass and whose TCP callers
  // must present `token` (refused when the daemon has none, `file`).
  absl::Status SocketOrToken(const grpc::CallbackServerContext* context,
                             const std::string& token, absl::string_view file,
                             absl::string_view role, absl::string_view service,
                             absl::string_view callers) const;

  bool enabled_ = false;
  bool admin_kv_read_ = false;
  std::string job_id_;
  std::string node_key_;  // Empty on a daemon holding only its node.token.
  std::string node_token_;
  std::string operator_token_;  // Empty: Admin refuses TCP callers.
  bool legacy_rank_token_ = false;
  std::function<void(const std::string& peer)> authenticated_observer_;
};

// OK when a caller whose rank token named `token_rank` (nullopt:
// authentication is off) may act as `rank`; PermissionDenied saying that a
// rank token names one rank otherwise. The Rank service and the key-value
// channel (daemon/transport/kv_socket.h) refuse with the same words.
absl::Status CheckTokenRank(std::optional<uint32_t> token_rank, uint32_t rank);

// True when the call came in on the daemon's Unix socket (whose
// connections daemon/transport/local_socket.h hands to gRPC: peers "fd:<n>").
bool FromUnixSocket(const grpc::CallbackServerContext* context);

// Adds a bearer credential to an outgoing call (no-op when empty).
void AttachBearerToken(grpc::ClientContext* context, const std::string& token);

// absl::Status <-> grpc::Status, keeping code, message and the status's
// reason (common/error_reason.h, in the gRPC status's details).
grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

// How long a daemon waits for a keepalive ping's answer before dropping a
// connection, on its server and its channels alike: its heartbeat timeout
// (at least 1 s), so that a peer too busy to answer a ping is not declared
// gone sooner than a silent node would be.
int KeepaliveTimeoutMs(absl::Duration heartbeat_timeout);

// Channel arguments shared by every rankd channel: 64 MiB messages and a
// keepalive ping every second, the connection dropped when one is not
// answered within KeepaliveTimeoutMs(heartbeat_timeout).
grpc::ChannelArguments DefaultChannelArguments(
    absl::Duration heartbeat_timeout);

}  // namespace rankd

#endif  // RANKD_DAEMON_SECURITY_H_
