// DistributedSession: the high-level, dyn-compatible data-plane contract
// (docs/contract.md, DistributedSession). A serving process gets one
// session for its whole model and runs every collective through it.
//
// Contract for every operation:
//   - Validation (scope membership, capability, dtype, shape, counts, peer
//     range) happens before any native work and returns InvalidArgument,
//     NotFound (not a member of the group) or Unimplemented (capability not
//     advertised, naming backend and capability).
//   - The output of a Submission is authoritative only after its
//     completion completes; the completion retains every resource the work
//     uses.
//   - After a native failure or a missed deadline the session is poisoned:
//     every later operation fails at once with the original cause and
//     submits no native work.
// Depends on the contract's type headers (value_descriptor.h,
// session_descriptor.h, collective_scope.h, capabilities.h,
// peer_transfer.h), completion.h and control_plane.h.
#ifndef RANKD_DATAPLANE_SESSION_H_
#define RANKD_DATAPLANE_SESSION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/completion.h"
#include "dataplane/control_plane.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane {

// `ValueT` is the backend's tensor or buffer type (host tensor for Gloo,
// device tensor for NCCL). The interface is abstract (virtual) so serving
// code can hold any backend's session behind one pointer per value type.
template <typename ValueT>
class DistributedSession {
 public:
  using Value = ValueT;
  using CompletionPtr = std::shared_ptr<BoundedCompletion>;
  using ValueSubmission = Submission<Value, CompletionPtr>;
  using ValuesSubmission = Submission<std::vector<Value>, CompletionPtr>;

  virtual ~DistributedSession() = default;

  // Stable topology and rank identity.
  virtual const DistributedSessionDescriptor& descriptor() const = 0;
  // Fail-closed communication support.
  virtual DistributedCapabilities capabilities() const = 0;

  // Element-wise sum over the scope's members; output has the input's
  // descriptor.
  virtual absl::StatusOr<ValueSubmission> AllReduceSum(
      const CollectiveScope& scope, const Value& input) = 0;

  // Members' inputs concatenated along the leading axis in member order: a
  // [n, ...] input gives [members*n, ...]; a scalar gives [members].
  virtual absl::StatusOr<ValueSubmission> AllGather(
      const CollectiveScope& scope, const Value& input) = 0;

  // Variable-count exchange of leading-axis rows: send_counts[d] rows go to
  // member d (input compact, destination-major); receive_counts[s] rows come
  // from member s (output source-major). Both spans have the scope's size;
  // zero is valid; the self slot must match.
  virtual absl::StatusOr<ValueSubmission> AllToAllV(
      const CollectiveScope& scope, const Value& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts) = 0;

  // Point-to-point: `peer` indexes the scope's members. A Send pairs with a
  // Receive of an identical ValueDescriptor, in the same order. Send's
  // output is the input, retained until the send completes.
  virtual absl::StatusOr<ValueSubmission> Send(const CollectiveScope& scope,
                                               size_t peer,
                                               const Value& input) = 0;
  virtual absl::StatusOr<ValueSubmission> Receive(
      const CollectiveScope& scope, size_t peer,
      const ValueDescriptor& descriptor) = 0;

  // Point-to-point in both directions at once: every `sends` entry sends
  // its value to member `peer` of the scope, every `receives` entry
  // receives into its caller-owned value from member `peer` (its
  // descriptor is the one expected); all are posted together and complete
  // together, so two members can swap values and a ring (send to the next,
  // receive from the previous) needs no even/odd ordering. Pair it with
  // the same grouping on the peer: the transfers between two members in
  // one batch are in one batch on the other member too, or (one transfer
  // per peer) its plain Send/Receive; Gloo without verify_agreement also
  // pairs each entry with a plain Send/Receive (docs/dataplane.md,
  // "Ordering"). InvalidArgument for an empty batch, a peer out of range or
  // this rank, an output shared by two receives or read by a send, or more
  // than kMaxBatchTransfers transfers. The output: the receive values, in
  // order.
  virtual absl::StatusOr<ValuesSubmission> BatchSendReceive(
      const CollectiveScope& scope, absl::Span<const PeerValue<Value>> sends,
      absl::Span<const PeerValue<Value>> receives) = 0;

  // Caller-owned outputs: the same operations writing into `output`, which
  // must have exactly the result's descriptor (InvalidArgument otherwise,
  // nothing submitted). Nothing is allocated for the result, so a steady
  // loop that reuses its outputs allocates no tensor memory. The
  // submission's output is `output` itself; the completion retains it
  // until the work finished.
  // AllReduceSumInto may run in place (`output` is `input`); the others
  // refuse an output that aliases the input. Same validation order and
  // errors as the allocating forms otherwise.
  virtual absl::StatusOr<ValueSubmission> AllReduceSumInto(
      const CollectiveScope& scope, const Value& input,
      const Value& output) = 0;
  virtual absl::StatusOr<ValueSubmission> AllGatherInto(
      const CollectiveScope& scope, const Value& input,
      const Value& output) = 0;
  virtual absl::StatusOr<ValueSubmission> AllToAllVInto(
      const CollectiveScope& scope, const Value& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts, const Value& output) = 0;
  // Receives into `output`, whose descriptor is the one the peer sends.
  virtual absl::StatusOr<ValueSubmission> ReceiveInto(
      const CollectiveScope& scope, size_t peer, const Value& output) = 0;

  // Synchronous, world-wide, rank-major concatenation of one equal-length
  // frame per rank, over the control plane (works before and independently
  // of any data communicator). A length disagreement fails on every rank
  // naming the disagreeing ranks.
  virtual absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local) = 0;
  // The bounded variant: submits now; resolve through the completion.
  virtual absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) = 0;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SESSION_H_
