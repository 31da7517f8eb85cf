// An NCCL unique id as rankd hands it out: its size, who makes it (the
// generator NcclSessionOptions can replace), how many ranks one id serves,
// and the key-value broker key it is published under. The brokering itself
// is private (internal/unique_id_broker.h). Depends on absl only.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_UNIQUE_ID_H_
#define RANKD_DATAPLANE_NCCL_NCCL_UNIQUE_ID_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::dataplane::nccl {

// Bytes in an ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
inline constexpr size_t kNcclUniqueIdBytes = 128;

// Returns kNcclUniqueIdBytes raw bytes (NewNcclUniqueId in production;
// NcclSessionOptions::unique_id_generator replaces it in tests).
using UniqueIdGenerator = std::function<absl::StatusOr<std::string>()>;

// Ranks served by one ncclUniqueId when a communicator is initialized with
// ncclCommInitRankScalable (NcclSessionOptions::ranks_per_unique_id).
inline constexpr uint32_t kDefaultRanksPerUniqueId = 128;

// Key of unique id `index` of `count` for communicator `comm_name` of the
// session tagged `tag`, in the job namespace `ns`:
//   "<ns>/nccl/<tag>/<comm_name>/uid/<index>of<count>"
// (no leading "<ns>/" when ns is empty). The broker stores it under the
// job epoch's key (OwnedKey, dataplane/control_plane.h).
std::string UniqueIdKey(absl::string_view ns, absl::string_view tag,
                        absl::string_view comm_name, uint32_t index,
                        uint32_t count);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_UNIQUE_ID_H_
