// client/health_codec.h: wire encoding of grpc.health.v1 Check messages.
//
// rankd's protos do not include grpc/health/v1/health.proto, so the client
// encodes HealthCheckRequest { string service = 1; } and decodes
// HealthCheckResponse { ServingStatus status = 1; } by hand with protobuf's
// coded streams. Used by AdminClient::Health; separate so it can be tested.
//
// Depends only on protobuf and abseil. Pure functions; thread-safe.

#ifndef RANKD_CLIENT_HEALTH_CODEC_H_
#define RANKD_CLIENT_HEALTH_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd {

// Full method name of the standard health check.
inline constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

// Serialized HealthCheckRequest for `service` (empty service = no field).
std::string EncodeHealthCheckRequest(absl::string_view service);

// Parses a serialized HealthCheckResponse and returns the status name:
// "UNKNOWN" (0, also when the field is absent), "SERVING" (1),
// "NOT_SERVING" (2), "SERVICE_UNKNOWN" (3), or "STATUS_<n>" for values this
// code does not know. Unknown fields are skipped. Returns InvalidArgument
// when `bytes` is not a valid protobuf message.
absl::StatusOr<std::string> DecodeHealthCheckResponse(absl::string_view bytes);

}  // namespace rankd

#endif  // RANKD_CLIENT_HEALTH_CODEC_H_
