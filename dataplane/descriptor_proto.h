// Conversion from the control plane's rankd.v1.SessionDescriptor (what
// Client::Join returns) to the data plane's DistributedSessionDescriptor.
// Depends on the generated rankd.v1 API, dataplane/session_descriptor.h,
// common/topology.h and absl.
#ifndef RANKD_DATAPLANE_DESCRIPTOR_PROTO_H_
#define RANKD_DATAPLANE_DESCRIPTOR_PROTO_H_

#include "absl/status/statusor.h"
#include "dataplane/session_descriptor.h"
#include "rankd/v1/common.pb.h"

namespace rankd::dataplane {

// The descriptor of `proto`'s rank: world size, rank, the groups it
// belongs to, in the proto's order, its node placement, the job epoch
// (an epoch of 0, what a daemon from before recovery sends, is epoch 1)
// and, when recovery_by_domain is set, its data-parallel domain: the block
// of T*P*E ranks of the proto's topology holding the rank
// (session_descriptor.h's recovery_domain(), which domain_groups.h reads).
// InvalidArgument (naming the field) when the proto violates an invariant of
// session_descriptor.h.
absl::StatusOr<DistributedSessionDescriptor> DescriptorFromProto(
    const v1::SessionDescriptor& proto);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_DESCRIPTOR_PROTO_H_
