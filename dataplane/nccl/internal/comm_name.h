// CommName: a stable name for the communicator of a member list, the same
// on every member (unique-id keys, NCCL's messages). Private to
// dataplane/nccl. Depends on absl.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_COMM_NAME_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_COMM_NAME_H_

#include <cstdint>
#include <string>

#include "absl/types/span.h"

namespace rankd::dataplane::nccl::internal {

// `members` are world ranks, in communicator order: "world" when members
// are 0..world_size-1 in order, otherwise "m<size>-<16 hex digits of a
// FNV-1a hash of the members>".
std::string CommName(absl::Span<const uint32_t> members, uint32_t world_size);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_COMM_NAME_H_
