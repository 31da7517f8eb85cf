// GlooBackend: the CommunicationBackend contract (docs/contract.md,
// communication_backend.h) on Gloo's TCP transport and host memory. It
// declares all eight fine-grained operations: AllReduceSum, AllGatherEven,
// AllGatherUneven, VariableAllToAll, Broadcast, Barrier, AgreeSuccess and
// SendReceive; the static_asserts at the end check it satisfies each concept.
//
//   Tensor                  = HostTensor
//   Executor                = GlooExecutor (an in-order thread;
//   GlooSessionOptions::
//                             executors of them per backend)
//   CommunicationGroup      = GlooGroup (world or a descriptor group)
//   CommunicationRoute      = GlooRoute (source -> destination in a group)
//   CommunicationCompletion = GlooCompletion
//
//   auto backend = GlooBackend::Open(descriptor, control_plane, {});
//   GlooGroup* tp = *(*backend)->group(2);
//   auto sum = (*backend)->AllReduceSum(x, *tp, (*backend)->executor());
//   if (!sum.ok()) return sum.status();          // refused, nothing queued
//   RETURN_IF_ERROR(sum->completion->Wait());     // sum->output is now valid
//
// Every operation validates (poison, quarantine fence, group/executor
// ownership, capability, dtype, shape, axis, counts, root, route) before
// queuing anything; the output tensor is allocated at submission (or is
// the caller's, for the *Into forms) and is authoritative once the
// completion completes. Operations run in submission order on the
// executor; every member of a group must submit the same
// operations on it in the same order (like a CUDA stream); a disagreement
// fails (at once with GlooSessionOptions::verify_agreement, otherwise at
// op_timeout, naming who submitted what) and never moves mismatched data.
// Supported dtypes: docs/dataplane.md. Thread-safe. Depends on Gloo (through
// the gloo/ files), dataplane contract headers, host_tensor.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_BACKEND_H_
#define RANKD_DATAPLANE_GLOO_GLOO_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_group.h"
#include "dataplane/collective_scope.h"
#include "dataplane/communication_backend.h"
#include "dataplane/completion.h"
#include "dataplane/control_plane.h"
#include "dataplane/gloo/gloo_completion.h"
#include "dataplane/gloo/gloo_executor.h"
#include "dataplane/gloo/gloo_group.h"
#include "dataplane/gloo/gloo_options.h"
#include "dataplane/host_tensor.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane::gloo {

namespace internal {
class SessionImpl;  // internal/session_impl.h
class NativeLayer;  // internal/native_layer.h
struct SumKernel;   // internal/sum_kernels.h
}  // namespace internal

// The submissions GlooBackend returns (the same types as
// communication_backend.h's TensorSubmission<GlooBackend> etc.).
using GlooCompletionPtr = std::shared_ptr<GlooCompletion>;
using GlooTensorSubmission =
    absl::StatusOr<Submission<HostTensor, GlooCompletionPtr>>;
using GlooUnitSubmission = absl::StatusOr<Submission<Unit, GlooCompletionPtr>>;
using GlooAgreementSubmission = absl::StatusOr<
    Submission<std::shared_ptr<const Agreement>, GlooCompletionPtr>>;
using GlooBundleSubmission =
    absl::StatusOr<Submission<std::vector<HostTensor>, GlooCompletionPtr>>;

class GlooBackend {
 public:
  using Tensor = HostTensor;
  using Executor = GlooExecutor;
  using CommunicationGroup = GlooGroup;
  using CommunicationRoute = GlooRoute;
  using CommunicationCompletion = GlooCompletion;

  // Connects every group of `descriptor` through `control_plane` (which must
  // outlive the backend); blocks until connected or options.connect_timeout.
  // Returns the backend only once connected (GlooSession::Open and
  // NcclSession::Open promise the same); otherwise the error naming the
  // group, InvalidArgument for bad options, or the job's failure.
  static absl::StatusOr<std::unique_ptr<GlooBackend>> Open(
      const DistributedSessionDescriptor& descriptor,
      ControlPlane* control_plane, const GlooSessionOptions& options = {});

  // Aborts work still in flight, finishes queued work with Cancelled, and
  // waits for quarantined work to complete before releasing it.
  ~GlooBackend();

  GlooBackend(const GlooBackend&) = delete;
  GlooBackend& operator=(const GlooBackend&) = delete;

  const DistributedSessionDescriptor& descriptor() const;
  // Fail-closed: world_collectives, every group of the descriptor,
  // point_to_point, variable_all_to_all and exact_completion, intersected
  // with GlooSessionOptions::restrict_capabilities.
  const DistributedCapabilities& capabilities() const { return caps_; }
  const GlooSessionOptions& options() const;

  // Executor 0, the one GlooSession uses.
  GlooExecutor& executor();
  // Executor `lane` of GlooSessionOptions::executors; InvalidArgument past the
  // last. Work on different executors runs concurrently; on each, in
  // submission order, pairing with the other members' work on the same
  // executor.
  absl::StatusOr<GlooExecutor*> executor(uint32_t lane);
  uint32_t executor_count() const;
  // The world group. Requires a session that holds the world
  // (domain_groups.h's HoldsWorld: always, unless the job recovers by
  // domain); ResolveGroup refuses the world otherwise.
  GlooGroup& world();
  // The group `id` of the descriptor; NotFound when this rank is not a
  // member; FailedPrecondition (domain_groups.h's CheckHeld) for a group of
  // this rank the session does not hold.
  absl::StatusOr<GlooGroup*> group(CollectiveGroupId id);
  // World or group, as a scope names it; NotFound as group().
  absl::StatusOr<GlooGroup*> ResolveGroup(const CollectiveScope& scope);
  // The directed route source_rank -> destination_rank (world ranks) in
  // `group`. InvalidArgument unless both are members and differ, and this
  // rank is one of them, in the engine's words (dataplane/route.h's
  // RouteBetweenRanks).
  absl::StatusOr<GlooRoute> Route(GlooGroup& group, uint32_t source_rank,
                                  uint32_t destination_rank);

  // Host tensors are always evaluated, so this only orders: the completion
  // completes once all earlier work on `executor` has, and retains `values`
  // until then. Selects no group. InvalidArgument for a null value.
  static GlooUnitSubmission SubmitLocalDependencies(
      absl::Span<const HostTensor* const> values, GlooExecutor& executor);

  // Element-wise sum over the group; output has the input's descriptor.
  // Out of place, except that a donated input that is the only owner of its
  // buffer (HostTensor::Donate) is summed in place: the output then uses
  // that buffer. Unimplemented for bool (docs/dataplane.md lists the dtypes).
  GlooTensorSubmission AllReduceSum(const HostTensor& value, GlooGroup& group,
                                    GlooExecutor& executor);
  // Equal parts concatenated along `axis` in member order: shape[axis] is
  // multiplied by the group size. A scalar (axis 0) gives [members].
  GlooTensorSubmission AllGatherEven(const HostTensor& value, size_t axis,
                                     GlooGroup& group, GlooExecutor& executor);
  // Member m contributes counts[m] slices along `axis` (this rank's value
  // must have shape[axis] == counts[local_rank]; counts agree on every
  // member); output shape[axis] = sum(counts). Zero counts are valid on axis
  // 0 (a member passes a Rows(0, ...) value).
  GlooTensorSubmission AllGatherUneven(const HostTensor& value,
                                       absl::Span<const size_t> counts,
                                       size_t axis, GlooGroup& group,
                                       GlooExecutor& executor);
  // counts.send[d] slices along `axis` go to member d (input compact,
  // destination-major); counts.receive[s] come from member s (output
  // source-major). Zero is valid; every member takes part even if all its
  // counts are zero; send[self] == receive[self].
  GlooTensorSubmission VariableAllToAll(const HostTensor& value,
                                        const PeerCounts& counts, size_t axis,
                                        GlooGroup& group,
                                        GlooExecutor& executor);
  // The root member's value, everywhere. On other members `value` only
  // gives the descriptor; every member gets a fresh output tensor.
  GlooTensorSubmission Broadcast(const HostTensor& value,
                                 size_t root_member_index, GlooGroup& group,
                                 GlooExecutor& executor);
  GlooUnitSubmission Barrier(GlooGroup& group, GlooExecutor& executor);
  // Resolves to true only if every member submitted true.
  GlooAgreementSubmission AgreeSuccess(bool success, GlooGroup& group,
                                       GlooExecutor& executor);
  // An ordered bundle over `route`. On the source, `tensors` are sent and
  // returned as the output. On the destination, `tensors` only give the
  // descriptors to receive and the output holds fresh tensors with the data.
  // Both ends must pass the same descriptors in the same order. At most
  // kMaxBundleTensors tensors (dataplane/bundle.h).
  GlooBundleSubmission SendReceive(absl::Span<const HostTensor> tensors,
                                   const GlooRoute& route,
                                   GlooExecutor& executor);
  // The destination end of SendReceive, from descriptors alone.
  // InvalidArgument on the source (dataplane/route.h's
  // CheckRouteDestination).
  GlooBundleSubmission ReceiveBundle(
      absl::Span<const ValueDescriptor> descriptors, const GlooRoute& route,
      GlooExecutor& executor);

  // Caller-owned outputs (docs/dataplane.md, "Caller-owned outputs"): the
  // operations above, writing their result into `output` instead of a new
  // tensor, so that a steady loop allocates no tensor memory. `output` must
  // have exactly the result's descriptor (InvalidArgument otherwise, nothing
  // queued); the submission's output is `output` itself and its completion
  // retains it. all_reduce_sum and broadcast may run in place (`output`
  // shares `value`'s buffer); the gathers and variable_all_to_all refuse an
  // output that shares the input's buffer.
  GlooTensorSubmission AllReduceSumInto(const HostTensor& value,
                                        const HostTensor& output,
                                        GlooGroup& group,
                                        GlooExecutor& executor);
  GlooTensorSubmission AllGatherEvenInto(const HostTensor& value, size_t axis,
                                         const HostTensor& output,
                                         GlooGroup& group,
                                         GlooExecutor& executor);
  GlooTensorSubmission AllGatherUnevenInto(
      const HostTensor& value, absl::Span<const size_t> counts, size_t axis,
      const HostTensor& output, GlooGroup& group, GlooExecutor& executor);
  GlooTensorSubmission VariableAllToAllInto(
      const HostTensor& value, const PeerCounts& counts, size_t axis,
      const HostTensor& output, GlooGroup& group, GlooExecutor& executor);
  GlooTensorSubmission BroadcastInto(const HostTensor& value,
                                     size_t root_member_index,
                                     const HostTensor& output, GlooGroup& group,
                                     GlooExecutor& executor);
  // The destination end of SendReceive into `outputs` (their descriptors
  // are the ones received; no two may share a byte: dataplane/bundle.h's
  // CheckBundleOutputs). InvalidArgument on the source.
  GlooBundleSubmission ReceiveBundleInto(absl::Span<const HostTensor> outputs,
                                         const GlooRoute& route,
                                         GlooExecutor& executor);

  // Point-to-point in both directions at once: every transfer of the batch
  // is posted together and the completion completes when all have. Each
  // `sends` entry sends its tensor to member `peer` of `group`; each
  // `receives` entry receives into its (caller-owned) tensor from member
  // `peer`, whose descriptor is the one expected. A transfer pairs with the
  // peer's matching transfer on the same route in route order, whether the
  // peer batches it or uses SendReceive with one tensor; so two members can
  // swap tensors, and a ring (send to the next, receive from the previous)
  // needs no even/odd ordering. With verify_agreement the batch checks
  // every transfer before it posts any payload, so the peer must then batch
  // the same transfers with this member the same way (or have one transfer
  // with it). InvalidArgument, nothing queued, for an empty batch, a peer
  // that is this member or outside the group, two receives into one
  // buffer, a send of a buffer a receive writes, or more than
  // kMaxBatchTransfers. The output: the receive tensors, in order.
  GlooBundleSubmission BatchSendReceive(
      absl::Span<const PeerValue<HostTensor>> sends,
      absl::Span<const PeerValue<HostTensor>> receives, GlooGroup& group,
      GlooExecutor& executor);

  // OK when new work named `operation` may be submitted; otherwise the
  // refusal every operation gives (poisoned: the original cause; work
  // quarantined: FailedPrecondition).
  absl::Status Admission(const char* operation) const;
  // The failure vocabulary, the same on NcclBackend and on both sessions
  // (docs/contract.md, "Failures"); the backend and its GlooSession share
  // one state.
  // OK while healthy; once poisoned, the first cause, forever.
  absl::Status poison() const;
  // Latches `cause` (an error; an OK cause does nothing; the first cause
  // wins): every later operation is refused with it, nothing queued.
  // Nothing is torn down (no Gloo context is aborted): work already
  // submitted, running or queued, still runs (as on NCCL).
  void Poison(const absl::Status& cause);
  // Poison(cause), then aborts every Gloo context so pending operations
  // fail now instead of waiting for a peer: what a native failure or a job
  // failure reported by the control plane does. Any thread, any time.
  void Abort(const absl::Status& cause);
  // Operations quarantined now (for schedulers and tests).
  size_t quarantined() const;

 private:
  // GlooSession's native layer runs the session's operations through the
  // *Impl functions below, under the session's names.
  friend class internal::NativeLayer;

  explicit GlooBackend(std::shared_ptr<internal::SessionImpl> impl);
  // Admission under `name`, group/executor ownership and the group's
  // capability.
  absl::Status Precheck(const char* name, const GlooGroup& group,
                        const GlooExecutor& executor) const;
  // OK when this member is the destination of `route` (receive_bundle,
  // receive_bundle_into, under `name`): the engine's words
  // (dataplane/route.h).
  absl::Status CheckDestination(const char* name, const GlooRoute& route) const;
  // What a refused operation's peers check before the payload, when they
  // do (verify_agreement; variable_all_to_all always).
  enum class AgreementCheck { kCollective, kAllToAll };
  // Returns `refusal`, an operation refused on this member's own arguments
  // (validation can differ between members). When the peers check
  // agreement before the payload, they wait for this member's record, so
  // it is queued on `executor` (taking the operation's sequence number)
  // saying that this member refused (kRefusedCanonical,
  // dataplane/agreement.h): the peers refuse the operation too,
  // naming this member, instead of waiting for op_timeout. Otherwise
  // nothing is queued: the peers wait for this member's next submission
  // (a corrected retry pairs with theirs) or op_timeout.
  absl::Status RefuseWithPeers(const char* name, const std::string& op,
                               GlooGroup& group, GlooExecutor& executor,
                               AgreementCheck check,
                               const absl::Status& refusal);
  // The same for a batch refused on its buffers (CheckBatchBuffers; a batch
  // whose peers are wrong names no one to tell): each of its transfers
  // exchanges the refusal's fingerprint with its peer on its route's next
  // number, as the batch's own check would have, so every peer of the
  // batch refuses its side at once.
  absl::Status RefuseBatchWithPeers(
      const char* name, const std::string& op, GlooGroup& group,
      GlooExecutor& executor, absl::Span<const PeerValue<HostTensor>> sends,
      absl::Span<const PeerValue<HostTensor>> receives,
      const absl::Status& refusal);
  // The same for a transfer on `route` (both ends exchange fingerprints).
  absl::Status RefuseWithPeer(const char* name, const std::string& op,
                              const GlooRoute& route, GlooExecutor& executor,
                              const absl::Status& refusal);

  // Who calls an operation below: this class's public surface, whose
  // caller's group and executor must be checked and the operation admitted
  // (Precheck), or the session front, which admitted it already
  // (dataplane/admission.h, NativeLayer::Admit) on its own group and
  // executor: one admission per operation.
  enum class Caller { kBackendSurface, kSessionFront };

  // The operations. `name` is what admission calls the operation (the
  // caller's: "all_gather" from the session, "all_gather_even" from the
  // public functions); `label` is what every other message calls it, the
  // operation and its scope ("all_gather on world"), or empty for `name`
  // on the group. `output`: the caller's, or (nullopt) a new one.
  GlooTensorSubmission AllReduceSumImpl(
      const char* name, std::string label, const HostTensor& value,
      std::optional<HostTensor> output, GlooGroup& group,
      GlooExecutor& executor, Caller caller = Caller::kBackendSurface);
  GlooTensorSubmission AllGatherEvenImpl(
      const char* name, std::string label, const HostTensor& value, size_t axis,
      std::optional<HostTensor> output, GlooGroup& group,
      GlooExecutor& executor, Caller caller = Caller::kBackendSurface);
  GlooTensorSubmission AllGatherUnevenImpl(const HostTensor& value,
                                           absl::Span<const size_t> counts,
                                           size_t axis,
                                           std::optional<HostTensor> output,
                                           GlooGroup& group,
                                           GlooExecutor& executor);
  GlooTensorSubmission VariableAllToAllImpl(
      const char* name, std::string label, const HostTensor& value,
      const PeerCounts& counts, size_t axis, std::optional<HostTensor> output,
      GlooGroup& group, GlooExecutor& executor,
      Caller caller = Caller::kBackendSurface);
  GlooTensorSubmission BroadcastImpl(const HostTensor& value,
                                     size_t root_member_index,
                                     std::optional<HostTensor> output,
                                     GlooGroup& group, GlooExecutor& executor);
  // One end of a bundle on `route`: `send` on the source; on the
  // destination `receive` (the descriptors), into `receive_into` when set.
  GlooBundleSubmission SubmitBundle(const char* name, std::string label,
                                    absl::Span<const HostTensor> send,
                                    absl::Span<const ValueDescriptor> receive,
                                    absl::Span<const HostTensor> receive_into,
                                    const GlooRoute& route,
                                    GlooExecutor& executor,
                                    Caller caller = Caller::kBackendSurface);
  GlooBundleSubmission BatchSendReceiveImpl(
      const char* name, std::string label,
      absl::Span<const PeerValue<HostTensor>> sends,
      absl::Span<const PeerValue<HostTensor>> receives, GlooGroup& group,
      GlooExecutor& executor, Caller caller = Caller::kBackendSurface);
  // The queued work of the sum, once checked. `op` (its label) becomes
  // the operation's name: moved in, not copied.
  GlooTensorSubmission SubmitAllReduce(const char* name, std::string op,
                                       const HostTensor& value,
                                       const HostTensor& output,
                                       const internal::SumKernel& kernel,
                                       GlooGroup& group,
                                       GlooExecutor& executor);
  GlooTensorSubmission SubmitGather(const char* kind, const char* name,
                                    const std::string& op,
                                    const HostTensor& value,
                                    std::vector<size_t> counts, size_t axis,
                                    std::optional<HostTensor> into,
                                    GlooGroup& group, GlooExecutor& executor);

  std::shared_ptr<internal::SessionImpl> impl_;
  DistributedCapabilities caps_;
};

}  // namespace rankd::dataplane::gloo

// The operations GlooBackend declares (communication_backend.h).
namespace rankd::dataplane {

template <>
struct DeclaresAllReduceSum<gloo::GlooBackend> : std::true_type {};
template <>
struct DeclaresAllGatherEven<gloo::GlooBackend> : std::true_type {};
template <>
struct DeclaresAllGatherUneven<gloo::GlooBackend> : std::true_type {};
template <>
struct DeclaresVariableAllToAll<gloo::GlooBackend> : std::true_type {};
template <>
struct DeclaresBroadcast<gloo::GlooBackend> : std::true_type {};
template <>
struct DeclaresBarrier<gloo::GlooBackend> : std::true_type {};
template <>
struct DeclaresAgreeSuccess<gloo::GlooBackend> : std::true_type {};
template <>
struct DeclaresSendReceive<gloo::GlooBackend> : std::true_type {};

static_assert(CommunicationBackend<gloo::GlooBackend>);
static_assert(AllReduceSumBackend<gloo::GlooBackend>);
static_assert(AllGatherEvenBackend<gloo::GlooBackend>);
static_assert(AllGatherUnevenBackend<gloo::GlooBackend>);
static_assert(VariableAllToAllBackend<gloo::GlooBackend>);
static_assert(BroadcastBackend<gloo::GlooBackend>);
static_assert(BarrierBackend<gloo::GlooBackend>);
static_assert(AgreeSuccessBackend<gloo::GlooBackend>);
static_assert(SendReceiveBackend<gloo::GlooBackend>);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_GLOO_GLOO_BACKEND_H_
