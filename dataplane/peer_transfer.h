// Point-to-point transfers: PeerValue (one transfer of a batched
// send/receive), the most transfers one batch may hold, and CheckPeer, the
// peer check every backend makes before native work (docs/dataplane.md,
// "Validation"; batch.h checks whole batches). Depends on
// dataplane/collective_scope.h and absl.
#ifndef RANKD_DATAPLANE_PEER_TRANSFER_H_
#define RANKD_DATAPLANE_PEER_TRANSFER_H_

#include <cstddef>

#include "absl/status/status.h"
#include "dataplane/collective_scope.h"

namespace rankd::dataplane {

// One transfer of a batched send/receive: `value` goes to (or, for a
// receive, is the caller-owned output filled from) member `peer` of the
// scope (or group).
template <typename T>
struct PeerValue {
  size_t peer = 0;
  T value;
};
// The most transfers one batched send/receive may hold.
inline constexpr size_t kMaxBatchTransfers = 4096;

// OK when `peer` indexes `scope`'s members and is not this rank (a
// send/receive needs another member). Otherwise InvalidArgument naming
// `operation` and the peer.
absl::Status CheckPeer(size_t peer, const ResolvedScope& scope,
                       const char* operation);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_PEER_TRANSFER_H_
