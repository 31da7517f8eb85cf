// The C ABI's NCCL sessions (capi/include/rankd/rankd.h, RANKD_BACKEND_NCCL):
// opening an NcclSession (dataplane/nccl) over a joined rank, and the
// operations on the caller's device memory and CUDA stream.
//
// Nothing is copied or allocated for the caller's tensors: each is wrapped
// as a DeviceTensor over an external DeviceBuffer (never freed by rankd).
// With a caller's stream, an event recorded on it is every operand's ready
// event, so the session's stream runs the operation after the work already
// queued there (which produced the inputs and last used the outputs); once
// submitted, the caller's stream waits for the operation's completion event,
// so work queued on it afterwards sees the outputs (and may reuse the
// inputs). With a NULL stream there is no ordering with any caller stream:
// the operands must be ready when the call is made, and the outputs are
// valid once the work completed (rankd_work_wait, ...).
//
// Private to capi/. Depends on dataplane/nccl (its run-time loader too) and
// absl.
#ifndef RANKD_CAPI_INTERNAL_NCCL_H_
#define RANKD_CAPI_INTERNAL_NCCL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "capi/internal/handles.h"
#include "dataplane/capabilities.h"
#include "dataplane/nccl/nccl_session.h"
#include "rankd/rankd.h"

namespace rankd::capi::internal {

// Opens an NCCL session over `rank` on the device the rank joined with, or
// its local rank's, narrowed to `restriction` when set
// (NcclSessionOptions::restrict_capabilities): Unavailable naming the
// missing library or device when CUDA or NCCL cannot be used.
absl::StatusOr<std::unique_ptr<dataplane::nccl::NcclSession>> OpenNccl(
    RankState& rank, const rankd_session_options& options,
    absl::Duration op_timeout,
    std::optional<dataplane::DistributedCapabilities> restriction);

// The operations of an NCCL session (session->state->nccl is set); the
// arguments as rankd.h's functions of the same name take them, except that
// rankd_all_to_all_v has checked its count arrays already.
rankd_status* NcclAllReduceSum(rankd_session* session, uint32_t group,
                               const rankd_tensor* input,
                               const rankd_tensor* output, void* stream,
                               rankd_work** work);
rankd_status* NcclAllGather(rankd_session* session, uint32_t group,
                            const rankd_tensor* input,
                            const rankd_tensor* output, void* stream,
                            rankd_work** work);
rankd_status* NcclAllToAllV(rankd_session* session, uint32_t group,
                            const rankd_tensor* input,
                            const size_t* send_counts,
                            const size_t* receive_counts, size_t members,
                            const rankd_tensor* output, void* stream,
                            rankd_work** work);
rankd_status* NcclSend(rankd_session* session, uint32_t group, size_t peer,
                       const rankd_tensor* input, void* stream,
                       rankd_work** work);
rankd_status* NcclReceive(rankd_session* session, uint32_t group, size_t peer,
                          const rankd_tensor* output, void* stream,
                          rankd_work** work);
rankd_status* NcclBatchSendReceive(rankd_session* session, uint32_t group,
                                   const rankd_peer_tensor* sends,
                                   size_t send_count,
                                   const rankd_peer_tensor* receives,
                                   size_t receive_count, void* stream,
                                   rankd_work** work);

}  // namespace rankd::capi::internal

#endif  // RANKD_CAPI_INTERNAL_NCCL_H_
