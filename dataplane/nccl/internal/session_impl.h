// internal::SessionImpl: private to dataplane/nccl (as Gloo's
// internal/session_impl.h is to dataplane/gloo), the state shared by
// NcclSession (the DistributedSession) and NcclBackend (the
// CommunicationBackend) of one rank: device, stream,
// communicators, poison, outstanding operations, quarantine and the
// watchdog. Also the operations themselves (Submit*), which both front ends
// call after their own scope/group resolution (defined in nccl_ops.cc).
//
// Lifecycle:
//   Create (no native work; capabilities empty)
//   -> Initialize: probe devices (none => Unavailable, capabilities stay
//      empty, nothing is poisoned); broker unique ids through the control
//      plane; where NCCL splits, init one root non-blocking and split every
//      scope from it (shared resources, one order: executor lane 0),
//      otherwise init one communicator per distinct member list; all
//      within one deadline, aborting all on deadline, error or job failure
//      (=> poison); start the watchdog.
//   -> LaneComm: a scope's communicators of executor lanes above 0, split
//      from its lane-0 one on the first use of any of them.
//   -> operations: poison check, fail-closed capability check and
//      validation before any native call; any native failure or missed
//      deadline poisons the core and aborts every communicator.
//   -> destruction (when the NcclSession and every completion and group are
//      gone): watchdog stopped; communicators finalized (healthy) or
//      aborted (poisoned); quarantined work drained, then leaked on purpose
//      if it still runs.
// The watchdog is the engine's (dataplane/watchdog.h), as on Gloo: it wakes
// on a job-failure notification from the control plane or every
// `watchdog_interval`, checks JobHealth() and ncclCommGetAsyncError of every
// communicator (this core's NativeHealth), aborts all communicators on a
// failure (so no rank stays in a collective with a dead peer) and holds
// every operation to op_timeout (naming who did not finish). Quarantined
// work is freed by the quarantine's own reaper (dataplane/quarantine.h) once
// its event says done.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_SESSION_IMPL_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_SESSION_IMPL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_group.h"
#include "dataplane/collective_scope.h"
#include "dataplane/communication_backend.h"
#include "dataplane/completion.h"
#include "dataplane/control_plane.h"
#include "dataplane/mismatch_diagnosis.h"
#include "dataplane/nccl/cuda_device.h"
#include "dataplane/nccl/cuda_event.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_buffer.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/internal/batch_transfer.h"
#include "dataplane/nccl/internal/event_operation.h"
#include "dataplane/nccl/internal/op_owner.h"
#include "dataplane/nccl/internal/sum_type.h"
#include "dataplane/nccl/internal/unique_id_broker.h"
#include "dataplane/nccl/nccl_comm.h"
#include "dataplane/nccl/nccl_completion.h"
#include "dataplane/nccl/nccl_options.h"
#include "dataplane/operation_ledger.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/poison.h"
#include "dataplane/sequence_numbers.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/shape.h"
#include "dataplane/value_descriptor.h"
#include "dataplane/watchdog.h"

namespace rankd::dataplane::nccl::internal {

// The agreement machinery (operation_agreement.h).
class OperationAgreement;
class RecordBuffers;

// One NCCL communicator and the world ranks it spans: a scope (the world
// or a group) on executor lane 0, or on a later lane (`lanes`). Where
// ncclCommSplit exists every scope has its own; otherwise groups with the
// same member list share one (docs/nccl.md, "Communicators and order").
struct CommEntry {
  // The communicator's own name, for NCCL's init, split and abort messages
  // only: "world", "g3-m2-<hash>", "m2-<hash>", "<name>-e1". Messages about
  // an operation name its scope instead (ScopedComm).
  std::string name;
  std::vector<uint32_t> members;
  uint32_t local_rank = 0;
  // The executor lane this communicator serves (0: the scope's own).
  uint32_t lane = 0;
  std::unique_ptr<NcclCommunicator> comm;

  // This scope's communicators of executor lanes 1, 2, ... (index lane -
  // 1): made together, in lane order, on the scope's first use on a lane
  // above 0 (SessionImpl::LaneComm).
  absl::Mutex lanes_mu;
  std::vector<std::shared_ptr<CommEntry>> lanes ABSL_GUARDED_BY(lanes_mu);

  // The next sequence number of a collective on this communicator, or of a
  // transfer on route (source, destination) (member indices), in the order
  // NCCL accepted them: the same on every member that submitted the same
  // work, so diagnosis reports of one operation meet under one key.
  uint32_t NextSequence(
      const std::optional<std::pair<uint32_t, uint32_t>>& route);

 private:
  absl::Mutex sequence_mu_;
  SequenceNumbers sequence_ ABSL_GUARDED_BY(sequence_mu_);
};

// A communicator as one operation uses it: the entry, and the scope the
// caller named, in the words every message uses ("world", "group 3":
// CollectiveScope::ToString, as Gloo's GlooGroup::ToString). Messages
// never name the entry itself: one entry can serve two scopes (where NCCL
// cannot split, groups with the same members share one, and a group with
// the world's members shares "world"), and a group's own is a hash.
struct ScopedComm {
  std::shared_ptr<CommEntry> comm;
  std::string scope;
};

// What one submission does, in order, on `stream`: wait for every input's
// ready event, run `before` (CUDA work), run `nccl` through the
// communicator (if set), run `after`, record the completion event.
struct OpPlan {
  std::string name;
  // What it is, for the mismatch diagnosis: members that submit the same
  // work give the same text (operation, dtype, shape, axis, root, counts).
  // Empty: `name` and the inputs' descriptors.
  std::string canonical;
  // Point-to-point: (source, destination) member indices.
  std::optional<std::pair<uint32_t, uint32_t>> route;
  // A batched send/receive: its transfers (route numbers and agreement
  // records are per transfer; `route` is the first one's, for the
  // diagnosis).
  std::vector<BatchTransfer> batch;
  // all_to_all_v: this member's send counts then receive counts (one per
  // member), checked pairwise against the others'.
  std::vector<uint64_t> agreement_counts;
  // Operations whose members must agree on counts (all_to_all_v, uneven
  // all_gather), which NCCL would otherwise truncate or hang on: the
  // records travel alone, before the payload. They are checked first (the
  // host waits for them) whenever verify_agreement is set, and otherwise
  // until this member saw its record (fingerprint and counts) agreed once
  // on the communicator; from then on the same record goes ahead, the
  // payload right behind it, and is checked as it arrives (SessionImpl,
  // "ahead").
  bool agree_first = false;
  // A batch checked first: when its ends disagree, Submit sets one flag per
  // entry of `batch` before `nccl` runs, true for a transfer whose ends
  // disagree, which `nccl` must then leave out (its peer leaves it out
  // too); otherwise it stays empty.
  std::shared_ptr<std::vector<bool>> refused_transfers;
  std::shared_ptr<CommEntry> comm;
  // The scope as messages name it (ScopedComm::scope): the refusal told to
  // the peers, the diagnosis and the missed deadline say it, or for a
  // transfer "route <source>-><destination> in <scope>" (world ranks), as
  // Gloo's GlooRoute::ToString.
  std::string scope;
  std::shared_ptr<CudaStream> stream;
  std::vector<DeviceTensor> inputs;
  // What the work writes (allocated or the caller's): retained, and the
  // stream waits for their ready events first (the work that last wrote
  // them). Not part of the description.
  std::vector<DeviceTensor> outputs;
  std::vector<std::shared_ptr<const void>> retained;
  std::function<absl::Status(const CudaStream&)> before;
  std::function<int(NcclCommHandle)> nccl;
  std::function<absl::Status(const CudaStream&)> after;
};

struct Submitted {
  std::shared_ptr<NcclCompletion> completion;
  std::shared_ptr<CudaEvent> event;
};

using TensorResult =
    absl::StatusOr<Submission<DeviceTensor, std::shared_ptr<NcclCompletion>>>;
using UnitResult =
    absl::StatusOr<Submission<Unit, std::shared_ptr<NcclCompletion>>>;

class SessionImpl final : public NcclOpOwner,
                          public std::enable_shared_from_this<SessionImpl> {
 public:
  // `control_plane` must outlive the NcclSession.
  static absl::StatusOr<std::shared_ptr<SessionImpl>> Create(
      DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
      NcclSessionOptions options);
  ~SessionImpl() override;

  absl::Status Initialize();
  // Called when the NcclSession is destroyed: the control plane may go
  // away, so the core never touches it again; later submissions (through a
  // backend or group that outlived the session) fail.
  void Detach();
  // The control plane's JobHealth(), or FailedPrecondition once detached.
  absl::Status JobHealth() const;

  const DistributedSessionDescriptor& descriptor() const { return descriptor_; }
  ControlPlane* control_plane() const { return control_plane_; }
  const NcclSessionOptions& options() const { return options_; }
  bool ready() const;
  // Empty when the session could initialize; otherwise why not.
  std::string unavailable_reason() const;
  DistributedCapabilities capabilities() const;
  int device() const;
  std::shared_ptr<CudaStream> stream() const;
  size_t quarantined() const { return quarantine_.size(); }
  size_t communicator_count() const;

  // Fail-closed resolution of a scope for `operation`: the poison cause;
  // NotFound when this rank is not in the group; Unimplemented naming
  // "nccl" and the missing capability (with the reason) otherwise; then the
  // communicator that serves it.
  // With `flag`, that capability (named `capability`) is checked right
  // after membership, before the scope's.
  absl::StatusOr<std::shared_ptr<CommEntry>> CommFor(
      const CollectiveScope& scope, const char* operation,
      bool DistributedCapabilities::*flag = nullptr,
      const char* capability = nullptr) const;
  // The communicator of `scope_comm` (a lane-0 entry CommFor gave) on
  // executor `lane`: itself for lane 0; for a later lane, created with the
  // scope's other lanes on the first call (ncclCommSplit of the scope's
  // communicator, collective over its members, bounded by init_timeout; a
  // failure poisons). InvalidArgument (nothing poisoned) for a lane the
  // session does not have (NcclSessionOptions::executors).
  absl::StatusOr<std::shared_ptr<CommEntry>> LaneComm(
      const std::shared_ptr<CommEntry>& scope_comm, uint32_t lane,
      absl::string_view operation);
  // Adds why the capabilities are empty to a fail-closed error.
  absl::Status FailClosed(const absl::Status& status) const;

  // A tensor on this session's device whose buffer covers its descriptor.
  absl::Status CheckTensor(const DeviceTensor& tensor,
                           absl::string_view operation) const;
  // Poison cause, or the job failure (which poisons and aborts).
  absl::Status CheckUsable();
  // FailedPrecondition ("nccl backend: <operation>: <whose> is capturing a
  // CUDA graph ...", CheckNotCapturing in cuda_stream.h) when `stream`
  // takes part in a CUDA graph capture; OK otherwise (also for a null
  // stream, which the callers refuse themselves). A refusal, not a
  // failure: called before any native work, nothing is poisoned.
  absl::Status RefuseIfCapturing(const std::shared_ptr<CudaStream>& stream,
                                 absl::string_view operation,
                                 absl::string_view whose) const;
  // Output memory; a failure poisons.
  absl::StatusOr<DeviceTensor> AllocateOutput(
      const ValueDescriptor& descriptor,
      const std::shared_ptr<CudaStream>& stream, absl::string_view operation);
  // The output of `operation`: `into` when the caller gave one, after
  // checking it (exactly `descriptor`, on this device, and not overlapping
  // `input`, except that an `in_place` operation accepts exactly the
  // input's bytes; InvalidArgument without poisoning otherwise); else
  // AllocateOutput.
  absl::StatusOr<DeviceTensor> OutputFor(
      const ValueDescriptor& descriptor, const DeviceTensor* into,
      const DeviceTensor* input, bool in_place,
      const std::shared_ptr<CudaStream>& stream, absl::string_view operation);
  absl::StatusOr<Submitted> Submit(OpPlan plan);
  // Refuses an operation on this member's own arguments (validation can
  // differ between members: another shape, an output of the wrong size, a
  // tensor on another device). `plan` says what was refused: its name,
  // communicator, scope, stream, route or batch (peers and directions; its
  // route is derived) and agree_first; its payload is ignored.
  //
  // Members that check agreement first (verify_agreement, or agree_first:
  // all_to_all_v and uneven all_gather) wait in Submit for every member's
  // record. So while the session is usable, this member still takes the
  // operation's sequence number and sends a record saying that it refused
  // (kRefusedCanonical, dataplane/agreement.h): its peers refuse the
  // operation too, with an InvalidArgument naming this member, and nobody waits
  // for op_timeout. Otherwise nothing is sent and no sequence number is taken,
  // as on Gloo: the peers' operation waits for this member's next
  // submission on the communicator (a corrected retry pairs with it) or
  // for op_timeout. A refusal that names no peer (a route or batch that is
  // itself invalid) cannot be told.
  //
  // Returns `refusal` (saying when the peers were told), or, when telling
  // them failed natively, that failure (the session is then poisoned).
  absl::Status RefuseWithPeers(OpPlan plan, const absl::Status& refusal);
  // Poison + abort (any failure after validation).
  absl::Status Fail(const absl::Status& cause);

  // NcclOpOwner.
  absl::Status poison() const override;
  void Poison(const absl::Status& cause) override;
  bool SupportsNativeCancel() const override { return true; }
  bool CancelNative(const absl::Status& cause) override;
  std::string abort_effect() const override { return kNcclAbortEffect; }
  void Quarantine(std::shared_ptr<Operation> op) override;
  absl::Duration AbortGrace() const override { return options_.abort_grace; }
  bool SupportsQuarantine() const override;

 private:
  // What the watchdog guards: this core's job health, asynchronous
  // communicator errors and CancelNative.
  class WatchdogSession final : public NativeSession {
   public:
    explicit WatchdogSession(SessionImpl* core) : core_(core) {}
    // The control plane's own answer: the core's JobHealth() fails once
    // Detach() began, which is not a job failure (the watchdog stops
    // asking once Detach() returns).
    absl::Status JobHealth() override {
      return core_->control_plane_->JobHealth();
    }
    absl::Status NativeHealth() override;
    void Abort(const absl::Status& cause) override {
      DeviceGuard guard(core_->device());
      core_->CancelNative(cause);
    }
    bool aborted() const override;

   private:
    SessionImpl* const core_;
  };

  SessionImpl(DistributedSessionDescriptor descriptor,
              ControlPlane* control_plane, NcclSessionOptions options);
  absl::Status InitializeLocked();
  // What ends a wait for NCCL to accept work: the poison cause, or the job
  // failure.
  std::function<absl::Status()> EnqueueInterrupt() const;
  // verify_agreement (or plan.agree_first): moves the agreement records
  // alone on the plan's stream (taking the sequence number), waits until
  // they arrived, and compares. OK with `*refusal` set to the
  // InvalidArgument naming who submitted what when members disagree (then
  // the batch's refused_transfers are set); an error when the records could
  // not move (the caller poisons). When members disagree and another member
  // submitted ahead (its payload is already queued and may never pair),
  // `*ahead_peers` is set: the disagreement then poisons every member.
  absl::Status AgreeFirst(const OpPlan& plan,
                          const internal::OperationAgreement& agreement,
                          const std::string& canonical,
                          const std::function<void()>& take_sequence,
                          const std::function<std::string()>& where,
                          absl::Status* refusal, bool* ahead_peers);
  // A count-carrying operation whose record this member saw agreed before
  // goes ahead: its records move alone, as when checked first (so a member
  // that checks first pairs with it launch for launch), each part followed
  // by its copy back and an event of `ahead_events`, and nothing waits.
  // The watchdog checks them as they arrive (NativeHealth): a disagreement
  // aborts at once, naming who submitted what, instead of leaving a
  // payload that does not pair to hang; the completion checks them again.
  absl::Status SubmitRecordsAhead(
      const OpPlan& plan,
      const std::shared_ptr<const internal::OperationAgreement>& agreement,
      const std::vector<std::shared_ptr<CudaEvent>>& ahead_events,
      const std::function<void()>& take_sequence, const std::string& where,
      const std::string& canonical);
  // Whether this member's record `signature` was agreed by every member of
  // `comm` before; NoteAgreed remembers one (at most kAgreedSignatures per
  // communicator, then it starts over).
  bool AgreedBefore(const std::string& comm, uint64_t signature) const;
  void NoteAgreed(const std::string& comm, uint64_t signature);
  static constexpr size_t kAgreedSignatures = 4096;
  // The watchdog's check of records that went ahead: OK, or the poisoning
  // disagreement of the first one that arrived disagreeing.
  absl::Status CheckRecordsAhead();
  absl::Status InitInterrupt() const;
  // Initialization's communicators where ncclCommSplit exists: a root
  // (ncclCommInitRank, shared resources) and every scope split from it;
  // otherwise one ncclCommInitRank per distinct member list. Fills
  // `world`, `groups` and `comms` (every communicator, for aborts).
  absl::Status InitSplitCommunicators(
      int device, absl::Time deadline, std::shared_ptr<CommEntry>* world,
      std::map<CollectiveGroupId, std::shared_ptr<CommEntry>>* groups,
      std::vector<std::shared_ptr<CommEntry>>* comms);
  absl::Status InitBrokeredCommunicators(
      int device, absl::Time deadline, std::shared_ptr<CommEntry>* world,
      std::map<CollectiveGroupId, std::shared_ptr<CommEntry>>* groups,
      std::vector<std::shared_ptr<CommEntry>>* comms);
  // Every communicator, lanes included (they are added as they are made).
  std::vector<std::shared_ptr<CommEntry>> AllComms() const;
  // The job failure the control plane notified, or OK.
  absl::Status SignalCause() const { return watchdog_.notified_failure(); }

  const DistributedSessionDescriptor descriptor_;
  ControlPlane* const control_plane_;
  const NcclSessionOptions options_;

  mutable absl::Mutex mu_;
  bool initialize_called_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  PoisonLatch poison_;
  std::string unavailable_reason_ ABSL_GUARDED_BY(mu_);
  // Set by Initialize, constant once ready_.
  int device_ = -1;
  std::shared_ptr<CudaStream> stream_;
  std::shared_ptr<CommEntry> world_;
  std::map<CollectiveGroupId, std::shared_ptr<CommEntry>> groups_;
  std::vector<std::shared_ptr<CommEntry>> comms_;

  // What `plan` is, for the diagnosis and the agreement record.
  SubmittedOperation Describe(const OpPlan& plan) const;

  // Every submitted operation until it finished, held to op_timeout by the
  // watchdog; CancelNative fails them all (and later ones) before the
  // communicators are aborted.
  OperationLedger ledger_;
  const MismatchDiagnosis diagnosis_;
  // Agreement records' device memory, reused across operations.
  const std::unique_ptr<internal::RecordBuffers> record_buffers_;
  // Count records agreed before, per communicator name (AgreedBefore).
  mutable absl::Mutex agreed_mu_;
  std::map<std::string, std::unordered_set<uint64_t>> agreed_
      ABSL_GUARDED_BY(agreed_mu_);
  // Records that went ahead and have not been seen agreeing yet.
  struct AheadCheck;
  absl::Mutex ahead_mu_;
  std::vector<std::shared_ptr<AheadCheck>> ahead_ ABSL_GUARDED_BY(ahead_mu_);

  absl::Mutex abort_mu_;
  bool aborted_ ABSL_GUARDED_BY(abort_mu_) = false;

  std::atomic<bool> detached_{false};
  WatchdogSession watchdog_session_{this};
  Watchdog watchdog_;
  // Last, so that it is destroyed first: its reaper thread is joined while
  // everything its items might reach still exists.
  dataplane::Quarantine quarantine_;
};

// Aborts every communicator of `comms` concurrently and returns after all
// of them were torn down. When that takes longer than `timeout`, the
// process ends (AbortDeadline, dataplane/abort_deadline.h), naming the
// communicators still aborting, `unfinished` (what was running) and
// `cause`.
void AbortAll(const std::vector<std::shared_ptr<CommEntry>>& comms,
              const absl::Status& cause, absl::Duration timeout,
              const std::string& unfinished);

// The operations, shared by NcclSession and NcclBackend. Each validates
// before any native call and returns the output with its completion; a
// refusal on this member's own arguments goes through
// SessionImpl::RefuseWithPeers. The scope/group/capability resolution is
// the caller's; `on` is its result: the communicator, and the scope the
// operation's messages name.
//
// Element-wise sum (dtype mapping: SumTypeFor).
TensorResult SubmitAllReduceSum(SessionImpl& core, const ScopedComm& on,
                                const DeviceTensor& input,
                                const std::shared_ptr<CudaStream>& stream,
                                std::string name,
                                const DeviceTensor* into = nullptr);
// Equal parts concatenated along `axis` in member order (axis 0 of a
// scalar gives [members]).
TensorResult SubmitAllGatherEven(SessionImpl& core, const ScopedComm& on,
                                 const DeviceTensor& input, size_t axis,
                                 const std::shared_ptr<CudaStream>& stream,
                                 std::string name,
                                 const DeviceTensor* into = nullptr);
// counts[m] = member m's extent along `axis` (this rank's must match its
// input).
TensorResult SubmitAllGatherUneven(SessionImpl& core, const ScopedComm& on,
                                   const DeviceTensor& input,
                                   absl::Span<const size_t> counts, size_t axis,
                                   const std::shared_ptr<CudaStream>& stream,
                                   std::string name,
                                   const DeviceTensor* into = nullptr);
// Exact per-peer partitions along `axis`, grouped ncclSend/ncclRecv plus a
// self copy.
TensorResult SubmitAllToAll(SessionImpl& core, const ScopedComm& on,
                            const DeviceTensor& input,
                            absl::Span<const size_t> send_counts,
                            absl::Span<const size_t> receive_counts,
                            size_t axis,
                            const std::shared_ptr<CudaStream>& stream,
                            std::string name,
                            const DeviceTensor* into = nullptr);
// Point-to-point; `peer` is a communicator rank (validated by the caller).
TensorResult SubmitSend(SessionImpl& core, const ScopedComm& on, uint32_t peer,
                        const DeviceTensor& input,
                        const std::shared_ptr<CudaStream>& stream,
                        std::string name);
TensorResult SubmitReceive(SessionImpl& core, const ScopedComm& on,
                           uint32_t peer, const ValueDescriptor& descriptor,
                           const std::shared_ptr<CudaStream>& stream,
                           std::string name,
                           const DeviceTensor* into = nullptr);
TensorResult SubmitBroadcast(SessionImpl& core, const ScopedComm& on,
                             const DeviceTensor& input, size_t root,
                             const std::shared_ptr<CudaStream>& stream,
                             std::string name,
                             const DeviceTensor* into = nullptr);
UnitResult SubmitBarrier(SessionImpl& core, const ScopedComm& on,
                         const std::shared_ptr<CudaStream>& stream,
                         std::string name);

// agree_success's result: a one-byte device flag, read back once.
class NcclAgreement final : public Agreement {
 public:
  NcclAgreement(std::shared_ptr<DeviceBuffer> flag,
                std::shared_ptr<NcclCompletion> completion)
      : flag_(std::move(flag)), completion_(std::move(completion)) {}
  absl::StatusOr<bool> Resolve() const override;

 private:
  const std::shared_ptr<DeviceBuffer> flag_;
  const std::shared_ptr<NcclCompletion> completion_;
  mutable absl::Mutex mu_;
  mutable bool resolved_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::StatusOr<bool> value_ ABSL_GUARDED_BY(mu_) = false;
};
absl::StatusOr<Submission<std::shared_ptr<const Agreement>,
                          std::shared_ptr<NcclCompletion>>>
SubmitAgreeSuccess(SessionImpl& core, const ScopedComm& on, bool success,
                   const std::shared_ptr<CudaStream>& stream, std::string name);
// This member's end of an ordered bundle on a route (spans the caller
// keeps alive for the call): the source's tensors to `send`; the
// destination's descriptors to `receive`, into fresh tensors or, when
// `receive_into` is not empty (one tensor per descriptor, none
// overlapping), into the caller's. The destination needs descriptors only,
// so SendReceive and ReceiveBundle share one path.
struct BundleEnd {
  absl::Span<const DeviceTensor> send;
  absl::Span<const ValueDescriptor> receive;
  absl::Span<const DeviceTensor> receive_into;
};
// An ordered bundle from communicator rank `source` to `destination`. The
// source sends `end.send` (output: the same tensors); the destination
// receives `end.receive` (output: new tensors, or `end.receive_into`
// themselves).
absl::StatusOr<
    Submission<std::vector<DeviceTensor>, std::shared_ptr<NcclCompletion>>>
SubmitBundle(SessionImpl& core, const ScopedComm& on, const BundleEnd& end,
             uint32_t source, uint32_t destination,
             const std::shared_ptr<CudaStream>& stream, std::string name);
// Every transfer at once in one NCCL group: `sends` go to member `peer`,
// `receives` land in the caller's tensors from member `peer` (see
// DistributedSession::BatchSendReceive; validated here). The output: the
// receive tensors, in order.
absl::StatusOr<
    Submission<std::vector<DeviceTensor>, std::shared_ptr<NcclCompletion>>>
SubmitBatch(SessionImpl& core, const ScopedComm& on,
            absl::Span<const PeerValue<DeviceTensor>> sends,
            absl::Span<const PeerValue<DeviceTensor>> receives,
            const std::shared_ptr<CudaStream>& stream, std::string name);
// Evaluation of local tensors on `stream` (no communicator): waits for
// their ready events and retains them.
UnitResult SubmitLocal(absl::Span<const DeviceTensor* const> values,
                       const std::shared_ptr<CudaStream>& stream);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_SESSION_IMPL_H_
