// ErrorReason: why a call failed, where the caller must act on the reason
// and not only on the status code, and how the reason rides along with an
// absl::Status (a payload) across every hop between where it is decided and
// the rank that acts on it: the gRPC services (a failed call's status
// details, proto/status_details.h), the key-value channel
// (common/kv_frame.h) and the round link's forwarded calls (KvLinkReply).
// The status's code and message are unchanged: a caller that does not know
// the reason sees the same error as before.
//
// The reasons of a recovering job (docs/architecture.md, "Epochs and
// recovery"):
//   - kEpochFenced, the fence the daemons put between its epochs: a process
//     that joined an epoch the job has left behind is refused every call,
//     FAILED_PRECONDITION "rank 3 joined into epoch 1 but the job is at
//     epoch 2 ...". The loss that ended its epoch reaches the rank on its
//     watch stream, possibly a moment after such an answer; a store
//     (c10d_store/, rankd.torch) that gets the fence waits for that notice
//     and reports the loss, in its own words (Client::FencedByALaterEpoch);
//   - kEpochEnded, that notice: the failure the client library reports for
//     a loss that ended the job's epoch (or its rank's domain's) rather than
//     the job, ABORTED "job J epoch 1 ended (MEMBER_LOST, ...)": the rank
//     rejoins and serves on (Client::EndsAnEpoch). The coordinator marks
//     what the epoch's end cut short so too (gets and joins that waited in
//     it): a replacement's join then joins the next epoch.
//
// Depends only on absl.
#ifndef RANKD_COMMON_ERROR_REASON_H_
#define RANKD_COMMON_ERROR_REASON_H_

#include <cstdint>

#include "absl/status/status.h"

namespace rankd {

// The values are the wire's (rankd.v1.ErrorReason, KvLinkReply.reason, the
// key-value channel's reason byte): never renumber one.
enum class ErrorReason : uint8_t {
  kUnspecified = 0,
  // A process of an ended epoch acted in a later one (see above).
  kEpochFenced = 1,
  // A loss ended the rank's epoch; the job recovers in place (see above).
  kEpochEnded = 2,
};

// The reason `value` (a number read from the wire) names; kUnspecified for
// a number no reason has (a newer daemon's: the caller then acts on the
// code alone).
ErrorReason ErrorReasonFromWire(uint32_t value);

// `status` carrying `reason` (replacing any it carried). OK statuses carry
// no reason: returned unchanged, as is anything with kUnspecified.
absl::Status WithReason(absl::Status status, ErrorReason reason);

// The reason `status` carries; kUnspecified when none.
ErrorReason ReasonOf(const absl::Status& status);

// `to` carrying the reason `from` carries, if any: for code that rewrites a
// status's message (adding context) and must not drop its reason.
absl::Status KeepReason(const absl::Status& from, absl::Status to);

}  // namespace rankd

#endif  // RANKD_COMMON_ERROR_REASON_H_
