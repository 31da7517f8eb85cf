#include "dataplane/gloo/gloo_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/admission.h"
#include "dataplane/descriptor_proto.h"

namespace rankd::dataplane::gloo {
namespace {

using ValueSubmission = DistributedSession<HostTensor>::ValueSubmission;

constexpr char kBackendName[] = "gloo";

absl::StatusOr<ValueSubmission> Widen(GlooTensorSubmission submission) {
  if (!submission.ok()) return submission.status();
  return ValueSubmission{std::move(submission->output),
                         std::move(submission->completion)};
}

}  // namespace

GlooSession::GlooSession(ControlPlane* control_plane,
                         std::unique_ptr<GlooBackend> backend)
    : control_plane_(control_plane), backend_(std::move(backend)) {}

const DistributedSessionDescriptor& GlooSession::descriptor() const {
  return backend_->descriptor();
}

DistributedCapabilities GlooSession::capabilities() const {
  return backend_->capabilities();
}

absl::StatusOr<GlooGroup*> GlooSession::Scope(
    const char* operation, const CollectiveScope& scope,
    bool DistributedCapabilities::*flag, const char* capability,
    ResolvedScope* resolved) {
  if (absl::Status s = Admit({kBackendName, operation, scope, flag, capability},
                             backend_->Admission(operation), descriptor(),
                             backend_->capabilities());
      !s.ok()) {
    return s;
  }
  auto group = backend_->ResolveGroup(scope);
  if (group.ok() && resolved != nullptr) {
    *resolved = {(*group)->members(), (*group)->local_rank(), (*group)->id()};
  }
  return group;
}

absl::StatusOr<ValueSubmission> GlooSession::AllReduceSum(
    const CollectiveScope& scope, const Value& input) {
  auto group = Scope("all_reduce_sum", scope);
  if (!group.ok()) return group.status();
  return Widen(backend_->AllReduceSum(input, **group, backend_->executor()));
}

absl::StatusOr<ValueSubmission> GlooSession::AllGather(
    const CollectiveScope& scope, const Value& input) {
  auto group = Scope("all_gather", scope);
  if (!group.ok()) return group.status();
  return Widen(
      backend_->AllGatherEven(input, 0, **group, backend_->executor()));
}

absl::StatusOr<ValueSubmission> GlooSession::AllReduceSumInto(
    const CollectiveScope& scope, const Value& input, const Value& output) {
  auto group = Scope("all_reduce_sum", scope);
  if (!group.ok()) return group.status();
  return Widen(
      backend_->AllReduceSumInto(input, output, **group, backend_->executor()));
}

absl::StatusOr<ValueSubmission> GlooSession::AllGatherInto(
    const CollectiveScope& scope, const Value& input, const Value& output) {
  auto group = Scope("all_gather", scope);
  if (!group.ok()) return group.status();
  return Widen(backend_->AllGatherEvenInto(input, 0, output, **group,
                                           backend_->executor()));
}

absl::StatusOr<ValueSubmission> GlooSession::AllToAllV(
    const CollectiveScope& scope, const Value& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts) {
  return AllToAllVImpl(scope, input, send_counts, receive_counts, std::nullopt);
}

absl::StatusOr<ValueSubmission> GlooSession::AllToAllVInto(
    const CollectiveScope& scope, const Value& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, const Value& output) {
  return AllToAllVImpl(scope, input, send_counts, receive_counts, output);
}

absl::StatusOr<ValueSubmission> GlooSession::AllToAllVImpl(
    const CollectiveScope& scope, const Value& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, std::optional<Value> output) {
  auto group = Scope("all_to_all_v", scope,
                     &DistributedCapabilities::variable_all_to_all,
                     "variable_all_to_all");
  if (!group.ok()) return group.status();
  // The backend checks the counts (shape.h's LayoutAllToAll).
  PeerCounts counts{
      std::vector<size_t>(send_counts.begin(), send_counts.end()),
      std::vector<size_t>(receive_counts.begin(), receive_counts.end())};
  return Widen(output.has_value()
                   ? backend_->VariableAllToAllInto(input, counts, 0, *output,
                                                    **group,
                                                    backend_->executor())
                   : backend_->VariableAllToAll(input, counts, 0, **group,
                                                backend_->executor()));
}

absl::StatusOr<ValueSubmission> GlooSession::Send(const CollectiveScope& scope,
                                                  size_t peer,
                                                  const Value& input) {
  ResolvedScope resolved;
  auto group = Scope("send", scope, &DistributedCapabilities::point_to_point,
                     "point_to_point", &resolved);
  if (!group.ok()) return group.status();
  if (absl::Status s = CheckPeerOf(kBackendName, "send", peer, resolved);
      !s.ok()) {
    return s;
  }
  auto route =
      backend_->Route(**group, (*group)->rank(), (*group)->members()[peer]);
  if (!route.ok()) return route.status();
  auto bundle = backend_->SendReceive(absl::MakeConstSpan(&input, 1), *route,
                                      backend_->executor());
  if (!bundle.ok()) return bundle.status();
  return ValueSubmission{std::move(bundle->output.front()),
                         std::move(bundle->completion)};
}

absl::StatusOr<ValueSubmission> GlooSession::Receive(
    const CollectiveScope& scope, size_t peer,
    const ValueDescriptor& descriptor) {
  return ReceiveImpl(scope, peer, descriptor, std::nullopt);
}

absl::StatusOr<ValueSubmission> GlooSession::ReceiveInto(
    const CollectiveScope& scope, size_t peer, const Value& output) {
  return ReceiveImpl(scope, peer, output.descriptor(), output);
}

absl::StatusOr<ValueSubmission> GlooSession::ReceiveImpl(
    const CollectiveScope& scope, size_t peer,
    const ValueDescriptor& descriptor, std::optional<Value> output) {
  ResolvedScope resolved;
  auto group = Scope("receive", scope, &DistributedCapabilities::point_to_point,
                     "point_to_point", &resolved);
  if (!group.ok()) return group.status();
  if (absl::Status s = CheckPeerOf(kBackendName, "receive", peer, resolved);
      !s.ok()) {
    return s;
  }
  auto route =
      backend_->Route(**group, (*group)->members()[peer], (*group)->rank());
  if (!route.ok()) return route.status();
  auto bundle =
      output.has_value()
          ? backend_->ReceiveBundleInto(absl::MakeConstSpan(&*output, 1),
                                        *route, backend_->executor())
          : backend_->ReceiveBundle(absl::MakeConstSpan(&descriptor, 1), *route,
                                    backend_->executor());
  if (!bundle.ok()) return bundle.status();
  return ValueSubmission{std::move(bundle->output.front()),
                         std::move(bundle->completion)};
}

absl::StatusOr<GlooSession::ValuesSubmission> GlooSession::BatchSendReceive(
    const CollectiveScope& scope, absl::Span<const PeerValue<Value>> sends,
    absl::Span<const PeerValue<Value>> receives) {
  auto group =
      Scope("batch_send_receive", scope,
            &DistributedCapabilities::point_to_point, "point_to_point");
  if (!group.ok()) return group.status();
  auto batch = backend_->BatchSendReceive(sends, receives, **group,
                                          backend_->executor());
  if (!batch.ok()) return batch.status();
  return ValuesSubmission{std::move(batch->output),
                          std::move(batch->completion)};
}

absl::StatusOr<std::vector<uint32_t>> GlooSession::AllGatherWords(
    absl::Span<const uint32_t> local) {
  return control_plane_->AllGatherWords(local,
                                        backend_->options().words_timeout);
}

absl::StatusOr<std::unique_ptr<PendingWords>> GlooSession::SubmitAllGatherWords(
    absl::Span<const uint32_t> local, absl::Duration timeout) {
  return control_plane_->SubmitAllGatherWords(local, timeout);
}

absl::StatusOr<std::unique_ptr<GlooSession>> GlooSession::Open(
    const DistributedSessionDescriptor& descriptor, ControlPlane* control_plane,
    const GlooSessionOptions& options) {
  auto backend = GlooBackend::Open(descriptor, control_plane, options);
  if (!backend.ok()) return backend.status();
  return std::make_unique<GlooSession>(control_plane, *std::move(backend));
}

}  // namespace rankd::dataplane::gloo
