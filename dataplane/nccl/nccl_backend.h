// NcclBackend: the CommunicationBackend contract (docs/contract.md) on NCCL.
//
//   Tensor                   = DeviceTensor
//   Executor                 = NcclExecutor (a CUDA stream)
//   CommunicationGroup       = NcclGroup (a scope resolved to a communicator)
//   CommunicationRoute       = NcclRoute (group + source -> destination)
//   CommunicationCompletion  = NcclCompletion (CUDA event + retained
//                              buffers, streams and communicators)
//
// It declares (DeclaresX specializations, checked by static_asserts in
// nccl_backend.cc) every fine-grained operation it implements for real:
//   all_reduce_sum       ncclAllReduce(sum) with the SumTypeFor dtype
//   all_gather_even      ncclAllGather (+ 2-D copies for an inner axis)
//   all_gather_uneven    grouped ncclSend/ncclRecv with exact widths
//   variable_all_to_all  grouped ncclSend/ncclRecv + a self copy
//   broadcast            ncclBroadcast
//   barrier              a one-byte ncclAllReduce
//   agree_success        a one-byte ncclAllReduce(min) of 0/1 flags
//   send_receive         ordered grouped ncclSend/ncclRecv on one route
//
// The backend shares its session's communicators, poison and watchdog; it
// runs each operation on the caller's executor stream. Groups and routes
// come from Group()/Route(), which fail closed (Unimplemented naming "nccl"
// and the capability) while the session has no capability. The session
// must outlive the backend, its groups and routes (after it is destroyed
// they refuse new work). The executor is nccl_executor.h, groups and routes
// nccl_group.h, the completion nccl_completion.h. Depends on
// dataplane/communication_backend.h and the public headers of
// dataplane/nccl.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_BACKEND_H_
#define RANKD_DATAPLANE_NCCL_NCCL_BACKEND_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dataplane/communication_backend.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_completion.h"
#include "dataplane/nccl/nccl_executor.h"
#include "dataplane/nccl/nccl_group.h"
#include "dataplane/nccl/nccl_session.h"

namespace rankd::dataplane::nccl {

namespace internal {
class SessionImpl;  // internal/session_impl.h: private to this package
struct ScopedComm;
}  // namespace internal

// The backend over one session (the contract's CommunicationBackend).
class NcclBackend {
 public:
  using Tensor = DeviceTensor;
  using Executor = NcclExecutor;
  using CommunicationGroup = NcclGroup;
  using CommunicationRoute = NcclRoute;
  using CommunicationCompletion = NcclCompletion;

  explicit NcclBackend(NcclSession& session);

  // Submits evaluation of rank-local tensors: the executor's stream waits
  // for their ready events; the completion retains them. No group, no
  // NCCL; works without a session. InvalidArgument for a null tensor or one
  // on another device.
  static absl::StatusOr<Submission<Unit, std::shared_ptr<NcclCompletion>>>
  SubmitLocalDependencies(absl::Span<const DeviceTensor* const> values,
                          NcclExecutor& executor);

  // The group serving `scope` (fail closed; NotFound for a group this rank
  // is not in).
  absl::StatusOr<NcclGroup> Group(const CollectiveScope& scope) const;
  // A route `source` -> `destination` (member indices of the scope); this
  // rank must be one of them (InvalidArgument in the engine's words,
  // dataplane/route.h's CheckRoute). Needs point_to_point.
  absl::StatusOr<NcclRoute> Route(const CollectiveScope& scope, size_t source,
                                  size_t destination) const;

  TensorSubmission<NcclBackend> AllReduceSum(const DeviceTensor& value,
                                             NcclGroup& group,
                                             NcclExecutor& executor);
  TensorSubmission<NcclBackend> AllGatherEven(const DeviceTensor& value,
                                              size_t axis, NcclGroup& group,
                                              NcclExecutor& executor);
  TensorSubmission<NcclBackend> AllGatherUneven(const DeviceTensor& value,
                                                absl::Span<const size_t> counts,
                                                size_t axis, NcclGroup& group,
                                                NcclExecutor& executor);
  TensorSubmission<NcclBackend> VariableAllToAll(const DeviceTensor& value,
                                                 const PeerCounts& counts,
                                                 size_t axis, NcclGroup& group,
                                                 NcclExecutor& executor);
  TensorSubmission<NcclBackend> Broadcast(const DeviceTensor& value,
                                          size_t root_member_index,
                                          NcclGroup& group,
                                          NcclExecutor& executor);
  UnitSubmission<NcclBackend> Barrier(NcclGroup& group, NcclExecutor& executor);
  AgreementSubmission<NcclBackend> AgreeSuccess(bool success, NcclGroup& group,
                                                NcclExecutor& executor);
  // An ordered bundle over `route`. On the source, `tensors` are sent and
  // returned as the output. On the destination, `tensors` only give the
  // descriptors to receive (as ReceiveBundle) and the output holds fresh
  // device tensors with the data. Both ends must pass the same descriptors
  // in the same order. At most kMaxBundleTensors tensors
  // (dataplane/bundle.h).
  BundleSubmission<NcclBackend> SendReceive(
      absl::Span<const DeviceTensor> tensors, const NcclRoute& route,
      NcclExecutor& executor);
  // The destination end of SendReceive, from descriptors alone, as on
  // GlooBackend: the output holds fresh tensors on this device.
  // InvalidArgument on the source (it has tensors to send: SendReceive).
  BundleSubmission<NcclBackend> ReceiveBundle(
      absl::Span<const ValueDescriptor> descriptors, const NcclRoute& route,
      NcclExecutor& executor);

  // Point-to-point in both directions at once, as GlooBackend's: every
  // transfer is posted in one NCCL group. NCCL matches sends and receives
  // per peer in posting order, and a batch posts every agreement record
  // before the payloads, so all the transfers between two members in one
  // batch must be in exactly one batch on the other member too (a single
  // transfer with a peer also pairs with its plain Send or Receive);
  // otherwise payloads meet record slots and the batch hangs until
  // op_timeout or fails the agreement. InvalidArgument for an empty batch.
  BundleSubmission<NcclBackend> BatchSendReceive(
      absl::Span<const PeerValue<DeviceTensor>> sends,
      absl::Span<const PeerValue<DeviceTensor>> receives, NcclGroup& group,
      NcclExecutor& executor);

  // Caller-owned outputs (docs/nccl.md, "Caller-owned outputs"), as on
  // GlooBackend: the operations above writing into `output` (on this
  // device, exactly the result's descriptor; InvalidArgument otherwise,
  // nothing queued), so a steady loop allocates no device memory for
  // results (inner-axis gathers and all_to_all_v still stage through
  // scratch). The executor's stream first waits for `output`'s ready event
  // (its last write); readers of `output` on other streams must be ordered
  // by the caller. all_reduce_sum and broadcast may run in place (`output`
  // is exactly `value`'s bytes); any other overlap is refused.
  TensorSubmission<NcclBackend> AllReduceSumInto(const DeviceTensor& value,
                                                 const DeviceTensor& output,
                                                 NcclGroup& group,
                                                 NcclExecutor& executor);
  TensorSubmission<NcclBackend> AllGatherEvenInto(const DeviceTensor& value,
                                                  size_t axis,
                                                  const DeviceTensor& output,
                                                  NcclGroup& group,
                                                  NcclExecutor& executor);
  TensorSubmission<NcclBackend> AllGatherUnevenInto(
      const DeviceTensor& value, absl::Span<const size_t> counts, size_t axis,
      const DeviceTensor& output, NcclGroup& group, NcclExecutor& executor);
  TensorSubmission<NcclBackend> VariableAllToAllInto(
      const DeviceTensor& value, const PeerCounts& counts, size_t axis,
      const DeviceTensor& output, NcclGroup& group, NcclExecutor& executor);
  TensorSubmission<NcclBackend> BroadcastInto(const DeviceTensor& value,
                                              size_t root_member_index,
                                              const DeviceTensor& output,
                                              NcclGroup& group,
                                              NcclExecutor& executor);
  // The destination end of SendReceive into `outputs` (their descriptors
  // are the ones received; no two may share a byte: dataplane/bundle.h's
  // CheckBundleOutputs). InvalidArgument on the source.
  BundleSubmission<NcclBackend> ReceiveBundleInto(
      absl::Span<const DeviceTensor> outputs, const NcclRoute& route,
      NcclExecutor& executor);

  // The session's failure state, as GlooBackend's (the backend and its
  // session share one poison; NcclSession has the same three).
  // OK while healthy; once poisoned, the first cause, forever.
  absl::Status poison() const;
  // Latches `cause` (an error; an OK cause does nothing; the first cause
  // wins): every later operation of the session and of its backends is
  // refused with it. Nothing is torn down (no communicator is aborted):
  // work already on a stream is not interrupted.
  void Poison(const absl::Status& cause);
  // Poison(cause), then aborts every communicator of the session so
  // pending operations fail now; what a native failure, a missed deadline
  // or a job failure does. Any thread, any time.
  void Abort(const absl::Status& cause);

 private:
  // The operations with the caller's output, or a new one (null).
  TensorSubmission<NcclBackend> AllReduceSumImpl(const DeviceTensor& value,
                                                 const DeviceTensor* output,
                                                 NcclGroup& group,
                                                 NcclExecutor& executor);
  TensorSubmission<NcclBackend> AllGatherEvenImpl(const DeviceTensor& value,
                                                  size_t axis,
                                                  const DeviceTensor* output,
                                                  NcclGroup& group,
                                                  NcclExecutor& executor);
  TensorSubmission<NcclBackend> AllGatherUnevenImpl(
      const DeviceTensor& value, absl::Span<const size_t> counts, size_t axis,
      const DeviceTensor* output, NcclGroup& group, NcclExecutor& executor);
  TensorSubmission<NcclBackend> VariableAllToAllImpl(
      const DeviceTensor& value, const PeerCounts& counts, size_t axis,
      const DeviceTensor* output, NcclGroup& group, NcclExecutor& executor);
  TensorSubmission<NcclBackend> BroadcastImpl(const DeviceTensor& value,
                                              size_t root_member_index,
                                              const DeviceTensor* output,
                                              NcclGroup& group,
                                              NcclExecutor& executor);
  // SendReceive's two ends: the source sends `send`; the destination
  // receives `receive` into fresh tensors, or into `receive_into`.
  BundleSubmission<NcclBackend> SubmitRoute(
      absl::Span<const DeviceTensor> send,
      absl::Span<const ValueDescriptor> receive,
      absl::Span<const DeviceTensor> receive_into, const NcclRoute& route,
      NcclExecutor& executor);
  // Poison, ownership and capability checks shared by the operations;
  // then the communicator of `group` on the executor's lane, with the
  // group's words ("group 3") for the operation's messages.
  absl::StatusOr<internal::ScopedComm> Check(
      const NcclGroup& group, const NcclExecutor& executor,
      const char* operation, bool DistributedCapabilities::*flag,
      const char* capability) const;
  std::shared_ptr<internal::SessionImpl> impl_;
};

}  // namespace rankd::dataplane::nccl

namespace rankd::dataplane {
template <>
struct DeclaresAllReduceSum<nccl::NcclBackend> : std::true_type {};
template <>
struct DeclaresAllGatherEven<nccl::NcclBackend> : std::true_type {};
template <>
struct DeclaresAllGatherUneven<nccl::NcclBackend> : std::true_type {};
template <>
struct DeclaresVariableAllToAll<nccl::NcclBackend> : std::true_type {};
template <>
struct DeclaresBroadcast<nccl::NcclBackend> : std::true_type {};
template <>
struct DeclaresBarrier<nccl::NcclBackend> : std::true_type {};
template <>
struct DeclaresAgreeSuccess<nccl::NcclBackend> : std::true_type {};
template <>
struct DeclaresSendReceive<nccl::NcclBackend> : std::true_type {};
}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_NCCL_NCCL_BACKEND_H_
