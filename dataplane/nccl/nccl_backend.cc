#include "dataplane/nccl/nccl_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/internal/session_impl.h"
#include "dataplane/route.h"

namespace rankd::dataplane::nccl {

using internal::BundleEnd;
using internal::CommEntry;
using internal::SessionImpl;
using internal::SubmitLocal;

NcclBackend NcclSession::backend() { return NcclBackend(*this); }

// The contract: NcclBackend is a CommunicationBackend and opts into every
// fine-grained operation (each concept also checks the exact signature).
static_assert(CommunicationBackend<NcclBackend>);
static_assert(AllReduceSumBackend<NcclBackend>);
static_assert(AllGatherEvenBackend<NcclBackend>);
static_assert(AllGatherUnevenBackend<NcclBackend>);
static_assert(VariableAllToAllBackend<NcclBackend>);
static_assert(BroadcastBackend<NcclBackend>);
static_assert(BarrierBackend<NcclBackend>);
static_assert(AgreeSuccessBackend<NcclBackend>);
static_assert(SendReceiveBackend<NcclBackend>);

namespace {

std::string GroupName(const NcclGroup& group) {
  return group.is_world() ? std::string("world")
                          : absl::StrCat("group ", group.id());
}

}  // namespace

NcclBackend::NcclBackend(NcclSession& session) : impl_(session.impl()) {}

absl::StatusOr<Submission<Unit, std::shared_ptr<NcclCompletion>>>
NcclBackend::SubmitLocalDependencies(
    absl::Span<const DeviceTensor* const> values, NcclExecutor& executor) {
  return SubmitLocal(values, executor.stream());
}

absl::StatusOr<NcclGroup> NcclBackend::Group(
    const CollectiveScope& scope) const {
  auto comm = impl_->CommFor(scope, "communication group");
  if (!comm.ok()) return comm.status();
  return NcclGroup(impl_, *std::move(comm),
                   scope.is_world() ? kWorldGroupId : scope.group_id(),
                   scope.is_world());
}

absl::StatusOr<NcclRoute> NcclBackend::Route(const CollectiveScope& scope,
                                             size_t source,
                                             size_t destination) const {
  auto comm = impl_->CommFor(scope, "communication route",
                             &DistributedCapabilities::point_to_point,
                             "point_to_point");
  if (!comm.ok()) return comm.status();
  if (absl::Status s = CheckRoute("nccl", "opening a route", scope.ToString(),
                                  (*comm)->members, source, destination,
                                  (*comm)->local_rank);
      !s.ok()) {
    return s;
  }
  NcclGroup group(impl_, *std::move(comm),
                  scope.is_world() ? kWorldGroupId : scope.group_id(),
                  scope.is_world());
  return NcclRoute(std::move(group), static_cast<uint32_t>(source),
                   static_cast<uint32_t>(destination));
}

absl::StatusOr<internal::ScopedComm> NcclBackend::Check(
    const NcclGroup& group, const NcclExecutor& executor, const char* operation,
    bool DistributedCapabilities::*flag, const char* capability) const {
  if (group.impl_ != impl_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: ", operation, ": the group belongs to another session"));
  }
  // The engine's admission, as the session's (SessionImpl::CommFor).
  const CollectiveScope scope = group.is_world()
                                    ? CollectiveScope::World()
                                    : CollectiveScope::Group(group.id());
  if (absl::Status admitted =
          impl_->CommFor(scope, operation, flag, capability).status();
      !admitted.ok()) {
    return admitted;
  }
  if (executor.stream() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: ", operation, ": the executor has no stream"));
  }
  if (executor.device() != impl_->device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: ", operation, ": the executor's stream is on cuda:",
        executor.device(), ", the session on cuda:", impl_->device()));
  }
  // Not told to the peers, like the executor refusals above.
  if (absl::Status s = impl_->RefuseIfCapturing(executor.stream(), operation,
                                                "the executor's stream");
      !s.ok()) {
    return s;
  }
  auto comm = impl_->LaneComm(group.comm_, executor.lane(), operation);
  if (!comm.ok()) return comm.status();
  return internal::ScopedComm{*std::move(comm), GroupName(group)};
}

TensorSubmission<NcclBackend> NcclBackend::AllReduceSum(
    const DeviceTensor& value, NcclGroup& group, NcclExecutor& executor) {
  return AllReduceSumImpl(value, nullptr, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::AllReduceSumInto(
    const DeviceTensor& value, const DeviceTensor& output, NcclGroup& group,
    NcclExecutor& executor) {
  return AllReduceSumImpl(value, &output, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::AllReduceSumImpl(
    const DeviceTensor& value, const DeviceTensor* output, NcclGroup& group,
    NcclExecutor& executor) {
  auto comm = Check(group, executor, "all_reduce_sum", nullptr, nullptr);
  if (!comm.ok()) return comm.status();
  return SubmitAllReduceSum(
      *impl_, *comm, value, executor.stream(),
      absl::StrCat("all_reduce_sum on ", GroupName(group)), output);
}

TensorSubmission<NcclBackend> NcclBackend::AllGatherEven(
    const DeviceTensor& value, size_t axis, NcclGroup& group,
    NcclExecutor& executor) {
  return AllGatherEvenImpl(value, axis, nullptr, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::AllGatherEvenInto(
    const DeviceTensor& value, size_t axis, const DeviceTensor& output,
    NcclGroup& group, NcclExecutor& executor) {
  return AllGatherEvenImpl(value, axis, &output, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::AllGatherEvenImpl(
    const DeviceTensor& value, size_t axis, const DeviceTensor* output,
    NcclGroup& group, NcclExecutor& executor) {
  auto comm = Check(group, executor, "all_gather_even", nullptr, nullptr);
  if (!comm.ok()) return comm.status();
  return SubmitAllGatherEven(
      *impl_, *comm, value, axis, executor.stream(),
      absl::StrCat("all_gather_even(axis ", axis, ") on ", GroupName(group)),
      output);
}

TensorSubmission<NcclBackend> NcclBackend::AllGatherUneven(
    const DeviceTensor& value, absl::Span<const size_t> counts, size_t axis,
    NcclGroup& group, NcclExecutor& executor) {
  return AllGatherUnevenImpl(value, counts, axis, nullptr, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::AllGatherUnevenInto(
    const DeviceTensor& value, absl::Span<const size_t> counts, size_t axis,
    const DeviceTensor& output, NcclGroup& group, NcclExecutor& executor) {
  return AllGatherUnevenImpl(value, counts, axis, &output, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::AllGatherUnevenImpl(
    const DeviceTensor& value, absl::Span<const size_t> counts, size_t axis,
    const DeviceTensor* output, NcclGroup& group, NcclExecutor& executor) {
  auto comm = Check(group, executor, "all_gather_uneven", nullptr, nullptr);
  if (!comm.ok()) return comm.status();
  return SubmitAllGatherUneven(
      *impl_, *comm, value, counts, axis, executor.stream(),
      absl::StrCat("all_gather_uneven(axis ", axis, ") on ", GroupName(group)),
      output);
}

TensorSubmission<NcclBackend> NcclBackend::VariableAllToAll(
    const DeviceTensor& value, const PeerCounts& counts, size_t axis,
    NcclGroup& group, NcclExecutor& executor) {
  return VariableAllToAllImpl(value, counts, axis, nullptr, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::VariableAllToAllInto(
    const DeviceTensor& value, const PeerCounts& counts, size_t axis,
    const DeviceTensor& output, NcclGroup& group, NcclExecutor& executor) {
  return VariableAllToAllImpl(value, counts, axis, &output, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::VariableAllToAllImpl(
    const DeviceTensor& value, const PeerCounts& counts, size_t axis,
    const DeviceTensor* output, NcclGroup& group, NcclExecutor& executor) {
  auto comm = Check(group, executor, "variable_all_to_all",
                    &DistributedCapabilities::variable_all_to_all,
                    "variable_all_to_all");
  if (!comm.ok()) return comm.status();
  return SubmitAllToAll(*impl_, *comm, value, counts.send, counts.receive, axis,
                        executor.stream(),
                        absl::StrCat("variable_all_to_all(axis ", axis, ") on ",
                                     GroupName(group)),
                        output);
}

TensorSubmission<NcclBackend> NcclBackend::Broadcast(const DeviceTensor& value,
                                                     size_t root_member_index,
                                                     NcclGroup& group,
                                                     NcclExecutor& executor) {
  return BroadcastImpl(value, root_member_index, nullptr, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::BroadcastInto(
    const DeviceTensor& value, size_t root_member_index,
    const DeviceTensor& output, NcclGroup& group, NcclExecutor& executor) {
  return BroadcastImpl(value, root_member_index, &output, group, executor);
}

TensorSubmission<NcclBackend> NcclBackend::BroadcastImpl(
    const DeviceTensor& value, size_t root_member_index,
    const DeviceTensor* output, NcclGroup& group, NcclExecutor& executor) {
  auto comm = Check(group, executor, "broadcast", nullptr, nullptr);
  if (!comm.ok()) return comm.status();
  // SubmitBroadcast checks the root (and tells the peers when it is wrong).
  return SubmitBroadcast(
      *impl_, *comm, value, root_member_index, executor.stream(),
      absl::StrCat("broadcast from member ", root_member_index, " on ",
                   GroupName(group)),
      output);
}

UnitSubmission<NcclBackend> NcclBackend::Barrier(NcclGroup& group,
                                                 NcclExecutor& executor) {
  auto comm = Check(group, executor, "barrier", nullptr, nullptr);
  if (!comm.ok()) return comm.status();
  return SubmitBarrier(*impl_, *comm, executor.stream(),
                       absl::StrCat("barrier on ", GroupName(group)));
}

AgreementSubmission<NcclBackend> NcclBackend::AgreeSuccess(
    bool success, NcclGroup& group, NcclExecutor& executor) {
  auto comm = Check(group, executor, "agree_success", nullptr, nullptr);
  if (!comm.ok()) return comm.status();
  return SubmitAgreeSuccess(
      *impl_, *comm, success, executor.stream(),
      absl::StrCat("agree_success on ", GroupName(group)));
}

BundleSubmission<NcclBackend> NcclBackend::BatchSendReceive(
    absl::Span<const PeerValue<DeviceTensor>> sends,
    absl::Span<const PeerValue<DeviceTensor>> receives, NcclGroup& group,
    NcclExecutor& executor) {
  auto comm = Check(group, executor, "batch_send_receive",
                    &DistributedCapabilities::point_to_point, "point_to_point");
  if (!comm.ok()) return comm.status();
  return SubmitBatch(*impl_, *comm, sends, receives, executor.stream(),
                     absl::StrCat("batch_send_receive on ", GroupName(group)));
}

BundleSubmission<NcclBackend> NcclBackend::SendReceive(
    absl::Span<const DeviceTensor> tensors, const NcclRoute& route,
    NcclExecutor& executor) {
  if (route.group().local_rank() == route.source()) {
    return SubmitRoute(tensors, {}, {}, route, executor);
  }
  // The destination's tensors only name what arrives: the same path as
  // ReceiveBundle.
  std::vector<ValueDescriptor> descriptors;
  descriptors.reserve(tensors.size());
  for (const DeviceTensor& t : tensors) descriptors.push_back(t.descriptor());
  return SubmitRoute({}, descriptors, {}, route, executor);
}

BundleSubmission<NcclBackend> NcclBackend::ReceiveBundle(
    absl::Span<const ValueDescriptor> descriptors, const NcclRoute& route,
    NcclExecutor& executor) {
  if (absl::Status s = CheckRouteDestination(
          "nccl", "receive_bundle", GroupName(route.group()),
          route.group().members(), route.source(), route.destination(),
          route.group().local_rank());
      !s.ok()) {
    return s;
  }
  return SubmitRoute({}, descriptors, {}, route, executor);
}

BundleSubmission<NcclBackend> NcclBackend::ReceiveBundleInto(
    absl::Span<const DeviceTensor> outputs, const NcclRoute& route,
    NcclExecutor& executor) {
  if (absl::Status s = CheckRouteDestination(
          "nccl", "receive_bundle_into", GroupName(route.group()),
          route.group().members(), route.source(), route.destination(),
          route.group().local_rank());
      !s.ok()) {
    return s;
  }
  std::vector<ValueDescriptor> descriptors;
  descriptors.reserve(outputs.size());
  for (const DeviceTensor& t : outputs) descriptors.push_back(t.descriptor());
  return SubmitRoute({}, descriptors, outputs, route, executor);
}

BundleSubmission<NcclBackend> NcclBackend::SubmitRoute(
    absl::Span<const DeviceTensor> send,
    absl::Span<const ValueDescriptor> receive,
    absl::Span<const DeviceTensor> receive_into, const NcclRoute& route,
    NcclExecutor& executor) {
  auto comm = Check(route.group(), executor, "send_receive",
                    &DistributedCapabilities::point_to_point, "point_to_point");
  if (!comm.ok()) return comm.status();
  return SubmitBundle(
      *impl_, *comm, BundleEnd{send, receive, receive_into}, route.source(),
      route.destination(), executor.stream(),
      absl::StrCat("send_receive ", route.source(), " -> ", route.destination(),
                   " on ", GroupName(route.group())));
}

absl::Status NcclBackend::poison() const { return impl_->poison(); }

void NcclBackend::Poison(const absl::Status& cause) {
  if (!cause.ok()) impl_->Poison(cause);
}

void NcclBackend::Abort(const absl::Status& cause) {
  if (!cause.ok()) impl_->CancelNative(cause);
}

}  // namespace rankd::dataplane::nccl
