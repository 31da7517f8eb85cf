// SessionFront: the one DistributedSession (session.h) over any backend.
// Every operation of the contract is written here once: it names the
// operation and its scope ("all_gather on world", the words every message
// of that operation uses), admits it (admission.h: poison, membership,
// capability), checks a peer index, and hands it to the backend's native
// layer (`Layer`, native_layer.h's SessionNativeLayer), which checks its
// own arguments and queues the native work. all_gather_words goes over the
// control plane. A backend's session is this class with its layer
// (GlooSession, NcclSession), plus how to open one and what only that
// backend has (NCCL's stream, ...).
//
// The members are defined in session_front_definitions.h, which only a
// backend's session .cc includes, to instantiate SessionFront for its layer
// (`template class SessionFront<Value, Layer>;`); its public header says
// `extern template`, so that `Layer` stays private to the backend.
// Thread-safe as the layer is. Depends on session.h and absl.
#ifndef RANKD_DATAPLANE_SESSION_FRONT_H_
#define RANKD_DATAPLANE_SESSION_FRONT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/control_plane.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane {

template <typename ValueT, typename Layer>
class SessionFront : public DistributedSession<ValueT> {
 public:
  using Value = ValueT;
  using typename DistributedSession<ValueT>::ValueSubmission;
  using typename DistributedSession<ValueT>::ValuesSubmission;

  SessionFront(const SessionFront&) = delete;
  SessionFront& operator=(const SessionFront&) = delete;

  // DistributedSession (session.h says what each promises).
  const DistributedSessionDescriptor& descriptor() const final;
  DistributedCapabilities capabilities() const final;
  absl::StatusOr<ValueSubmission> AllReduceSum(const CollectiveScope& scope,
                                               const Value& input) final;
  absl::StatusOr<ValueSubmission> AllGather(const CollectiveScope& scope,
                                            const Value& input) final;
  absl::StatusOr<ValueSubmission> AllToAllV(
      const CollectiveScope& scope, const Value& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts) final;
  absl::StatusOr<ValueSubmission> Send(const CollectiveScope& scope,
                                       size_t peer, const Value& input) final;
  absl::StatusOr<ValueSubmission> Receive(
      const CollectiveScope& scope, size_t peer,
      const ValueDescriptor& descriptor) final;
  absl::StatusOr<ValuesSubmission> BatchSendReceive(
      const CollectiveScope& scope, absl::Span<const PeerValue<Value>> sends,
      absl::Span<const PeerValue<Value>> receives) final;
  absl::StatusOr<ValueSubmission> AllReduceSumInto(const CollectiveScope& scope,
                                                   const Value& input,
                                                   const Value& output) final;
  absl::StatusOr<ValueSubmission> AllGatherInto(const CollectiveScope& scope,
                                                const Value& input,
                                                const Value& output) final;
  absl::StatusOr<ValueSubmission> AllToAllVInto(
      const CollectiveScope& scope, const Value& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts, const Value& output) final;
  absl::StatusOr<ValueSubmission> ReceiveInto(const CollectiveScope& scope,
                                              size_t peer,
                                              const Value& output) final;
  absl::StatusOr<std::vector<uint32_t>> AllGatherWords(
      absl::Span<const uint32_t> local) final;
  absl::StatusOr<std::unique_ptr<PendingWords>> SubmitAllGatherWords(
      absl::Span<const uint32_t> local, absl::Duration timeout) final;

  // The failure vocabulary, the same on every backend's session and backend
  // (docs/contract.md, "Failures"); one state with the backend.
  // OK while healthy; once poisoned, the first cause, forever.
  absl::Status poison() const;
  // Latches `cause` (an error; an OK cause does nothing; the first cause
  // wins): every later operation is refused with it, nothing queued.
  // Nothing is torn down: running work is not interrupted.
  void Poison(const absl::Status& cause);
  // Poison(cause), then aborts every native context (Gloo contexts, NCCL
  // communicators) so that pending operations fail now instead of waiting
  // for a peer: what a native failure, a missed deadline or a job failure
  // does. Any thread, any time; the contexts are aborted once.
  void Abort(const absl::Status& cause);

 protected:
  // `layer` is never null.
  explicit SessionFront(std::shared_ptr<Layer> layer);
  ~SessionFront() override;
  Layer& layer() const { return *layer_; }

  // What every backend's static Reform does (the contract is
  // GlooSession::Reform's and NcclSession::Reform's), written once: checks
  // the arguments; aborts `ended` unless it is poisoned already; destroys it
  // (no executor, context or communicator of the ended epoch survives);
  // joins the next epoch through the ended session's control plane
  // (ControlPlane::Rejoin); then opens the new epoch's session with
  // `reopen(descriptor, control_plane, open_bound)`, which the backend binds
  // to the ended session's options, its connect or init timeout cut to
  // `open_bound` (the time left) when that is shorter. When that open fails
  // because the new epoch ended too (a second loss: JobHealth() fails at
  // it, after up to kReformLossNoticeGrace for the notice), it rejoins and
  // opens again, as often as it takes; everything within the one `timeout`.
  // Errors are prefixed
  // "<backend> backend: re-forming the session of epoch <e>: ", then the
  // epochs that ended while their session opened.
  template <typename Session, typename Reopen>
  static absl::StatusOr<std::unique_ptr<Session>> ReformSession(
      std::unique_ptr<Session> ended, absl::Duration timeout,
      const char* backend, Reopen reopen);

 private:
  const std::shared_ptr<Layer> layer_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SESSION_FRONT_H_
