// Point-to-point transfers: PeerValue (one transfer of a batched
// send/receive) and the most transfers one batch may hold. The checks are
// the engine's: admission.h's CheckPeerOf for one peer, batch.h for whole
// batches. Header-only; depends on nothing.
#ifndef RANKD_DATAPLANE_PEER_TRANSFER_H_
#define RANKD_DATAPLANE_PEER_TRANSFER_H_

#include <cstddef>

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

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_PEER_TRANSFER_H_
