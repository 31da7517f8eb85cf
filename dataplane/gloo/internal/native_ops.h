// Thin wrappers over Gloo's collectives and point-to-point transfers on host
// buffers, and CatchNative, which converts anything a Gloo call throws into
// an absl::Status so that no exception ever leaves the backend. Every
// wrapper blocks until its operation finished on this rank (or throws); each
// takes the Gloo tag (collectives) or slot (point-to-point) that pairs it
// with the peers' matching call, and Gloo's per-operation timeout.
//
// Zero-byte pieces are fine: Gloo moves them as empty messages, and no null
// pointer is ever handed to Gloo. Internal to the Gloo backend; runs on its
// executor thread. Depends on Gloo and absl.
#ifndef RANKD_DATAPLANE_GLOO_NATIVE_OPS_H_
#define RANKD_DATAPLANE_GLOO_NATIVE_OPS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dataplane/gloo/internal/sum_kernels.h"

namespace gloo {
class Context;
}

namespace rankd::dataplane::gloo::internal {

using Milliseconds = std::chrono::milliseconds;

// Runs `fn`. Returns OK, or the exception it threw as a status whose message
// is "<what>: <exception text>": DeadlineExceeded for a Gloo timeout,
// Unavailable for other Gloo I/O errors (peer closed, connection reset,
// aborted), Internal for Gloo assertions and other std::exceptions, Unknown
// for anything else.
absl::Status CatchNative(absl::string_view what, absl::FunctionRef<void()> fn);

// The same, with "<what>" = "<prefix> <subject>", joined only when `fn`
// threw: the form a per-operation call uses, so that a call that succeeds
// builds no message.
absl::Status CatchNative(absl::string_view prefix, absl::string_view subject,
                         absl::FunctionRef<void()> fn);

// Gloo's allreduce algorithms. kBcube is recursive halving/doubling: Gloo
// takes out every factor 2 of the member count as one pairwise step each
// and exchanges directly within what remains, so a power of two needs
// 2 log2(n) exchanges per member (a prime, 2 (n - 1) messages in two
// steps). kRing is 2 (n - 1) exchanges of pipelined segments. Under kBcube
// Gloo ignores the call's timeout: its waits use the context's transport
// timeout (gloo_abort.h SetTransportTimeout). Below a size the number of
// messages is what a reduction costs, so fewer, larger ones win; above it
// the ring's pipelining keeps every link busy.
enum class AllReduceAlgorithm { kRing, kBcube };

// How one all_reduce_sum runs. Every member must run the same plan (each
// computes the ring's segments from it): salt() goes into the operation's
// Gloo tag, so members whose plans differ never pair.
struct AllReducePlan {
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing;
  // The ring's largest segment (two are in flight per member); Gloo uses at
  // least two segments per member whatever this says.
  size_t ring_segment_bytes = size_t{1} << 20;

  uint64_t salt() const;
};

// The plan for `bytes` of payload: kBcube up to `bcube_max_bytes`, else the
// ring with segments of at most `ring_segment_bytes`
// (GlooSessionOptions::all_reduce_bcube_max_bytes and
// all_reduce_ring_segment_bytes).
AllReducePlan AllReducePlanFor(size_t bytes, size_t bcube_max_bytes,
                               size_t ring_segment_bytes);

// Sum of `elements` elements over the context into `out`, as `plan` says
// (every member must use the same). With `in` null
// (or equal to `out`) the sum is in place; otherwise `in` is this member's
// contribution and is left unchanged, and every byte of `out` is written
// (Gloo copies `in` into `out` segment by segment inside its ring, just
// before each segment is reduced or sent, so no separate pass is needed).
void NativeAllReduce(const std::shared_ptr<::gloo::Context>& context,
                     const void* in, void* out, size_t elements,
                     const SumKernel& kernel, uint32_t tag,
                     Milliseconds timeout, const AllReducePlan& plan);

// Every member contributes bytes_per_member[its rank] bytes from `in`;
// `out` receives all contributions, member-major.
void NativeAllGatherV(const std::shared_ptr<::gloo::Context>& context,
                      const void* in, void* out,
                      const std::vector<size_t>& bytes_per_member, uint32_t tag,
                      Milliseconds timeout);

// send_bytes[d] bytes of `in` (destination-major) go to member d;
// recv_bytes[s] bytes from member s land in `out` (source-major).
void NativeAllToAllV(const std::shared_ptr<::gloo::Context>& context,
                     const void* in, const std::vector<int64_t>& send_bytes,
                     void* out, const std::vector<int64_t>& recv_bytes,
                     uint32_t tag, Milliseconds timeout);

// `bytes` bytes at `data` on member `root` are copied to `data` everywhere.
void NativeBroadcast(const std::shared_ptr<::gloo::Context>& context,
                     void* data, size_t bytes, int root, uint32_t tag,
                     Milliseconds timeout);

void NativeBarrier(const std::shared_ptr<::gloo::Context>& context,
                   uint32_t tag, Milliseconds timeout);

// The slot of piece `piece` of a point-to-point transfer whose tag is
// `transfer_tag` (OperationTag of its sequence number on the route and of
// its bundle's fingerprint). `ascending` is true when the source's member
// index is below the destination's, so the two directions of a pair never
// share a slot.
uint64_t RouteSlot(bool ascending, uint32_t transfer_tag, uint16_t piece);

// Point-to-point transfer to / from member `peer`.
void NativeSend(const std::shared_ptr<::gloo::Context>& context, int peer,
                uint64_t slot, const void* data, size_t bytes,
                Milliseconds timeout);
void NativeRecv(const std::shared_ptr<::gloo::Context>& context, int peer,
                uint64_t slot, void* data, size_t bytes, Milliseconds timeout);
// Posts a send of `send` (slot `send_slot`) and a receive into `recv`
// (slot `recv_slot`) with member `peer`, then waits for both.
void NativeExchange(const std::shared_ptr<::gloo::Context>& context, int peer,
                    uint64_t send_slot, const void* send, size_t send_bytes,
                    uint64_t recv_slot, void* recv, size_t recv_bytes,
                    Milliseconds timeout);

// One transfer of a batch: `bytes` at `data` sent to (or received from)
// member `peer` on `slot`.
struct PostedTransfer {
  int peer = 0;
  uint64_t slot = 0;
  void* data = nullptr;
  size_t bytes = 0;
  bool send = false;
};
// Posts every transfer (receives first), then waits for all of them; the
// whole batch is bounded by `timeout`.
void NativeTransfers(const std::shared_ptr<::gloo::Context>& context,
                     const std::vector<PostedTransfer>& transfers,
                     Milliseconds timeout);

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_NATIVE_OPS_H_
