// Session tags name one NcclSession inside a job incarnation, so that the
// key-value keys of two sessions never collide. Private to dataplane/nccl.
// Depends on absl.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_SESSION_TAG_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_SESSION_TAG_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rankd::dataplane::nccl::internal {

// OK for 1..64 characters of [A-Za-z0-9_.-]; InvalidArgument naming the
// rule otherwise.
absl::Status ValidateSessionTag(absl::string_view tag);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_SESSION_TAG_H_
