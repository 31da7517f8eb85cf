#include "dataplane/nccl/internal/result_codes.h"

namespace rankd::dataplane::nccl::internal {

absl::Span<const NcclResultCode> NcclResultCodes() {
  static constexpr NcclResultCode kCodes[] = {
      {1, "ncclUnhandledCudaError", absl::StatusCode::kInternal,
       "a CUDA call inside NCCL failed (a device fault or a CUDA error)"},
      {2, "ncclSystemError", absl::StatusCode::kUnavailable,
       "a system call or resource failed (network, shared memory, files)"},
      {3, "ncclInternalError", absl::StatusCode::kInternal,
       "NCCL's own defect"},
      {4, "ncclInvalidArgument", absl::StatusCode::kInternal,
       "NCCL refused an argument rankd had already validated: rankd's "
       "defect"},
      {5, "ncclInvalidUsage", absl::StatusCode::kFailedPrecondition,
       "the call is not allowed in this setup or state (e.g. two ranks on "
       "one GPU)"},
      {6, "ncclRemoteError", absl::StatusCode::kAborted,
       "a peer failed or the network between the ranks broke"},
      {7, "ncclInProgress", absl::StatusCode::kInternal,
       "work still in progress was reported as a failure: rankd's defect"},
  };
  return kCodes;
}

const NcclResultCode& NcclResultCodeOf(int result) {
  for (const NcclResultCode& entry : NcclResultCodes()) {
    if (entry.result == result) return entry;
  }
  static constexpr NcclResultCode kUnknown = {
      -1, "unknown ncclResult_t", absl::StatusCode::kUnknown,
      "a result this rankd does not know (a newer NCCL?)"};
  return kUnknown;
}

}  // namespace rankd::dataplane::nccl::internal
