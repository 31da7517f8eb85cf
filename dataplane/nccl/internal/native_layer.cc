#include "dataplane/nccl/internal/native_layer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd::dataplane::nccl::internal {
namespace {

using ValueSubmission = NativeLayer::ValueSubmission;

absl::StatusOr<ValueSubmission> Widen(TensorResult result) {
  if (!result.ok()) return result.status();
  return ValueSubmission{
      std::move(result->output),
      std::shared_ptr<BoundedCompletion>(std::move(result->completion))};
}

}  // namespace

NativeLayer::NativeLayer(std::shared_ptr<SessionImpl> impl)
    : impl_(std::move(impl)) {}

NativeLayer::~NativeLayer() { impl_->Detach(); }

absl::StatusOr<NativeLayer::Scope> NativeLayer::Admit(
    const AdmissionRequest& request) {
  auto comm = impl_->CommFor(request.scope, request.operation, request.flag,
                             request.capability);
  if (!comm.ok()) return comm.status();
  // Not told to the peers: their records would go on this same stream.
  absl::Status capture = impl_->RefuseIfCapturing(
      impl_->stream(),
      absl::StrCat(request.operation, " on ", request.scope.ToString()),
      "the session's stream");
  if (!capture.ok()) return capture;
  return ScopedComm{*std::move(comm), request.scope.ToString()};
}

absl::StatusOr<ValueSubmission> NativeLayer::AllReduceSum(
    const Scope& comm, std::string label, const DeviceTensor& input,
    const DeviceTensor* output) {
  return Widen(SubmitAllReduceSum(*impl_, comm, input, impl_->stream(),
                                  std::move(label), output));
}

absl::StatusOr<ValueSubmission> NativeLayer::AllGather(
    const Scope& comm, std::string label, const DeviceTensor& input,
    const DeviceTensor* output) {
  return Widen(SubmitAllGatherEven(*impl_, comm, input, 0, impl_->stream(),
                                   std::move(label), output));
}

absl::StatusOr<ValueSubmission> NativeLayer::AllToAllV(
    const Scope& comm, std::string label, const DeviceTensor& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, const DeviceTensor* output) {
  // SubmitAllToAll checks the counts (shape.h's LayoutAllToAll).
  return Widen(SubmitAllToAll(*impl_, comm, input, send_counts, receive_counts,
                              0, impl_->stream(), std::move(label), output));
}

absl::StatusOr<ValueSubmission> NativeLayer::Send(const Scope& comm,
                                                  std::string label,
                                                  size_t peer,
                                                  const DeviceTensor& input) {
  return Widen(SubmitSend(*impl_, comm, static_cast<uint32_t>(peer), input,
                          impl_->stream(), std::move(label)));
}

absl::StatusOr<ValueSubmission> NativeLayer::Receive(
    const Scope& comm, std::string label, size_t peer,
    const ValueDescriptor& descriptor, const DeviceTensor* output) {
  return Widen(SubmitReceive(*impl_, comm, static_cast<uint32_t>(peer),
                             descriptor, impl_->stream(), std::move(label),
                             output));
}

absl::StatusOr<NativeLayer::ValuesSubmission> NativeLayer::BatchSendReceive(
    const Scope& comm, std::string label,
    absl::Span<const PeerValue<DeviceTensor>> sends,
    absl::Span<const PeerValue<DeviceTensor>> receives) {
  auto batch = SubmitBatch(*impl_, comm, sends, receives, impl_->stream(),
                           std::move(label));
  if (!batch.ok()) return batch.status();
  return ValuesSubmission{
      std::move(batch->output),
      std::shared_ptr<BoundedCompletion>(std::move(batch->completion))};
}

}  // namespace rankd::dataplane::nccl::internal
