// The reason of a failed call (common/error_reason.h) in a gRPC status's
// details: grpc::Status::error_details(), sent as grpc-status-details-bin,
// holds a rankd.v1.StatusDetails (google.rpc.Status's form) whose one detail
// is a rankd.v1.ErrorInfo. Both ends (the daemon's services, the client
// library) use these two functions, so the encoding lives once.
//
// Depends on the generated rankd.v1 protos, common/error_reason and absl.
#ifndef RANKD_PROTO_STATUS_DETAILS_H_
#define RANKD_PROTO_STATUS_DETAILS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rankd {

// The details to send with failed `status`: its reason encoded as above,
// or "" when it carries none (or is OK).
std::string StatusDetailsOf(const absl::Status& status);

// `status` carrying the reason that `details` (a received status's
// details) encode. Details that do not parse, hold no ErrorInfo or name a
// reason this build does not know leave `status` as it is: never an error,
// since the code and message alone still say what failed.
absl::Status WithDetails(absl::Status status, absl::string_view details);

}  // namespace rankd

#endif  // RANKD_PROTO_STATUS_DETAILS_H_
