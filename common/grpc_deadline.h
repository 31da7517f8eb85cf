// GrpcDeadlineAfter: deadlines for gRPC calls, waits and shutdowns that a
// step of the wall clock cannot move.
//
// A deadline written as absl::ToChronoTime(absl::Now() + timeout) is a wall
// time that gRPC converts to its monotonic clock with its own reading of the
// wall clock. Abseil's clock follows a step late, so right after one the two
// readings disagree by the step: a call made then expires at once (the job
// saw its heartbeats fail with DEADLINE_EXCEEDED) or waits the step longer.
// A deadline on gRPC's monotonic clock has no such conversion. The one part
// of common/ that depends on gRPC (its C core time API only).
#ifndef RANKD_COMMON_GRPC_DEADLINE_H_
#define RANKD_COMMON_GRPC_DEADLINE_H_

#include <grpc/support/time.h>

#include "absl/time/time.h"

namespace rankd {

// Returns the instant `timeout` from now on gRPC's monotonic clock, for
// grpc::ClientContext::set_deadline, grpc::Channel::WaitForConnected and
// grpc::Server::Shutdown. An infinite timeout gives gRPC's infinite future;
// a negative one an instant already past.
gpr_timespec GrpcDeadlineAfter(absl::Duration timeout);

}  // namespace rankd

#endif  // RANKD_COMMON_GRPC_DEADLINE_H_
