// The native-layer interface: everything the data-plane engine asks of a
// backend. Read this first to add a backend (docs/dataplane.md, "The
// engine"); Gloo (dataplane/gloo/) and NCCL (dataplane/nccl/) are its two
// implementations.
//
// What the engine owns (one copy, dataplane/): admission (admission.h),
// argument and shape checks (shape.h, batch.h, caller_output.h), agreement
// verdicts and refusal telling (agreement.h), sequence numbers
// (sequence_numbers.h), completion bookkeeping (operation.h), the
// cancellation modes of a missed bounded wait (cancellation.h), deadlines and
// job health (operation_ledger.h, watchdog.h), poison (poison.h),
// quarantine (quarantine.h) and the diagnosis of who submitted what
// (mismatch_diagnosis.h). A backend supplies only:
//
//   1. How to move bytes. For every operation the session admitted and
//      checked, queue the native work (Gloo: a task on an in-order executor
//      thread; NCCL: kernels on a CUDA stream) and create its Operation
//      (operation.h) retaining every resource that work uses. Take the
//      operation's sequence number (SequenceNumbers) where the native layer
//      orders it, so that every member numbers the same work alike. Move
//      the agreement records the engine asks for (agreement.h) with the
//      payload or before it, and hand what arrived to the verdicts.
//   2. How to report completion. Either push it: Operation::Finish(status)
//      from the thread that ran the work; or let the engine probe it: an
//      Operation with a Probe (e.g. a CUDA event query), queued with
//      MarkQueued(). Never report done before the work and all its effects
//      finished: completions are exact.
//   3. How to abort natively. NativeSession::Abort below: poison the session
//      and tear down every native context (Gloo: abort every context; NCCL:
//      ncclCommAbort every communicator) so that no member stays inside a
//      collective with a dead or diverged peer, and every outstanding
//      operation fails.
//
// and implements the three interfaces below: its session state
// (OperationOwner, through cancellation.h's CancellingOwner, whose hooks
// are its native abort and quarantine), a small adapter for the watchdog
// (NativeSession), and the operations the one session front calls
// (SessionNativeLayer, a concept: SessionFront<Value, Layer> in session_front.h
// is every backend's DistributedSession). The conformance suite
// (dataplane/conformance/) is what a new backend must pass.
//
// Thread-safety: all three are called from any thread (callers, their
// waits, the watchdog thread, the quarantine's reaper); implementations are
// thread-safe. Depends on admission.h, completion.h, control_plane.h, the
// contract's type headers and absl.
#ifndef RANKD_DATAPLANE_NATIVE_LAYER_H_
#define RANKD_DATAPLANE_NATIVE_LAYER_H_

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/admission.h"
#include "dataplane/capabilities.h"
#include "dataplane/completion.h"
#include "dataplane/control_plane.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane {

class Operation;  // operation.h

// The session an operation belongs to, as its completions see it.
// OperationCompletion (operation.h) calls these on behalf of callers.
class OperationOwner {
 public:
  virtual ~OperationOwner() = default;

  // Records the first failure; every later operation is refused with it
  // (poison.h's PoisonLatch). Only latches: tears nothing down. Called by a
  // waiter that saw a native failure or a missed deadline.
  virtual void Poison(const absl::Status& cause) = 0;

  // Whether WaitBounded may use `mode` (completion.h): both modes, unless
  // the native layer cannot cancel or cannot keep work's resources alive.
  // Backends do not write these two: CancellingOwner (cancellation.h)
  // implements them once over native hooks.
  virtual bool SupportsCancellation(CancellationMode mode) const = 0;

  // Applies `mode` to `op`, which missed a WaitBounded deadline of `missed`
  // (the session is already poisoned). kQuarantineUntilComplete: moves what
  // `op` retains to the session's quarantine (quarantine.h), freed only
  // once the work finished. kNativeCancel: aborts natively (as
  // NativeSession::Abort) and returns once the work has left the native
  // layer. Returns false when the work finished in the meantime (nothing
  // was applied), true once the mode was applied, or an error when the mode
  // could not be completed (the work's resources then stay retained: never
  // freed under running work).
  virtual absl::StatusOr<bool> ApplyCancellation(
      const std::shared_ptr<Operation>& op, CancellationMode mode,
      absl::Duration missed) = 0;

  // The last completion of `op` is gone while its work still runs: the
  // owner keeps what it retains alive until the work finished (a
  // quarantine), unless something already does (an executor that holds its
  // queued work).
  virtual void Unattended(const std::shared_ptr<Operation>& op) = 0;

  // A caller is about to block in Wait() until `op` finished: when `op` is
  // next in its executor's order and nothing runs there, the owner may run
  // it now on the caller's thread (which would otherwise sleep while
  // another thread is woken to run it, then be woken itself: two thread
  // hand-offs). Returns once it ran, or at once when it may not. Never for
  // bounded waits: running work cannot return at a deadline. The default
  // does nothing (work on a device runs by itself).
  virtual void RunIfNext(const std::shared_ptr<Operation>& op) {}

  // A caller needs `op` under way without running it: it polls it, waits
  // with a deadline, or dropped its last completion. An owner that holds
  // work back for a caller expected to run it (RunIfNext) starts it now.
  // The default does nothing (work on a device starts by itself).
  virtual void StartHeld(const std::shared_ptr<Operation>& op) {}
};

// The session as its watchdog (watchdog.h) sees it: the job's health, the
// native layer's own health, and the native abort.
class NativeSession {
 public:
  virtual ~NativeSession() = default;

  // The job's health as the control plane reports it: OK, or the job's
  // failure naming the lost rank or node. Not called after
  // Watchdog::Detach().
  virtual absl::Status JobHealth() = 0;

  // An error native work reported on its own (NCCL's asynchronous
  // communicator errors), or OK. Called once per watchdog tick until
  // aborted. The default: OK (Gloo's calls report their own errors).
  virtual absl::Status NativeHealth() { return absl::OkStatus(); }

  // Poisons the session with `cause` and aborts every native context, so
  // that every outstanding operation fails now and later ones are refused
  // with `cause`. Called at most once per tick, and not again once
  // aborted() is true.
  virtual void Abort(const absl::Status& cause) = 0;

  // Whether Abort (by the watchdog or anyone else) already ran.
  virtual bool aborted() const = 0;
};

// The operations as the session front (session_front.h) calls them. The
// front owns the order: it names the operation ("all_reduce_sum on world",
// the `label` every message of that operation uses), admits it through
// Layer::Admit, checks a peer index (CheckPeerOf), and only then calls one
// of the operations below, which check their own arguments with the
// engine's checks (shape.h, caller_output.h, batch.h), tell the peers
// about a refusal where they wait for this member (agreement.h), and queue
// the native work. Every operation returns the submission (the output is
// authoritative once the completion completes; the completion retains
// every resource the work uses), or the refusal, with nothing queued
// except a refusal's record for the peers. `output` is the caller's output
// (the *Into forms), or null for a new one. The layer does not own the
// caller's values: it retains them through the completion.
//
// Errors every operation returns, by code (docs/contract.md is the
// contract; the conformance suite checks the words):
//   InvalidArgument     refused on its own arguments by the engine's checks
//                       (shape.h, caller_output.h, batch.h) or an agreement
//                       verdict before the payload moved; nothing was
//                       queued but the refusal's record, and the session
//                       stays usable. Never returned by a poisoned session.
//   Unimplemented       a capability the session does not advertise
//                       (capabilities.h), before any other check.
//   the poison's code   the session is poisoned (poison.h: the first
//                       cause, InvalidArgument latched as
//                       FailedPrecondition); refused before any native work.
//   ResourceExhausted   a bound the layer keeps (scratch memory, a bundle
//                       of too many tensors).
//   Internal            the native library refused what the engine had
//                       validated: the layer's own defect.
// A completion fails with the native failure as OnNativeFailure /
// the watchdog attribute it (Aborted or Unavailable naming a lost rank,
// DeadlineExceeded naming who did not report), and a poison alone never
// fails work submitted before it: only Abort does.
//
// A backend also offers the fine-grained CommunicationBackend surface
// (communication_backend.h: groups, routes, broadcast, barrier,
// agree_success, uneven all_gather, send_receive, ReceiveBundle) over the
// same native contexts; it admits and checks through the same engine
// headers, so its refusals read as the session's.
template <typename Layer>
concept SessionNativeLayer = requires(
    Layer& layer, const Layer& const_layer, const AdmissionRequest& request,
    const typename Layer::Scope& scope, std::string label,
    const typename Layer::Value& value, const typename Layer::Value* output,
    absl::Span<const size_t> counts, size_t peer,
    const ValueDescriptor& descriptor,
    absl::Span<const PeerValue<typename Layer::Value>> transfers,
    const absl::Status& cause) {
  // The tensor type (HostTensor, DeviceTensor) and a resolved scope (a
  // group, a communicator), cheap to copy.
  typename Layer::Value;
  typename Layer::Scope;
  // "gloo", "nccl": the first word of every message.
  { const_layer.backend_name() } -> std::convertible_to<const char*>;
  {
    const_layer.descriptor()
    } -> std::convertible_to<const DistributedSessionDescriptor&>;
  // What the session advertises now (fail-closed: nothing it cannot do, so
  // nothing at all once poisoned).
  {
    const_layer.capabilities()
    } -> std::convertible_to<DistributedCapabilities>;
  // Admit(request, <the session's own state>, ...) from admission.h, then
  // the scope's group or communicator. Errors: Admit's, unchanged (a layer
  // may add why it advertises nothing).
  {
    layer.Admit(request)
    } -> std::same_as<absl::StatusOr<typename Layer::Scope>>;
  // The scope's size and this rank's member index in it.
  { const_layer.MemberCount(scope) } -> std::convertible_to<size_t>;
  { const_layer.LocalMember(scope) } -> std::convertible_to<size_t>;
  // The operations (session.h says what each computes).
  {
    layer.AllReduceSum(scope, label, value, output)
    } -> std::same_as<absl::StatusOr<
        typename DistributedSession<typename Layer::Value>::ValueSubmission>>;
  {
    layer.AllGather(scope, label, value, output)
    } -> std::same_as<absl::StatusOr<
        typename DistributedSession<typename Layer::Value>::ValueSubmission>>;
  {
    layer.AllToAllV(scope, label, value, counts, counts, output)
    } -> std::same_as<absl::StatusOr<
        typename DistributedSession<typename Layer::Value>::ValueSubmission>>;
  // `peer` is a member index of `scope`, already checked.
  {
    layer.Send(scope, label, peer, value)
    } -> std::same_as<absl::StatusOr<
        typename DistributedSession<typename Layer::Value>::ValueSubmission>>;
  {
    layer.Receive(scope, label, peer, descriptor, output)
    } -> std::same_as<absl::StatusOr<
        typename DistributedSession<typename Layer::Value>::ValueSubmission>>;
  {
    layer.BatchSendReceive(scope, label, transfers, transfers)
    } -> std::same_as<absl::StatusOr<
        typename DistributedSession<typename Layer::Value>::ValuesSubmission>>;
  // all_gather_words travels over the control plane, not the native layer.
  { layer.control_plane() } -> std::convertible_to<ControlPlane*>;
  { const_layer.words_timeout() } -> std::convertible_to<absl::Duration>;
  // The failure vocabulary (docs/contract.md, "Failures"): the cause once
  // poisoned (OK while healthy); Poison only latches; Abort latches and
  // tears every native context down (as NativeSession::Abort).
  { const_layer.poison() } -> std::same_as<absl::Status>;
  layer.Poison(cause);
  layer.Abort(cause);
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_NATIVE_LAYER_H_
