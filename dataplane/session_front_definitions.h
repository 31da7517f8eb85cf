// The members of SessionFront (session_front.h). Include this only from the
// .cc file that instantiates SessionFront for one backend's native layer:
//
//   #include "dataplane/session_front_definitions.h"
//   template class rankd::dataplane::SessionFront<HostTensor,
//                                                 internal::NativeLayer>;
//
// Depends on session_front.h, native_layer.h (the layer's concept),
// admission.h and absl.
#ifndef RANKD_DATAPLANE_SESSION_FRONT_DEFINITIONS_H_
#define RANKD_DATAPLANE_SESSION_FRONT_DEFINITIONS_H_

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/monotonic_clock.h"
#include "dataplane/admission.h"
#include "dataplane/native_layer.h"
#include "dataplane/session_front.h"

namespace rankd::dataplane {

// How long ReformSession waits for the job's loss notice when the job still
// looks healthy: the notice can trail a native failure by a moment, or, for
// a node lost to silence, by up to the daemons' heartbeat timeout (2 s by
// default, docs/operations.md).
inline constexpr absl::Duration kReformLossNoticeGrace = absl::Seconds(10);

namespace session_front_steps {

// The job's health at the epoch `control_plane` joined, waiting up to
// kReformLossNoticeGrace (and never past `deadline`) while it is OK: the
// loss notice can trail the native failure it caused by a moment.
inline absl::Status LossNotice(const ControlPlane& control_plane,
                               absl::Time deadline) {
  const absl::Time notice_by =
      std::min(deadline, MonotonicNow() + kReformLossNoticeGrace);
  absl::Status health = control_plane.JobHealth();
  while (health.ok() && MonotonicNow() < notice_by) {
    absl::SleepFor(absl::Milliseconds(10));
    health = control_plane.JobHealth();
  }
  return health;
}

template <typename Layer>
using SubmissionOf = absl::StatusOr<
    typename DistributedSession<typename Layer::Value>::ValueSubmission>;

// Admission (admission.h's order and words) through the layer: the scope's
// group or communicator, or the refusal.
template <typename Layer>
absl::StatusOr<typename Layer::Scope> Admitted(
    Layer& layer, const char* operation, const CollectiveScope& scope,
    bool DistributedCapabilities::*flag = nullptr,
    const char* capability = nullptr) {
  return layer.Admit(
      {layer.backend_name(), operation, scope, flag, capability});
}

// The words every message of a collective uses: "all_gather on world".
// Remembered per thread for the last (operation, scope) asked: a serving
// loop labels the same operation on the same scope every step, and the
// format costs more than the comparison and the copy.
inline std::string OnScope(absl::string_view operation,
                           const CollectiveScope& scope) {
  struct Remembered {
    std::string operation;
    bool valid = false;
    bool world = false;
    CollectiveGroupId group = 0;
    std::string label;
  };
  thread_local Remembered last;
  const CollectiveGroupId group = scope.is_world() ? 0 : scope.group_id();
  if (!last.valid || last.world != scope.is_world() || last.group != group ||
      last.operation != operation) {
    // Built first, then moved in (no throw): an allocation failure leaves
    // the last entry whole.
    std::string label = absl::StrCat(operation, " on ", scope.ToString());
    std::string key(operation);
    last.label = std::move(label);
    last.operation = std::move(key);
    last.world = scope.is_world();
    last.group = group;
    last.valid = true;
  }
  return last.label;
}

// Admission of a transfer with member `peer` of `scope` (CheckPeerOf).
template <typename Layer>
absl::StatusOr<typename Layer::Scope> AdmittedTransfer(
    Layer& layer, const char* operation, const CollectiveScope& scope,
    size_t peer) {
  auto resolved =
      Admitted(layer, operation, scope,
               &DistributedCapabilities::point_to_point, "point_to_point");
  if (!resolved.ok()) return resolved;
  if (absl::Status s = CheckPeerOf(layer.backend_name(), operation, peer,
                                   layer.MemberCount(*resolved),
                                   layer.LocalMember(*resolved));
      !s.ok()) {
    return s;
  }
  return resolved;
}

// Receive and ReceiveInto (`output` null for a new value).
template <typename Layer>
auto Receive(Layer& layer, const CollectiveScope& scope, size_t peer,
             const ValueDescriptor& descriptor,
             const typename Layer::Value* output) -> SubmissionOf<Layer> {
  auto resolved = AdmittedTransfer(layer, "receive", scope, peer);
  if (!resolved.ok()) return resolved.status();
  return layer.Receive(
      *resolved,
      absl::StrCat("receive from member ", peer, " of ", scope.ToString()),
      peer, descriptor, output);
}

// AllToAllV and AllToAllVInto (`output` null for a new value).
template <typename Layer>
auto AllToAllV(Layer& layer, const CollectiveScope& scope,
               const typename Layer::Value& input,
               absl::Span<const size_t> send_counts,
               absl::Span<const size_t> receive_counts,
               const typename Layer::Value* output) -> SubmissionOf<Layer> {
  auto resolved = Admitted(layer, "all_to_all_v", scope,
                           &DistributedCapabilities::variable_all_to_all,
                           "variable_all_to_all");
  if (!resolved.ok()) return resolved.status();
  return layer.AllToAllV(*resolved, OnScope("all_to_all_v", scope), input,
                         send_counts, receive_counts, output);
}

}  // namespace session_front_steps

template <typename V, typename L>
SessionFront<V, L>::SessionFront(std::shared_ptr<L> layer)
    : layer_(std::move(layer)) {
  static_assert(SessionNativeLayer<L>,
                "a session front's layer implements native_layer.h's "
                "SessionNativeLayer");
}

template <typename V, typename L>
SessionFront<V, L>::~SessionFront() = default;

template <typename V, typename L>
const DistributedSessionDescriptor& SessionFront<V, L>::descriptor() const {
  return layer_->descriptor();
}

template <typename V, typename L>
DistributedCapabilities SessionFront<V, L>::capabilities() const {
  return layer_->capabilities();
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::AllReduceSum(const CollectiveScope& scope,
                                 const Value& input) {
  auto resolved =
      session_front_steps::Admitted(*layer_, "all_reduce_sum", scope);
  if (!resolved.ok()) return resolved.status();
  return layer_->AllReduceSum(
      *resolved, session_front_steps::OnScope("all_reduce_sum", scope), input,
      nullptr);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::AllReduceSumInto(const CollectiveScope& scope,
                                     const Value& input, const Value& output) {
  auto resolved =
      session_front_steps::Admitted(*layer_, "all_reduce_sum", scope);
  if (!resolved.ok()) return resolved.status();
  return layer_->AllReduceSum(
      *resolved, session_front_steps::OnScope("all_reduce_sum", scope), input,
      &output);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::AllGather(const CollectiveScope& scope,
                              const Value& input) {
  auto resolved = session_front_steps::Admitted(*layer_, "all_gather", scope);
  if (!resolved.ok()) return resolved.status();
  return layer_->AllGather(*resolved,
                           session_front_steps::OnScope("all_gather", scope),
                           input, nullptr);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::AllGatherInto(const CollectiveScope& scope,
                                  const Value& input, const Value& output) {
  auto resolved = session_front_steps::Admitted(*layer_, "all_gather", scope);
  if (!resolved.ok()) return resolved.status();
  return layer_->AllGather(*resolved,
                           session_front_steps::OnScope("all_gather", scope),
                           input, &output);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::AllToAllV(const CollectiveScope& scope, const Value& input,
                              absl::Span<const size_t> send_counts,
                              absl::Span<const size_t> receive_counts) {
  return session_front_steps::AllToAllV(*layer_, scope, input, send_counts,
                                        receive_counts, nullptr);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::AllToAllVInto(const CollectiveScope& scope,
                                  const Value& input,
                                  absl::Span<const size_t> send_counts,
                                  absl::Span<const size_t> receive_counts,
                                  const Value& output) {
  return session_front_steps::AllToAllV(*layer_, scope, input, send_counts,
                                        receive_counts, &output);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::Send(const CollectiveScope& scope, size_t peer,
                         const Value& input) {
  auto resolved =
      session_front_steps::AdmittedTransfer(*layer_, "send", scope, peer);
  if (!resolved.ok()) return resolved.status();
  return layer_->Send(
      *resolved,
      absl::StrCat("send to member ", peer, " of ", scope.ToString()), peer,
      input);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::Receive(const CollectiveScope& scope, size_t peer,
                            const ValueDescriptor& descriptor) {
  return session_front_steps::Receive(*layer_, scope, peer, descriptor,
                                      nullptr);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValueSubmission>
SessionFront<V, L>::ReceiveInto(const CollectiveScope& scope, size_t peer,
                                const Value& output) {
  return session_front_steps::Receive(*layer_, scope, peer, output.descriptor(),
                                      &output);
}

template <typename V, typename L>
absl::StatusOr<typename SessionFront<V, L>::ValuesSubmission>
SessionFront<V, L>::BatchSendReceive(
    const CollectiveScope& scope, absl::Span<const PeerValue<Value>> sends,
    absl::Span<const PeerValue<Value>> receives) {
  auto resolved = session_front_steps::Admitted(
      *layer_, "batch_send_receive", scope,
      &DistributedCapabilities::point_to_point, "point_to_point");
  if (!resolved.ok()) return resolved.status();
  return layer_->BatchSendReceive(
      *resolved, session_front_steps::OnScope("batch_send_receive", scope),
      sends, receives);
}

template <typename V, typename L>
absl::StatusOr<std::vector<uint32_t>> SessionFront<V, L>::AllGatherWords(
    absl::Span<const uint32_t> local) {
  return layer_->control_plane()->AllGatherWords(local,
                                                 layer_->words_timeout());
}

template <typename V, typename L>
absl::StatusOr<std::unique_ptr<PendingWords>>
SessionFront<V, L>::SubmitAllGatherWords(absl::Span<const uint32_t> local,
                                         absl::Duration timeout) {
  return layer_->control_plane()->SubmitAllGatherWords(local, timeout);
}

template <typename V, typename L>
absl::Status SessionFront<V, L>::poison() const {
  return layer_->poison();
}

template <typename V, typename L>
void SessionFront<V, L>::Poison(const absl::Status& cause) {
  if (!cause.ok()) layer_->Poison(cause);
}

template <typename V, typename L>
void SessionFront<V, L>::Abort(const absl::Status& cause) {
  if (!cause.ok()) layer_->Abort(cause);
}

template <typename V, typename L>
template <typename Session, typename Reopen>
absl::StatusOr<std::unique_ptr<Session>> SessionFront<V, L>::ReformSession(
    std::unique_ptr<Session> ended, absl::Duration timeout, const char* backend,
    Reopen reopen) {
  if (ended == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " backend: re-forming a session: there is no session"));
  }
  SessionFront& front = *ended;
  const uint64_t epoch = front.descriptor().epoch();
  const uint32_t rank = front.descriptor().rank();
  const std::string prefix = absl::StrCat(
      backend, " backend: re-forming the session of epoch ", epoch, ": ");
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "the timeout must be positive; got ",
                     absl::FormatDuration(timeout)));
  }
  ControlPlane* control_plane = front.layer().control_plane();
  const absl::Time deadline = MonotonicNow() + timeout;
  // Only a loss moves the job past this epoch. A session poisoned while the
  // job stays healthy (a stalled peer, a disagreement, its owner's Poison)
  // has no later epoch to re-form into, and waiting for one would take the
  // whole timeout. The job's loss notice can trail the native failure that
  // poisoned the session by a moment: wait a little for it. Unless this
  // process already joined a later epoch (another of its sessions
  // re-formed first): its health is then the new epoch's, and Rejoin
  // returns that epoch at once.
  const bool moved_on = control_plane->JoinedEpoch() > epoch;
  absl::Status health =
      moved_on
          ? absl::AbortedError(absl::StrCat(
                "this process already joined epoch ",
                control_plane->JoinedEpoch(), " after epoch ", epoch, " ended"))
          : session_front_steps::LossNotice(*control_plane, deadline);
  // The ended epoch's cause: what poisoned the session, else the job's
  // failure at that epoch, else this call ending a healthy session.
  absl::Status cause = front.poison();
  if (cause.ok()) cause = health;
  if (cause.ok()) {
    cause = absl::AbortedError(absl::StrCat(backend,
                                            " backend: the session of epoch ",
                                            epoch, " was ended to re-form it"));
  }
  // Aborts every context or communicator once (bounded by the backend's
  // abort deadline); a poisoned session's are aborted already or now.
  front.Abort(cause);
  ended.reset();
  if (health.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        prefix, "the job is healthy at epoch ", epoch,
        " (no rank or node of this session's job was lost), so there is no "
        "later epoch to re-form into; the session ended with: ",
        cause.message()));
  }

  // Joins the next epoch and opens its session; a second loss while the
  // session opens ends that epoch too, and then the next one is joined, all
  // within `timeout`.
  uint64_t joined_from = epoch;
  std::string earlier;  // the epochs that ended while their session opened
  while (true) {
    const absl::Duration left = deadline - MonotonicNow();
    absl::StatusOr<DistributedSessionDescriptor> next =
        left > absl::ZeroDuration()
            ? control_plane->Rejoin(joined_from, left)
            : absl::StatusOr<DistributedSessionDescriptor>(
                  absl::DeadlineExceededError(absl::StrCat(
                      "the timeout (", absl::FormatDuration(timeout),
                      ") passed before epoch ", joined_from + 1,
                      " was joined")));
    if (!next.ok()) {
      const absl::StatusCode code = next.status().code();
      // A terminal job failure keeps the ended session's error class, so a
      // caller's handling of it does not change with recovery.
      const bool terminal = code != absl::StatusCode::kDeadlineExceeded &&
                            code != absl::StatusCode::kUnimplemented &&
                            code != absl::StatusCode::kInvalidArgument;
      return absl::Status(
          terminal ? cause.code() : code,
          absl::StrCat(prefix, earlier, "joining epoch ", joined_from + 1,
                       " or later: ", next.status().message()));
    }
    if (next->epoch() <= joined_from || next->rank() != rank) {
      return absl::InternalError(
          absl::StrCat(prefix, earlier, "the control plane rejoined rank ",
                       next->rank(), " at epoch ", next->epoch(),
                       "; expected rank ", rank, " after epoch ", joined_from));
    }
    const uint64_t joined = next->epoch();
    // The reopen's own connect or init bound must not outlast the caller's.
    const absl::Duration open_bound =
        std::max(deadline - MonotonicNow(), absl::Milliseconds(1));
    absl::StatusOr<std::unique_ptr<Session>> reopened =
        reopen(*std::move(next), control_plane, open_bound);
    if (reopened.ok()) return reopened;
    // A failure with the job healthy at the joined epoch is the new
    // session's own (returned as it is); one because that epoch ended too
    // (a second loss) is recovered from like the first.
    if (session_front_steps::LossNotice(*control_plane, deadline).ok()) {
      return absl::Status(
          reopened.status().code(),
          absl::StrCat(prefix, earlier, reopened.status().message()));
    }
    absl::StrAppend(&earlier, "epoch ", joined,
                    " ended while its session opened (",
                    reopened.status().message(), "); ");
    joined_from = joined;
  }
}

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SESSION_FRONT_DEFINITIONS_H_
