// How each ncclResult_t becomes an absl::StatusCode. An NCCL error comes
// after rankd's own validation, so it poisons the session: none becomes
// InvalidArgument, which the contract keeps for a refusal that leaves the
// session usable (docs/contract.md). Private to dataplane/nccl. Depends on
// absl.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_RESULT_CODES_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_RESULT_CODES_H_

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace rankd::dataplane::nccl::internal {

struct NcclResultCode {
  int result;        // the ncclResult_t value
  const char* name;  // its name in nccl.h
  absl::StatusCode code;
  const char* meaning;  // what the code says about it, for docs and errors
};
// Every ncclResult_t but ncclSuccess, in value order: ncclUnhandledCudaError
// Internal, ncclSystemError Unavailable, ncclInternalError Internal,
// ncclInvalidArgument Internal, ncclInvalidUsage FailedPrecondition,
// ncclRemoteError Aborted, ncclInProgress (as a final result) Internal.
absl::Span<const NcclResultCode> NcclResultCodes();
// The entry of `result`; for a value the table does not know, one named
// "unknown ncclResult_t" with code Unknown.
const NcclResultCode& NcclResultCodeOf(int result);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_RESULT_CODES_H_
