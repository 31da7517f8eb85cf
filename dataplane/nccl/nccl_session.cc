#include "dataplane/nccl/nccl_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/internal/native_layer.h"
#include "dataplane/nccl/internal/session_impl.h"
#include "dataplane/session_front_definitions.h"

namespace rankd::dataplane {
template class SessionFront<nccl::DeviceTensor, nccl::internal::NativeLayer>;
}  // namespace rankd::dataplane

namespace rankd::dataplane::nccl {

using internal::OpPlan;
using internal::SessionImpl;

NcclSession::NcclSession(std::shared_ptr<internal::NativeLayer> layer)
    : SessionFront(std::move(layer)) {}

NcclSession::~NcclSession() = default;

bool NcclSession::ready() const { return layer().impl()->ready(); }
std::string NcclSession::unavailable_reason() const {
  return layer().impl()->unavailable_reason();
}
int NcclSession::device() const { return layer().impl()->device(); }
std::shared_ptr<CudaStream> NcclSession::stream() const {
  return layer().impl()->stream();
}
size_t NcclSession::quarantined() const {
  return layer().impl()->quarantined();
}
size_t NcclSession::communicator_count() const {
  return layer().impl()->communicator_count();
}
const std::shared_ptr<SessionImpl>& NcclSession::impl() const {
  return layer().impl();
}

absl::StatusOr<std::unique_ptr<NcclSession>> NcclSession::Create(
    DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
    NcclSessionOptions options) {
  NcclSessionOptions opened_with = options;
  auto impl = SessionImpl::Create(std::move(descriptor), control_plane,
                                  std::move(options));
  if (!impl.ok()) return impl.status();
  auto session = std::unique_ptr<NcclSession>(new NcclSession(
      std::make_shared<internal::NativeLayer>(*std::move(impl))));
  session->opened_with_ = std::move(opened_with);
  return session;
}

absl::StatusOr<std::unique_ptr<NcclSession>> NcclSession::Reform(
    std::unique_ptr<NcclSession> ended, absl::Duration timeout) {
  NcclSessionOptions options;
  if (ended != nullptr) {
    options = ended->opened_with_;
    // The device the ended session resolved, whatever rule chose it.
    if (ended->device() >= 0) options.device = ended->device();
  }
  return ReformSession(
      std::move(ended), timeout, kBackendName,
      [&options](DistributedSessionDescriptor descriptor,
                 ControlPlane* control_plane, absl::Duration open_bound) {
        NcclSessionOptions bounded = options;
        bounded.init_timeout = std::min(options.init_timeout, open_bound);
        auto session = Open(std::move(descriptor), control_plane, bounded);
        // A later Reform bounds itself afresh.
        if (session.ok()) (*session)->opened_with_ = options;
        return session;
      });
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

absl::Status NcclSession::Initialize() { return layer().impl()->Initialize(); }

absl::Status NcclSession::Refuse(const CollectiveScope& scope,
                                 const RefusedOperation& what,
                                 const absl::Status& refusal) {
  using Kind = RefusedOperation::Kind;
  auto comm = layer().impl()->CommFor(scope, "a refused operation");
  if (!comm.ok()) return refusal;
  const uint32_t n = static_cast<uint32_t>((*comm)->members.size());
  const uint32_t me = (*comm)->local_rank;
  auto is_peer = [&](size_t peer) { return peer < n && peer != me; };
  OpPlan plan;
  plan.name = absl::StrCat("a refused operation on ", scope.ToString());
  plan.comm = *comm;
  plan.scope = scope.ToString();
  plan.stream = layer().impl()->stream();
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
  return layer().impl()->RefuseWithPeers(std::move(plan), refusal);
}

}  // namespace rankd::dataplane::nccl
