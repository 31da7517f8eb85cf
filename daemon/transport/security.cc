#include "daemon/transport/security.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/bounded_file.h"
#include "common/credentials.h"
#include "common/limits.h"
#include "proto/status_details.h"

namespace rankd {
namespace {

// The credential a call carries: the value after "Bearer ", or nullopt
// when there is none (or it is too long to be one of ours).
std::optional<absl::string_view> BearerOf(
    const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") ||
      value.size() > kMaxCredentialBytes) {
    return std::nullopt;
  }
  return value;
}

// OK when the call carries `expected` (which must be non-empty).
absl::Status CheckToken(const grpc::CallbackServerContext* context,
                        const std::string& expected, absl::string_view role,
                        absl::string_view service) {
  std::optional<absl::string_view> sent = BearerOf(context);
  if (!sent.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat("the ", service, " service needs the job's ", role,
                     " token (authorization: Bearer <", role, ".token>)"));
  }
  if (!SecretsEqual(*sent, expected)) {
    return absl::UnauthenticatedError(absl::StrCat(role, " token rejected"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> OptionalCredential(const std::string& dir,
                                               absl::string_view name) {
  auto value = ReadCredentialFile(dir, name);
  if (absl::IsNotFound(value.status())) return std::string();
  return value;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           const std::string& flag) {
  absl::StatusOr<std::string> contents =
      ReadBoundedFile(path, kMaxTlsFileBytes);
  if (!contents.ok()) {
    return absl::Status(
        contents.status().code(),
        absl::StrCat(flag, "=", path, ": ", contents.status().message()));
  }
  return contents;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  auto cert = ReadSecretFile(tls.cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadSecretFile(tls.key_file, "--tls_key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      tls.require_client_cert
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!tls.ca_file.empty()) {
    auto ca = ReadSecretFile(tls.ca_file, "--tls_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    auto ca = ReadSecretFile(tls.ca_file, "--tls_ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  auto cert = ReadSecretFile(tls.cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadSecretFile(tls.key_file, "--tls_key");
  if (!key.ok()) return key.status();
  options.pem_cert_chain = *cert;
  options.pem_private_key = *key;
  return grpc::SslCredentials(options);
}

absl::StatusOr<Authenticator> Authenticator::Load(const DaemonConfig& config) {
  Authenticator auth;
  auth.job_id_ = config.job_id;
  auth.admin_kv_read_ = config.admin_kv_read;
  if (config.credentials_dir.empty()) {
    if (config.allow_unauthenticated) return auth;
    return absl::FailedPreconditionError(
        "rankd needs the job's credentials: pass --credentials_dir=DIR "
        "(create one with `rankctl credentials create DIR` and give every "
        "daemon of the job the same folder), or --allow_unauthenticated=true "
        "to let anyone who reaches the TCP port change the job");
  }
  const std::string& dir = config.credentials_dir;
  auth.enabled_ = true;
  auto key = OptionalCredential(dir, kNodeKeyFile);
  if (!key.ok()) return key.status();
  auth.node_key_ = *std::move(key);
  if (!auth.node_key_.empty()) {
    auth.node_token_ =
        NodeToken(auth.node_key_, config.job_id, config.node_index);
  } else if (config.is_coordinator) {
    return absl::FailedPreconditionError(
        absl::StrCat("the coordinator needs ", dir, "/", kNodeKeyFile,
                     " to verify the nodes' tokens"));
  } else {
    auto token = ReadCredentialFile(dir, kNodeTokenFile);
    if (absl::IsNotFound(token.status())) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " holds neither ", kNodeKeyFile, " nor ",
                       kNodeTokenFile, "; a daemon needs one of them"));
    }
    if (!token.ok()) return token.status();
    if (!absl::StartsWith(*token,
                          absl::StrCat("node-", config.node_index, "."))) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/", kNodeTokenFile, " is not a token of node ",
                       config.node_index,
                       " (issue one with `rankctl credentials "
                       "node-token`)"));
    }
    auth.node_token_ = *std::move(token);
  }
  // Ranks present tokens of their own now (RankToken); a job-wide one
  // would let any rank act as any other.
  auth.legacy_rank_token_ = ReadCredentialFile(dir, kRankTokenFile).ok();
  auto op = OptionalCredential(dir, kOperatorTokenFile);
  if (!op.ok()) return op.status();
  auth.operator_token_ = *std::move(op);
  return auth;
}

absl::StatusOr<std::optional<uint32_t>> Authenticator::AuthenticateRank(
    const grpc::CallbackServerContext* context) const {
  if (!enabled_) return std::optional<uint32_t>();
  std::optional<absl::string_view> sent = BearerOf(context);
  if (!sent.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the Rank service needs the rank's own rank token (authorization: "
        "Bearer rank-<rank>.<mac>), which the launcher hands each rank in $",
        kRankTokenEnv, " (docs/operations.md, \"Credentials\")"));
  }
  auto rank = VerifyRankToken(node_token_, job_id_, *sent);
  if (!rank.ok()) return rank.status();
  (void)Authenticated(context, absl::OkStatus());
  return std::optional<uint32_t>(*rank);
}

absl::Status CheckTokenRank(std::optional<uint32_t> token_rank, uint32_t rank) {
  if (token_rank.has_value() && *token_rank != rank) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the credential of rank ", *token_rank, " cannot act as rank ", rank,
        " (a rank token names one rank)"));
  }
  return absl::OkStatus();
}

std::string Authenticator::MintRankToken(uint32_t rank) const {
  if (!enabled_) return "";
  return RankToken(node_token_, job_id_, rank);
}

absl::Status Authenticator::AuthorizeOperator(
    const grpc::CallbackServerContext* context) const {
  return SocketOrToken(context, operator_token_, kOperatorTokenFile, "operator",
                       "Admin", "operators");
}

absl::Status Authenticator::SocketOrToken(
    const grpc::CallbackServerContext* context, const std::string& token,
    absl::string_view file, absl::string_view role, absl::string_view service,
    absl::string_view callers) const {
  if (!enabled_ || FromUnixSocket(context)) return absl::OkStatus();
  if (token.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("this daemon has no ", file, " in its credentials; ",
                     callers, " reach it through its Unix socket"));
  }
  return Authenticated(context, CheckToken(context, token, role, service));
}

absl::Status Authenticator::Authenticated(
    const grpc::CallbackServerContext* context, absl::Status status) const {
  if (status.ok() && authenticated_observer_) {
    authenticated_observer_(context->peer());
  }
  return status;
}

absl::Status Authenticator::AuthorizeKvRead(
    const grpc::CallbackServerContext* context) const {
  if (!admin_kv_read_) {
    return absl::PermissionDeniedError(
        "reading key-value values through Admin is off on this daemon "
        "(start it with --admin_kv_read=true)");
  }
  if (!enabled_) return absl::OkStatus();
  if (operator_token_.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "this daemon has no ", kOperatorTokenFile, " in its credentials"));
  }
  return Authenticated(
      context, CheckToken(context, operator_token_, "operator", "Admin KvGet"));
}

absl::StatusOr<std::optional<uint32_t>> Authenticator::AuthenticateNode(
    const grpc::CallbackServerContext* context) const {
  if (FromUnixSocket(context)) {
    return absl::PermissionDeniedError(
        "the Peer service is for daemons and is not served on the Unix "
        "socket");
  }
  if (!enabled_) return std::optional<uint32_t>();
  if (node_key_.empty()) {
    return absl::PermissionDeniedError(
        "this daemon holds no node key and cannot verify nodes");
  }
  std::optional<absl::string_view> sent = BearerOf(context);
  if (!sent.has_value()) {
    return absl::UnauthenticatedError(
        "the Peer service needs a node token (authorization: Bearer "
        "node-<index>.<mac>)");
  }
  auto node = VerifyNodeToken(node_key_, job_id_, *sent);
  if (!node.ok()) return node.status();
  (void)Authenticated(context, absl::OkStatus());
  return std::optional<uint32_t>(*node);
}

absl::Status Authenticator::VerifyNodeProof(uint32_t node_index,
                                            absl::string_view transcript,
                                            absl::string_view proof) const {
  if (!enabled_) return absl::OkStatus();
  if (node_key_.empty()) {
    return absl::PermissionDeniedError(
        "this daemon holds no node key and cannot verify nodes");
  }
  if (!SecretsEqual(proof, TokenProof(NodeToken(node_key_, job_id_, node_index),
                                      transcript))) {
    return absl::UnauthenticatedError(
        absl::StrCat("round link refused: the hello's proof is not node ",
                     node_index, "'s token of this job"));
  }
  return absl::OkStatus();
}

std::string Authenticator::ProveToNode(uint32_t node_index,
                                       absl::string_view transcript) const {
  if (!enabled_ || node_key_.empty()) return "";
  return TokenProof(NodeToken(node_key_, job_id_, node_index), transcript);
}

bool FromUnixSocket(const grpc::CallbackServerContext* context) {
  const std::string peer = context->peer();
  return absl::StartsWith(peer, "fd:") || absl::StartsWith(peer, "unix:");
}

void AttachBearerToken(grpc::ClientContext* context, const std::string& token) {
  if (!token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  }
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()), StatusDetailsOf(status));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return WithDetails(
      absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message()),
      status.error_details());
}

int KeepaliveTimeoutMs(absl::Duration heartbeat_timeout) {
  return static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(heartbeat_timeout), 1000, kMaxTimeoutMs));
}

grpc::ChannelArguments DefaultChannelArguments(
    absl::Duration heartbeat_timeout) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxGrpcMessageBytes);
  args.SetMaxSendMessageSize(kMaxGrpcMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              KeepaliveTimeoutMs(heartbeat_timeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A peer that is starting is usually listening within tens of ms.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

}  // namespace rankd
