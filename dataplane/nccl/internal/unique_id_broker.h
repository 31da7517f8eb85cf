// Hands NCCL unique ids to every member of a communicator through the
// control plane's key-value broker (docs/nccl.md): the root of each id calls
// ncclGetUniqueId and publishes it; the others wait for it with a deadline.
// Above kDefaultRanksPerUniqueId ranks a communicator uses one id per that
// many ranks (ncclCommInitRankScalable), each created by its own root (see
// PlanUniqueIds in internal/unique_id_plan.h).
//
// Several communicators are brokered together: every rank first publishes
// the ids it is root for, then fetches the rest, so no order of
// communicators can deadlock. Keys are namespaced by the control plane's
// Namespace() and the session tag (UniqueIdKey, nccl_unique_id.h); the
// values are versioned hex (EncodeUniqueId).
//
// The id generator is injected so that the brokering is tested without
// NCCL. Private to dataplane/nccl. Depends on dataplane/control_plane.h,
// nccl_unique_id.h and internal/unique_id_plan.h.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_UNIQUE_ID_BROKER_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_UNIQUE_ID_BROKER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/control_plane.h"
#include "dataplane/nccl/internal/unique_id_plan.h"
#include "dataplane/nccl/nccl_unique_id.h"

namespace rankd::dataplane::nccl::internal {

// The value a unique id is published as: "nccl-uid-v1:" + lowercase hex of
// its kNcclUniqueIdBytes bytes.
std::string EncodeUniqueId(absl::string_view id_bytes);
// The id bytes of a published value; InvalidArgument naming `key` for
// anything else (another prefix, another length, not hex).
absl::StatusOr<std::string> DecodeUniqueId(absl::string_view value,
                                           absl::string_view key);

// OK to keep waiting; an error (e.g. the job failed) ends the wait with it.
using InterruptCheck = std::function<absl::Status()>;

// One communicator to broker.
struct CommIdRequest {
  // CommName(members, world_size).
  std::string comm_name;
  // World ranks in communicator order; this rank is members[rank].
  std::vector<uint32_t> members;
  uint32_t rank = 0;
  UniqueIdPlan plan;
};

// For each request, the ids in plan order (raw bytes). A one-rank
// communicator's id is generated locally and never published. Fails with
// DeadlineExceeded naming the key, the id's root and its world rank when a
// root did not publish by `deadline`; with the interrupt's error when it
// fires; with InvalidArgument when a key holds something else. The keys
// live under job epoch `epoch` (EpochKey in dataplane/control_plane.h), so
// the communicators of a later epoch get new ids.
absl::StatusOr<std::vector<std::vector<std::string>>> BrokerUniqueIds(
    ControlPlane& control_plane, absl::string_view tag,
    absl::Span<const CommIdRequest> requests,
    const UniqueIdGenerator& generator, absl::Time deadline,
    const InterruptCheck& interrupt, uint64_t epoch = 1);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_UNIQUE_ID_BROKER_H_
