// Checks of request fields against common/limits.h that the Rank service
// (node agent) and the Peer service (coordinator) share: what a rank reports
// about its device, what a node reports about itself, the reasons nodes
// give and the job ids requests name. Both paths check, so a
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

// OK when every text field of `node` (hostname, pod_name, address,
// boot_id, each device) fits its limit in common/limits.h and it reports at
// most kMaxDevicesPerNode devices; InvalidArgument naming the field
// otherwise.
absl::Status CheckNodeInfo(const v1::NodeInfo& node);

// OK when `reason` fits kMaxReasonBytes; InvalidArgument otherwise.
absl::Status CheckReason(absl::string_view reason);

// OK when a request's `job_id` is `served`; otherwise NotFound
// "unknown job '<job_id>'; this <role> serves job '<served>'<hint>". The
// caller's id is echoed only when it is empty or could be a job id (1 to
// 128 of A-Z a-z 0-9 . _ -); any other value is described by its size.
absl::Status CheckJobId(absl::string_view job_id, absl::string_view served,
                        absl::string_view role, absl::string_view hint = "");

}  // namespace rankd

#endif  // RANKD_DAEMON_REQUEST_LIMITS_H_
