// Checks of request fields against common/limits.h that the Rank service
// (node agent) and the Peer service (coordinator) share: what a rank reports
// about its device, and the reasons nodes give. Both paths check, so a
// value refused on one is refused on the other with the same words.
// Depends on common/limits.h and the protos.
#ifndef RANKD_DAEMON_REQUEST_LIMITS_H_
#define RANKD_DAEMON_REQUEST_LIMITS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

// OK when every text field of `device` fits kMaxDeviceFieldBytes;
// InvalidArgument naming the field otherwise.
absl::Status CheckDevice(const v1::DeviceInfo& device);

// OK when `reason` fits kMaxReasonBytes; InvalidArgument otherwise.
absl::Status CheckReason(absl::string_view reason);

}  // namespace rankd

#endif  // RANKD_DAEMON_REQUEST_LIMITS_H_
