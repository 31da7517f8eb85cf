// MeshContext: a Gloo context whose full mesh connects its pairs at once.
//
// Gloo's rendezvous::Context::connectFullMesh connects a member's pairs one
// after another, in member order, each call blocking until that pair is
// connected; the side of a pair that listens waits for its peer to reach
// the pair in its own order. Across a group that chains the members'
// progress: in the 8-rank demo's re-form, the world's mesh took 85-134 ms
// after its last member arrived (docs/dataplane.md, "Connecting").
// MeshContext publishes the same thing (one key per member holding its
// address for every other member, in member order) and connects up to
// kMaxConcurrentPairConnects pairs at a time, taking them in member order,
// so that every member always works on its lowest unconnected pairs and no
// two members can wait for each other in a cycle.
//
// A job failure while pairs connect must not hold the connect for Gloo's
// own connect timeout (five times the context's timeout, 150 s with the
// default 30 s): a pair whose peer died waits for it that long. Gloo cannot
// safely fail a pair that is still connecting (a connect starting on a
// closed pair leaves its socket registered with the device's event loop),
// so the connect gives up waiting instead: the workers still connecting are
// left to finish or time out on their own, owning all they use (the
// transport context, its pairs and device), never the store.
//
// Every member of a group must use MeshContext (the key layout is its
// own). Depends on Gloo's context, store and transport headers and absl.
#ifndef RANKD_DATAPLANE_GLOO_INTERNAL_MESH_CONTEXT_H_
#define RANKD_DATAPLANE_GLOO_INTERNAL_MESH_CONTEXT_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gloo/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/device.h"

namespace rankd::dataplane::gloo::internal {

// Pairs one member connects at once (more gain nothing on the hosts a
// group's members share, and each costs a thread while it connects).
inline constexpr int kMaxConcurrentPairConnects = 8;

// How often a connect asks `health` (ConnectFullMesh) whether to go on.
inline constexpr absl::Duration kConnectHealthEvery = absl::Milliseconds(20);

class MeshContext final : public ::gloo::Context {
 public:
  // Member `rank` of `size` (0 <= rank < size, size >= 2).
  MeshContext(int rank, int size);

  // Creates a pair for every other member, publishes their addresses under
  // key "<rank>" in `store`, and connects every pair, waiting for each
  // peer's key and its side of the pair; each wait is bounded by the
  // context's timeout (setTimeout). On success the context is usable for
  // Gloo's collectives on `device`. On failure throws the first
  // ::gloo::Exception a pair or the store threw (pairs still connecting
  // then finish or fail first: the call returns only when none is in
  // flight), and the context must not be used. Call once.
  //
  // `health`, when given, is asked every kConnectHealthEvery while pairs
  // connect (from the calling thread, never concurrently). Once it returns
  // an error the call stops: it waits only for the store reads in flight
  // (the store must bound them; RankdStore's end when the job fails), then
  // throws a ::gloo::IoException carrying that error's message. Pair
  // connects still in flight are abandoned to their own threads, which end
  // when Gloo's connect does (at the latest its timeout, five times the
  // context's). A thread that cannot be started ends the call the same
  // way, its message naming the cause.
  void ConnectFullMesh(::gloo::rendezvous::Store& store,
                       const std::shared_ptr<::gloo::transport::Device>& device,
                       std::function<absl::Status()> health = nullptr);
};

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_INTERNAL_MESH_CONTEXT_H_
