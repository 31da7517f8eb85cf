#include "dataplane/gloo/internal/native_layer.h"

#include <optional>
#include <utility>
#include <vector>

namespace rankd::dataplane::gloo::internal {
namespace {

using ValueSubmission = NativeLayer::ValueSubmission;

absl::StatusOr<ValueSubmission> Widen(GlooTensorSubmission submission) {
  if (!submission.ok()) return submission.status();
  return ValueSubmission{std::move(submission->output),
                         std::move(submission->completion)};
}

// The one value of a bundle of one.
absl::StatusOr<ValueSubmission> Single(GlooBundleSubmission bundle) {
  if (!bundle.ok()) return bundle.status();
  return ValueSubmission{std::move(bundle->output.front()),
                         std::move(bundle->completion)};
}

std::optional<HostTensor> Optional(const HostTensor* output) {
  if (output == nullptr) return std::nullopt;
  return *output;
}

}  // namespace

NativeLayer::NativeLayer(ControlPlane* control_plane,
                         std::unique_ptr<GlooBackend> backend)
    : control_plane_(control_plane), backend_(std::move(backend)) {}

// The session front calls Admit first, on this layer's own group and
// executor: the operations below pass Caller::kSessionFront, so the backend
// does not admit them again.
absl::StatusOr<GlooGroup*> NativeLayer::Admit(const AdmissionRequest& request) {
  if (absl::Status s =
          dataplane::Admit(request, backend_->Admission(request.operation),
                           descriptor(), backend_->capabilities());
      !s.ok()) {
    return s;
  }
  return backend_->ResolveGroup(request.scope);
}

absl::StatusOr<ValueSubmission> NativeLayer::AllReduceSum(
    GlooGroup* group, std::string label, const HostTensor& input,
    const HostTensor* output) {
  return Widen(backend_->AllReduceSumImpl(
      "all_reduce_sum", std::move(label), input, Optional(output), *group,
      backend_->executor(), GlooBackend::Caller::kSessionFront));
}

absl::StatusOr<ValueSubmission> NativeLayer::AllGather(
    GlooGroup* group, std::string label, const HostTensor& input,
    const HostTensor* output) {
  return Widen(backend_->AllGatherEvenImpl(
      "all_gather", std::move(label), input, 0, Optional(output), *group,
      backend_->executor(), GlooBackend::Caller::kSessionFront));
}

absl::StatusOr<ValueSubmission> NativeLayer::AllToAllV(
    GlooGroup* group, std::string label, const HostTensor& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, const HostTensor* output) {
  // The backend checks the counts (shape.h's LayoutAllToAll).
  PeerCounts counts{
      std::vector<size_t>(send_counts.begin(), send_counts.end()),
      std::vector<size_t>(receive_counts.begin(), receive_counts.end())};
  return Widen(backend_->VariableAllToAllImpl(
      "all_to_all_v", std::move(label), input, counts, 0, Optional(output),
      *group, backend_->executor(), GlooBackend::Caller::kSessionFront));
}

absl::StatusOr<ValueSubmission> NativeLayer::Send(GlooGroup* group,
                                                  std::string label,
                                                  size_t peer,
                                                  const HostTensor& input) {
  auto route = backend_->Route(*group, group->rank(), group->members()[peer]);
  if (!route.ok()) return route.status();
  return Single(backend_->SubmitBundle(
      "send", std::move(label), absl::MakeConstSpan(&input, 1), {}, {}, *route,
      backend_->executor(), GlooBackend::Caller::kSessionFront));
}

absl::StatusOr<ValueSubmission> NativeLayer::Receive(
    GlooGroup* group, std::string label, size_t peer,
    const ValueDescriptor& descriptor, const HostTensor* output) {
  auto route = backend_->Route(*group, group->members()[peer], group->rank());
  if (!route.ok()) return route.status();
  return Single(backend_->SubmitBundle(
      "receive", std::move(label), {}, absl::MakeConstSpan(&descriptor, 1),
      output == nullptr ? absl::Span<const HostTensor>()
                        : absl::MakeConstSpan(output, 1),
      *route, backend_->executor(), GlooBackend::Caller::kSessionFront));
}

absl::StatusOr<NativeLayer::ValuesSubmission> NativeLayer::BatchSendReceive(
    GlooGroup* group, std::string label,
    absl::Span<const PeerValue<HostTensor>> sends,
    absl::Span<const PeerValue<HostTensor>> receives) {
  auto batch = backend_->BatchSendReceiveImpl(
      "batch_send_receive", std::move(label), sends, receives, *group,
      backend_->executor(), GlooBackend::Caller::kSessionFront);
  if (!batch.ok()) return batch.status();
  return ValuesSubmission{std::move(batch->output),
                          std::move(batch->completion)};
}

}  // namespace rankd::dataplane::gloo::internal
