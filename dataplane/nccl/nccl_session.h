// NcclSession: DistributedSession<DeviceTensor> on NCCL (docs/contract.md):
// the one session front (session_front.h) over NCCL's native layer.
//
//   // Any ControlPlane; this one reaches the node's daemon.
//   auto control = MakeClientControlPlane(client.get());
//   // The rank's session descriptor, from the daemon's join answer.
//   auto descriptor = DescriptorFromProto(joined);
//   NcclSessionOptions options;  // device -1: the default device rule
//   auto session = NcclSession::Open(*descriptor, control.get(), options);
//   if (!session.ok()) return session.status();  // no GPU, or init failed
//   auto sum = (*session)->AllReduceSum(CollectiveScope::World(), tensor);
//   if (!sum.ok()) return sum.status();           // refused
//   absl::Status done = sum->completion->Wait();  // or WaitBounded
//
// Every operation runs on the session's own CUDA stream (stream()), in call
// order; inputs produced on other streams are waited for through their
// ready events (DeviceTensor::ready()), and outputs carry their
// operation's completion event as ready event.
//
// Fail-closed: Open() returns a session only when a CUDA device exists and
// every communicator (world + one per distinct group member list) is
// ready; without a device it returns Unavailable and no session, so no
// caller ever holds a session that advertises a capability it lacks. Order
// of checks in every operation: poison (original cause), scope membership
// (NotFound), capability (Unimplemented naming "nccl" and the capability),
// arguments (InvalidArgument), then native work. A native failure, a missed
// deadline or a job failure poisons the session and aborts its
// communicators (Abort()).
//
// The failure vocabulary is GlooSession's (docs/contract.md, "Failures"):
// Poison() only latches, Abort() latches and tears down, poison() reads
// the cause.
//
// AllGatherWords travels over the control plane, works on machines without
// a GPU, and is not affected by poisoning (it is how ranks coordinate a
// recovery).
//
// Thread-safety: operations may be called from several threads, but NCCL
// requires every member to issue collectives on a communicator in the same
// order, which is the caller's responsibility.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_SESSION_H_
#define RANKD_DATAPLANE_NCCL_NCCL_SESSION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/control_plane.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_options.h"
#include "dataplane/session.h"
#include "dataplane/session_front.h"

namespace rankd::dataplane::nccl {

class NcclBackend;
namespace internal {
class SessionImpl;  // internal/session_impl.h: private to this package
class NativeLayer;  // internal/native_layer.h: private to this package
}  // namespace internal
namespace testing {
class NcclSessionPeer;  // testing/nccl_session_peer.h
}  // namespace testing

}  // namespace rankd::dataplane::nccl

namespace rankd::dataplane {
// Instantiated once, in nccl_session.cc.
extern template class SessionFront<nccl::DeviceTensor,
                                   nccl::internal::NativeLayer>;
}  // namespace rankd::dataplane

namespace rankd::dataplane::nccl {

class NcclSession final
    : public SessionFront<DeviceTensor, internal::NativeLayer> {
 public:
  // Opens this rank's session: probes the device, brokers the NCCL unique
  // ids through `control_plane` and initializes every communicator (world
  // + one per distinct group member list), bounded by
  // options.init_timeout. Returns the session only once all of that
  // succeeded. Otherwise: Unavailable naming "nccl" without a CUDA device
  // (or without the libraries), InvalidArgument for bad options, the job's
  // failure when it fails first, DeadlineExceeded naming the communicator
  // that did not come up; any communicator already made is aborted.
  // `control_plane` must outlive the session.
  static absl::StatusOr<std::unique_ptr<NcclSession>> Open(
      DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
      NcclSessionOptions options = {});
  // Re-forms this rank's session after a loss (docs/dataplane.md,
  // "Re-forming after a loss"): `ended`'s job epoch e ended (a rank or node
  // was lost; `rankd --recovery=on`), and this returns the session of epoch
  // e + 1 on the same device. In order: aborts `ended` unless it is
  // poisoned already (its communicators aborted,
  // bounded by options.abort_timeout), destroys it, so that nothing of epoch e
  // survives; waits through its control plane (ControlPlane::Rejoin) for
  // the job to pass epoch e and for the world to be whole again; then opens
  // the new epoch's session as Open does, with the options `ended` was
  // opened with (the same device, a tag Open chose is chosen again in the new
  // epoch; new communicators from the epoch's own unique ids, on a new session
  // stream: stream() of the returned session), through the same control plane.
  // Its keys are epoch e + 1's (EpochKey in dataplane/control_plane.h): a
  // replacement process that Opens its session fresh at that epoch meets it.
  // Tensors the caller holds (the weights) are untouched and stay valid: their
  // memory is never the session's (DeviceTensor memory is the caller's). Every
  // rank of the new epoch must re-form (or open) its sessions in the same
  // order.
  //
  // Takes `ended` in every case; on error there is no session. Errors,
  // prefixed "nccl backend: re-forming the session of epoch <e>: ":
  // InvalidArgument for a null session or a non-positive timeout;
  // FailedPrecondition when the job is still healthy at the ended epoch
  // (GlooSession::Reform says when); DeadlineExceeded naming the epoch when
  // `timeout` passes before the world is whole; `ended`'s error class when the
  // job failed for good instead of recovering; Unimplemented from a control
  // plane that cannot join a later epoch; Open's errors for the new session
  // (bounded by options.init_timeout, as Open is).
  static absl::StatusOr<std::unique_ptr<NcclSession>> Reform(
      std::unique_ptr<NcclSession> ended, absl::Duration timeout);
  ~NcclSession() override;

  bool ready() const;
  // Why the capabilities are empty (no device, ...); empty otherwise.
  std::string unavailable_reason() const;
  int device() const;
  // The stream every session operation runs on.
  std::shared_ptr<CudaStream> stream() const;
  // Operations whose work may still run after a deadline or after their
  // completion was dropped.
  size_t quarantined() const;
  size_t communicator_count() const;
  // The session state, for this package's tests (internal/session_impl.h).
  const std::shared_ptr<internal::SessionImpl>& impl() const;
  // The low-level contract over the same communicators, poison and
  // watchdog, as GlooSession::backend() (nccl_backend.h defines it; the
  // backend is a handle: copies share the session).
  NcclBackend backend();

  // An operation that this member's caller refused before it reached the
  // session (the C ABI checks that a caller's pointers are memory of this
  // device and its stream is one of the device's: checks that can differ
  // between members).
  struct RefusedOperation {
    enum class Kind { kCollective, kAllToAllV, kSend, kReceive, kBatch };
    Kind kind = Kind::kCollective;
    size_t peer = 0;  // kSend: the destination; kReceive: the source
    std::vector<size_t> send_peers, receive_peers;  // kBatch, in order
  };
  // Returns `refusal`, after telling the peers that wait for this member's
  // agreement record (they check agreement first: verify_agreement, or
  // all_to_all_v), as the session's own refusals do
  // (SessionImpl::RefuseWithPeers): they refuse the operation too instead
  // of waiting for op_timeout. A scope this member is not in, or peers
  // outside it, leave nobody to tell.
  absl::Status Refuse(const CollectiveScope& scope,
                      const RefusedOperation& what,
                      const absl::Status& refusal);

 private:
  // Open() in two steps: Create() does no native work and advertises
  // nothing; Initialize() (once only) probes, brokers and connects. Private
  // so that users have one way to get a session, which holds a capability
  // only when it works; tests that inspect a session whose initialization
  // failed (capabilities stay empty, Unavailable is not poisoning, a second
  // Initialize is refused) reach them through testing::NcclSessionPeer.
  static absl::StatusOr<std::unique_ptr<NcclSession>> Create(
      DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
      NcclSessionOptions options);
  absl::Status Initialize();
  friend class testing::NcclSessionPeer;

  explicit NcclSession(std::shared_ptr<internal::NativeLayer> layer);

  // The options Open was given (tag unset when Open chose it).
  NcclSessionOptions opened_with_;
};

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_SESSION_H_
