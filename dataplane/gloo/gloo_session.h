// GlooSession: the DistributedSession contract (docs/contract.md, session.h) on
// the Gloo backend, with HostTensor values. Scopes map to the backend's groups
// (World -> the world group, Group(id) -> the descriptor's group); every
// operation is the matching GlooBackend operation on its executor, so the
// session and the backend share one order, one poison state and one
// quarantine. all_gather_words goes over the control plane, not Gloo, so it
// works independently of the data communicators (and of their poisoning).
//
//   auto control_plane = MakeClientControlPlane(client.get());
//   auto session = GlooSession::Open(DescriptorFromProto(...),
//                                    control_plane.get(), {});
//   auto sum = (*session)->AllReduceSum(CollectiveScope::World(), x);
//   ...
//
// Validation order for every operation: poison and quarantine fence
// (the original cause), scope membership (NotFound), capability
// (Unimplemented naming "gloo" and the capability), then dtype, shape,
// counts and peer range (InvalidArgument / Unimplemented for a dtype without
// a sum), all before anything is queued. Thread-safe. Depends on
// dataplane/session.h, gloo_backend.h, descriptor_proto.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_SESSION_H_
#define RANKD_DATAPLANE_GLOO_GLOO_SESSION_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/control_plane.h"
#include "dataplane/gloo/gloo_backend.h"
#include "dataplane/gloo/gloo_options.h"
#include "dataplane/host_tensor.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane::gloo {

class GlooSession final : public DistributedSession<HostTensor> {
 public:
  // Connects a Gloo session for this rank, as NcclSession::Open opens one:
  // every group of `descriptor` (and the world) rendezvouses through
  // `control_plane`'s key-value broker. Blocks until every group is
  // connected on every executor or options.connect_timeout passes; errors
  // name the group. InvalidArgument for bad options or a null control
  // plane; the job's failure when it already failed. `control_plane` must
  // outlive the session. (From the descriptor rankd::Client::Join returns:
  // DescriptorFromProto in dataplane/descriptor_proto.h first; public
  // data-plane headers carry no protobuf types.)
  static absl::StatusOr<std::unique_ptr<GlooSession>> Open(
      const DistributedSessionDescriptor& descriptor,
      ControlPlane* control_plane, const GlooSessionOptions& options = {});

  GlooSession(ControlPlane* control_plane,
              std::unique_ptr<GlooBackend> backend);

  const DistributedSessionDescriptor& descriptor() const override;
  DistributedCapabilities capabilities() const override;

  absl::StatusOr<ValueSubmission> AllReduceSum(const CollectiveScope& scope,
                                               const Value& input) override;
  absl::StatusOr<ValueSubmission> AllGather(const CollectiveScope& scope,
                                            const Value& input) override;
  absl::StatusOr<ValueSubmission> AllToAllV(
      const CollectiveScope& scope, const Value& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts) override;
  absl::StatusOr<ValueSubmission> Send(const CollectiveScope& scope,
                                       size_t peer,
                                       const Value& input) override;
  absl::StatusOr<ValueSubmission> Receive(
      const CollectiveScope& scope, size_t peer,
      const ValueDescriptor& descriptor) override;
  absl::StatusOr<ValuesSubmission> BatchSendReceive(
      const CollectiveScope& scope, absl::Span<const PeerValue<Value>> sends,
      absl::Span<const PeerValue<Value>> receives) override;
  absl::StatusOr<ValueSubmission> AllReduceSumInto(
      const CollectiveScope& scope, const Value& input,
      const Value& output) override;
  absl::StatusOr<ValueSubmission> AllGatherInto(const CollectiveScope& scope,
                                                const Value& input,
                                                const Value& output) override;
  absl::StatusOr<ValueSubmission> AllToAllVInto(
      const CollectiveScope& scope, const Value& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts, const Value& output) override;
  absl::StatusOr<ValueSubmission> ReceiveInto(const CollectiveScope& scope,
                                              size_t peer,
                                              const Value& output) override;
  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local) override;
  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) override;

  // The failure vocabulary, the same on NcclSession and on both backends
  // (docs/contract.md, "Failures"); one state with backend().
  // OK while healthy; once poisoned, the first cause, forever.
  absl::Status poison() const { return backend_->poison(); }
  // Latches `cause` (an error; an OK cause does nothing; the first cause
  // wins): every later operation is refused with it, nothing queued.
  // Nothing is torn down (no Gloo context is aborted): running work is not
  // interrupted; queued work that has not started is refused with `cause`.
  void Poison(const absl::Status& cause) { backend_->Poison(cause); }
  // Poison(cause), then aborts every Gloo context so pending operations
  // fail now instead of waiting for a peer: what a native failure or a job
  // failure reported by the control plane does. Any thread, any time.
  void Abort(const absl::Status& cause) { backend_->Abort(cause); }

  // The low-level contract over the same communicators and executor.
  GlooBackend& backend() { return *backend_; }

 private:
  // The engine's admission (dataplane/admission.h): poison and quarantine
  // fence, scope membership, the scope's capability, then `flag` (named
  // `capability`) when set. The scope's members go to `resolved` when set.
  absl::StatusOr<GlooGroup*> Scope(
      const char* operation, const CollectiveScope& scope,
      bool DistributedCapabilities::*flag = nullptr,
      const char* capability = nullptr, ResolvedScope* resolved = nullptr);
  absl::StatusOr<ValueSubmission> AllToAllVImpl(
      const CollectiveScope& scope, const Value& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts, std::optional<Value> output);
  absl::StatusOr<ValueSubmission> ReceiveImpl(const CollectiveScope& scope,
                                              size_t peer,
                                              const ValueDescriptor& descriptor,
                                              std::optional<Value> output);
  ControlPlane* const control_plane_;
  const std::unique_ptr<GlooBackend> backend_;
};

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_SESSION_H_
