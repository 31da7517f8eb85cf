// Point-to-point transfers: PeerValue (one transfer of a batched
// send/receive), the most transfers one batch may hold and the most tensors
// one bundle may hold. The checks are the engine's: admission.h's
// CheckPeerOf for one peer, route.h for a route, batch.h for whole batches,
// bundle.h for bundles. Header-only; depends on nothing.
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
// The most tensors one bundle (send_receive, receive_bundle,
// receive_bundle_into) may hold, on every backend: Gloo numbers a bundle's
// tensors within 16 bits of its message slots, and one limit keeps a
// bundle that one backend takes from failing on another.
inline constexpr size_t kMaxBundleTensors = 60000;

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_PEER_TRANSFER_H_
