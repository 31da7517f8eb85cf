#include "common/grpc_deadline.h"

namespace rankd {

gpr_timespec GrpcDeadlineAfter(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) {
    return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  }
  return gpr_time_add(
      gpr_now(GPR_CLOCK_MONOTONIC),
      gpr_time_from_micros(absl::ToInt64Microseconds(timeout), GPR_TIMESPAN));
}

}  // namespace rankd
