// SessionImpl: everything a Gloo session shares. It owns the TCP
// transport device, one connected ::gloo::Context (a MeshContext) per group
// this rank belongs to and executor lane (the groups connected at once, lane
// by lane, every rendezvous going through RankdStore with the connect
// timeout), the in-order executors, the poison latch and the quarantine. It is
// the ExecutionHost of its executor and completions:
//
//   - Admission refuses new work once the session is poisoned or while work
//     is quarantined.
//   - A native failure poisons the session. When the control plane reports
//     the job failed (now, or within failure_attribution_grace), the cause
//     is that failure, which names the lost rank or node; otherwise the
//     error as the operation reported it (an explained failure, e.g. a
//     disagreement MismatchDiagnosis proved, at once). Every context is
//     then aborted so peers fail fast too.
//   - OnJobFailure from the control plane poisons the session with the
//     job's failure and aborts every context, so pending operations fail at
//     once (Gloo has no public abort; see gloo_abort.h) and later ones are
//     refused.
//   - The session's watchdog (dataplane/watchdog.h, the same as NCCL's)
//     does the same every watchdog_interval when JobHealth() reports a
//     failure no notice announced, and when an operation is
//     op_timeout + 2 x failure_attribution_grace + 1 s past its submission
//     and Gloo's own timeout (with its diagnosis) did not end it.
//   - WaitBounded deadlines: the engine's policy (dataplane/cancellation.h);
//     its native cancel aborts every context (every lane: work on the other
//     executors fails too) and returns once every executor has unwound.
//
// Create blocks until every group is connected. Shutdown() must be called
// before the last owner lets go (GlooBackend's destructor does). Thread-safe.
// Depends on Gloo, dataplane/control_plane.h, poison.h, quarantine.h and the
// gloo/ executor, completion, group, store and options headers.
#ifndef RANKD_DATAPLANE_GLOO_INTERNAL_SESSION_IMPL_H_
#define RANKD_DATAPLANE_GLOO_INTERNAL_SESSION_IMPL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/collective_group.h"
#include "dataplane/control_plane.h"
#include "dataplane/execution_host.h"
#include "dataplane/gloo/gloo_executor.h"
#include "dataplane/gloo/gloo_group.h"
#include "dataplane/gloo/gloo_options.h"
#include "dataplane/mismatch_diagnosis.h"
#include "dataplane/operation_ledger.h"
#include "dataplane/poison.h"
#include "dataplane/quarantine.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/watchdog.h"

namespace gloo::transport {
class Device;
}

namespace rankd::dataplane::gloo::internal {

class SessionImpl final : public ExecutionHost,
                          public std::enable_shared_from_this<SessionImpl> {
 public:
  // Connects every group of `descriptor` (and the world) through
  // `control_plane`, which must outlive the communicator. Errors name the
  // group that failed to connect.
  static absl::StatusOr<std::shared_ptr<SessionImpl>> Create(
      ControlPlane* control_plane, DistributedSessionDescriptor descriptor,
      GlooSessionOptions options);

  ~SessionImpl() override;

  // Aborts in-flight work (if any), finishes queued work with Cancelled and
  // stops the executors. Idempotent.
  void Shutdown();

  const DistributedSessionDescriptor& descriptor() const { return descriptor_; }
  const GlooSessionOptions& options() const { return options_; }
  ControlPlane* control_plane() const { return control_plane_; }
  // Executor `lane` (below executor_count(), GlooSessionOptions::executors).
  GlooExecutor& executor(uint32_t lane) { return *executors_[lane]; }
  uint32_t executor_count() const {
    return static_cast<uint32_t>(executors_.size());
  }
  // Whether `executor` is one of this communicator's.
  bool Owns(const GlooExecutor& executor) const {
    return executor.lane() < executors_.size() &&
           executors_[executor.lane()].get() == &executor;
  }
  // Explains native failures of operations the members disagreed on.
  const std::shared_ptr<const MismatchDiagnosis>& diagnosis() const {
    return diagnosis_;
  }

  // The world group; null when the session does not hold the world
  // (domain_groups.h's HoldsWorld).
  const std::shared_ptr<GlooGroup>& world() const { return world_; }
  // The group with `id` this rank belongs to, or null.
  std::shared_ptr<GlooGroup> group(CollectiveGroupId id) const;

  // Poisons the session with `cause` (first cause wins; an OK cause does
  // nothing) and aborts every Gloo context so pending operations fail now.
  void Abort(const absl::Status& cause);
  // The hot paths' check (an atomic load, no lock).
  bool poisoned() const { return poison_.poisoned(); }
  // OK while healthy; the first cause once poisoned.
  absl::Status poison() const { return poison_.cause(); }
  // True when no executor has work queued or running.
  bool idle() const;
  // Operations quarantined now.
  size_t quarantined() const { return quarantine_.size(); }

  // ExecutionHost.
  absl::Status Admission(const char* operation) const override;
  absl::Status BeforeRun(const std::string& operation) const override;
  absl::Status OnNativeFailure(const std::string& operation,
                               const absl::Status& error,
                               bool explained) override;
  void Track(const std::shared_ptr<Operation>& op) override;
  void WorkFinished() override;
  // OperationOwner. Poison only latches: a native failure has already
  // aborted every context (OnNativeFailure).
  void Poison(const absl::Status& cause) override { poison_.Poison(cause); }
  // CancellingOwner's hooks. CancelNative poisons, aborts every context and
  // waits (bounded by op_timeout + 5 s, Gloo's own timeout and then some)
  // for every executor to unwind.
  const char* backend_name() const override { return "gloo"; }
  bool SupportsNativeCancel() const override { return true; }
  bool SupportsQuarantine() const override;
  bool CancelNative(const absl::Status& cause) override;
  std::string abort_effect() const override { return kAbortEffect; }
  absl::Duration AbortGrace() const override { return absl::Seconds(1); }
  void Quarantine(std::shared_ptr<Operation> op) override {
    op->QuarantineIn(quarantine_);
  }
  // Unattended work needs nothing but a start: its executor holds it until
  // it finished.
  void Unattended(const std::shared_ptr<Operation>& op) override {
    StartHeld(op);
  }
  // Asks each executor (GlooExecutor::RunIfNext).
  void RunIfNext(const std::shared_ptr<Operation>& op) override;
  // Starts held work on every executor (GlooExecutor::StartHeld).
  void StartHeld(const std::shared_ptr<Operation>& op) override;

 private:
  static constexpr char kAbortEffect[] =
      "every Gloo context of the session was aborted";

  SessionImpl(ControlPlane* control_plane,
              DistributedSessionDescriptor descriptor,
              GlooSessionOptions options);
  // Connects one group on executor `lane`: a Gloo context of `members`
  // (world ranks) in which this rank is `rank`, rendezvousing under `name`
  // ("world" or the group id; lanes after 0 append ".e<lane>"); each
  // member's address keys are its own (RankdStore).
  absl::StatusOr<std::shared_ptr<::gloo::Context>> Connect(
      const std::string& name, uint32_t lane, uint32_t rank,
      const std::vector<uint32_t>& members);
  void AbortAll(const std::string& reason);

  // What the watchdog guards: the job's health and Abort.
  class WatchdogSession final : public NativeSession {
   public:
    explicit WatchdogSession(SessionImpl* impl) : impl_(impl) {}
    absl::Status JobHealth() override {
      return impl_->control_plane_->JobHealth();
    }
    void Abort(const absl::Status& cause) override { impl_->Abort(cause); }
    bool aborted() const override { return impl_->aborted_.load(); }

   private:
    SessionImpl* const impl_;
  };

  ControlPlane* const control_plane_;
  const DistributedSessionDescriptor descriptor_;
  const GlooSessionOptions options_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<GlooGroup> world_;
  std::vector<std::shared_ptr<GlooGroup>> groups_;  // ascending id
  PoisonLatch poison_;
  dataplane::Quarantine quarantine_;
  const std::shared_ptr<const MismatchDiagnosis> diagnosis_;
  std::vector<std::unique_ptr<GlooExecutor>> executors_;  // by lane
  // Every submitted operation until it finished, with its deadline.
  OperationLedger ledger_;
  std::atomic<bool> aborted_{false};  // AbortAll ran
  WatchdogSession watchdog_session_{this};
  Watchdog watchdog_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_INTERNAL_SESSION_IMPL_H_
