// Transport security for the daemon: TLS credentials for its TCP listener
// and its channel to the coordinator, and the optional bearer token every
// request must carry ("authorization: Bearer <token>"). Depends on gRPC,
// absl and daemon/config.
#ifndef RANKD_DAEMON_SECURITY_H_
#define RANKD_DAEMON_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "grpcpp/grpcpp.h"

namespace rankd {

// Reads a whole file; NotFound / PermissionDenied naming the path and flag.
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

// Checks the bearer token of a call. OK when `expected` is empty.
// Unauthenticated otherwise, without echoing what was sent.
absl::Status CheckBearerToken(const grpc::CallbackServerContext* context,
                              const std::string& expected);

// Adds the bearer token to an outgoing call (no-op when empty).
void AttachBearerToken(grpc::ClientContext* context, const std::string& token);

// absl::Status <-> grpc::Status, keeping code and message.
grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

// Channel arguments shared by every rankd channel: 64 MiB messages and
// keepalive pings so a dead peer is noticed within seconds.
grpc::ChannelArguments DefaultChannelArguments();

}  // namespace rankd

#endif  // RANKD_DAEMON_SECURITY_H_
