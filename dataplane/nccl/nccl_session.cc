#include "dataplane/nccl/nccl_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/admission.h"
#include "dataplane/nccl/internal/session_impl.h"

namespace rankd::dataplane::nccl {

using internal::OpPlan;
using internal::SessionImpl;
using internal::TensorResult;

namespace {

using ValueSubmission = DistributedSession<DeviceTensor>::ValueSubmission;

absl::StatusOr<ValueSubmission> ToValue(TensorResult result) {
  if (!result.ok()) return result.status();
  return ValueSubmission{
      std::move(result->output),
      std::shared_ptr<BoundedCompletion>(std::move(result->completion))};
}

}  // namespace

NcclSession::NcclSession(std::shared_ptr<internal::SessionImpl> impl)
    : impl_(std::move(impl)) {}

bool NcclSession::ready() const { return impl_->ready(); }
absl::Status NcclSession::poison() const { return impl_->PoisonStatus(); }
std::string NcclSession::unavailable_reason() const {
  return impl_->unavailable_reason();
}
int NcclSession::device() const { return impl_->device(); }
std::shared_ptr<CudaStream> NcclSession::stream() const {
  return impl_->stream();
}
size_t NcclSession::quarantined() const { return impl_->quarantined(); }
size_t NcclSession::communicator_count() const {
  return impl_->communicator_count();
}
const DistributedSessionDescriptor& NcclSession::descriptor() const {
  return impl_->descriptor();
}
DistributedCapabilities NcclSession::capabilities() const {
  return impl_->capabilities();
}

absl::StatusOr<std::unique_ptr<NcclSession>> NcclSession::Create(
    DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
    NcclSessionOptions options) {
  auto core = SessionImpl::Create(std::move(descriptor), control_plane,
                                  std::move(options));
  if (!core.ok()) return core.status();
  return std::unique_ptr<NcclSession>(new NcclSession(*std::move(core)));
}

absl::StatusOr<std::unique_ptr<NcclSession>> NcclSession::Open(
    DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
    NcclSessionOptions options) {
  auto session =
      Create(std::move(descriptor), control_plane, std::move(options));
  if (!session.ok()) return session.status();
  absl::Status init = (*session)->Initialize();
  if (!init.ok()) return init;
  return session;
}

NcclSession::~NcclSession() { impl_->Detach(); }

absl::Status NcclSession::Initialize() { return impl_->Initialize(); }

void NcclSession::Poison(const absl::Status& cause) {
  if (!cause.ok()) impl_->Poison(cause);
}

void NcclSession::Abort(const absl::Status& cause) {
  if (!cause.ok()) impl_->CancelNative(cause);
}

absl::Status NcclSession::Refuse(const CollectiveScope& scope,
                                 const RefusedOperation& what,
                                 const absl::Status& refusal) {
  using Kind = RefusedOperation::Kind;
  auto comm = impl_->CommFor(scope, "a refused operation");
  if (!comm.ok()) return refusal;
  const uint32_t n = static_cast<uint32_t>((*comm)->members.size());
  const uint32_t me = (*comm)->local_rank;
  auto is_peer = [&](size_t peer) { return peer < n && peer != me; };
  OpPlan plan;
  plan.name = absl::StrCat("a refused operation on ", scope.ToString());
  plan.comm = *comm;
  plan.stream = impl_->stream();
  switch (what.kind) {
    case Kind::kCollective:
      break;
    case Kind::kAllToAllV:
      plan.agree_first = true;
      break;
    case Kind::kSend:
    case Kind::kReceive: {
      if (!is_peer(what.peer)) return refusal;
      const uint32_t peer = static_cast<uint32_t>(what.peer);
      plan.route = what.kind == Kind::kSend ? std::make_pair(me, peer)
                                            : std::make_pair(peer, me);
      break;
    }
    case Kind::kBatch:
      // Receives first, then sends, as SubmitBatch orders the records.
      for (const auto* peers : {&what.receive_peers, &what.send_peers}) {
        for (size_t peer : *peers) {
          if (!is_peer(peer)) return refusal;
          plan.batch.push_back(
              {static_cast<uint32_t>(peer), peers == &what.send_peers, 0, ""});
        }
      }
      if (plan.batch.empty()) return refusal;
      break;
  }
  return impl_->RefuseWithPeers(std::move(plan), refusal);
}

absl::StatusOr<ValueSubmission> NcclSession::AllReduceSum(
    const CollectiveScope& scope, const DeviceTensor& input) {
  return AllReduceSumImpl(scope, input, nullptr);
}

absl::StatusOr<ValueSubmission> NcclSession::AllReduceSumInto(
    const CollectiveScope& scope, const DeviceTensor& input,
    const DeviceTensor& output) {
  return AllReduceSumImpl(scope, input, &output);
}

absl::StatusOr<ValueSubmission> NcclSession::AllReduceSumImpl(
    const CollectiveScope& scope, const DeviceTensor& input,
    const DeviceTensor* output) {
  auto comm = impl_->CommFor(scope, "all_reduce_sum");
  if (!comm.ok()) return comm.status();
  return ToValue(SubmitAllReduceSum(
      *impl_, *comm, input, impl_->stream(),
      absl::StrCat("all_reduce_sum on ", scope.ToString()), output));
}

absl::StatusOr<ValueSubmission> NcclSession::AllGather(
    const CollectiveScope& scope, const DeviceTensor& input) {
  return AllGatherImpl(scope, input, nullptr);
}

absl::StatusOr<ValueSubmission> NcclSession::AllGatherInto(
    const CollectiveScope& scope, const DeviceTensor& input,
    const DeviceTensor& output) {
  return AllGatherImpl(scope, input, &output);
}

absl::StatusOr<ValueSubmission> NcclSession::AllGatherImpl(
    const CollectiveScope& scope, const DeviceTensor& input,
    const DeviceTensor* output) {
  auto comm = impl_->CommFor(scope, "all_gather");
  if (!comm.ok()) return comm.status();
  return ToValue(SubmitAllGatherEven(
      *impl_, *comm, input, 0, impl_->stream(),
      absl::StrCat("all_gather on ", scope.ToString()), output));
}

absl::StatusOr<ValueSubmission> NcclSession::AllToAllV(
    const CollectiveScope& scope, const DeviceTensor& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts) {
  return AllToAllVImpl(scope, input, send_counts, receive_counts, nullptr);
}

absl::StatusOr<ValueSubmission> NcclSession::AllToAllVInto(
    const CollectiveScope& scope, const DeviceTensor& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, const DeviceTensor& output) {
  return AllToAllVImpl(scope, input, send_counts, receive_counts, &output);
}

absl::StatusOr<ValueSubmission> NcclSession::AllToAllVImpl(
    const CollectiveScope& scope, const DeviceTensor& input,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, const DeviceTensor* output) {
  auto comm = impl_->CommFor(scope, "all_to_all_v",
                             &DistributedCapabilities::variable_all_to_all,
                             "variable_all_to_all");
  if (!comm.ok()) return comm.status();
  // SubmitAllToAll checks the counts (shape.h's LayoutAllToAll).
  return ToValue(SubmitAllToAll(
      *impl_, *comm, input, send_counts, receive_counts, 0, impl_->stream(),
      absl::StrCat("all_to_all_v on ", scope.ToString()), output));
}

absl::StatusOr<ValueSubmission> NcclSession::Send(const CollectiveScope& scope,
                                                  size_t peer,
                                                  const DeviceTensor& input) {
  auto comm =
      impl_->CommFor(scope, "send", &DistributedCapabilities::point_to_point,
                     "point_to_point");
  if (!comm.ok()) return comm.status();
  auto resolved = ResolveScope(descriptor(), scope);
  if (!resolved.ok()) return resolved.status();
  absl::Status peer_ok = CheckPeerOf(kBackendName, "send", peer, *resolved);
  if (!peer_ok.ok()) return peer_ok;
  return ToValue(SubmitSend(
      *impl_, *comm, static_cast<uint32_t>(peer), input, impl_->stream(),
      absl::StrCat("send to member ", peer, " of ", scope.ToString())));
}

absl::StatusOr<ValueSubmission> NcclSession::Receive(
    const CollectiveScope& scope, size_t peer,
    const ValueDescriptor& descriptor) {
  return ReceiveImpl(scope, peer, descriptor, nullptr);
}

absl::StatusOr<ValueSubmission> NcclSession::ReceiveInto(
    const CollectiveScope& scope, size_t peer, const DeviceTensor& output) {
  return ReceiveImpl(scope, peer, output.descriptor(), &output);
}

absl::StatusOr<ValueSubmission> NcclSession::ReceiveImpl(
    const CollectiveScope& scope, size_t peer,
    const ValueDescriptor& descriptor, const DeviceTensor* output) {
  auto comm =
      impl_->CommFor(scope, "receive", &DistributedCapabilities::point_to_point,
                     "point_to_point");
  if (!comm.ok()) return comm.status();
  auto resolved = ResolveScope(this->descriptor(), scope);
  if (!resolved.ok()) return resolved.status();
  absl::Status peer_ok = CheckPeerOf(kBackendName, "receive", peer, *resolved);
  if (!peer_ok.ok()) return peer_ok;
  return ToValue(SubmitReceive(
      *impl_, *comm, static_cast<uint32_t>(peer), descriptor, impl_->stream(),
      absl::StrCat("receive from member ", peer, " of ", scope.ToString()),
      output));
}

absl::StatusOr<NcclSession::ValuesSubmission> NcclSession::BatchSendReceive(
    const CollectiveScope& scope,
    absl::Span<const PeerValue<DeviceTensor>> sends,
    absl::Span<const PeerValue<DeviceTensor>> receives) {
  auto comm = impl_->CommFor(scope, "batch_send_receive",
                             &DistributedCapabilities::point_to_point,
                             "point_to_point");
  if (!comm.ok()) return comm.status();
  auto batch =
      SubmitBatch(*impl_, *comm, sends, receives, impl_->stream(),
                  absl::StrCat("batch_send_receive on ", scope.ToString()));
  if (!batch.ok()) return batch.status();
  return ValuesSubmission{
      std::move(batch->output),
      std::shared_ptr<BoundedCompletion>(std::move(batch->completion))};
}

absl::StatusOr<std::vector<uint32_t>> NcclSession::AllGatherWords(
    absl::Span<const uint32_t> local) {
  return impl_->control_plane()->AllGatherWords(local,
                                                impl_->options().words_timeout);
}

absl::StatusOr<std::unique_ptr<PendingWords>> NcclSession::SubmitAllGatherWords(
    absl::Span<const uint32_t> local, absl::Duration timeout) {
  return impl_->control_plane()->SubmitAllGatherWords(local, timeout);
}

}  // namespace rankd::dataplane::nccl
