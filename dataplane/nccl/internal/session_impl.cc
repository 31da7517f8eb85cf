#include "dataplane/nccl/internal/session_impl.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "common/rank_list.h"
#include "dataplane/abort_deadline.h"
#include "dataplane/admission.h"
#include "dataplane/agreement.h"
#include "dataplane/caller_output.h"
#include "dataplane/domain_groups.h"
#include "dataplane/nccl/default_device.h"
#include "dataplane/nccl/internal/comm_name.h"
#include "dataplane/nccl/internal/operation_agreement.h"
#include "dataplane/nccl/internal/session_tag.h"
#include "dataplane/nccl/internal/unique_id_plan.h"
#include "dataplane/poison.h"

namespace rankd::dataplane::nccl::internal {

absl::StatusOr<std::shared_ptr<SessionImpl>> SessionImpl::Create(
    DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
    NcclSessionOptions options) {
  if (control_plane == nullptr) {
    return absl::InvalidArgumentError(
        "nccl backend: a session needs a control plane (unique ids, job "
        "health, all_gather_words)");
  }
  if (options.tag.has_value()) {
    absl::Status tag = ValidateSessionTag(*options.tag);
    if (!tag.ok()) return tag;
  }
  if (options.init_timeout <= absl::ZeroDuration() ||
      options.enqueue_timeout <= absl::ZeroDuration() ||
      options.words_timeout <= absl::ZeroDuration() ||
      options.op_timeout <= absl::ZeroDuration() ||
      options.failure_attribution_grace < absl::ZeroDuration() ||
      options.watchdog_interval <= absl::ZeroDuration() ||
      options.destroy_timeout < absl::ZeroDuration() ||
      options.abort_grace < absl::ZeroDuration() ||
      options.abort_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "nccl backend: session timeouts and intervals must be positive");
  }
  if (options.device < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: device ", options.device,
        " is not valid (-1 lets the visible device count decide)"));
  }
  if (!options.tag.has_value()) {
    auto number = NextSessionNumber(
        *control_plane,
        OwnedKey(descriptor.rank(),
                 absl::StrCat(control_plane->Namespace(), "/nccl/sessions/",
                              descriptor.rank()),
                 descriptor.epoch()),
        "nccl");
    if (!number.ok()) return number.status();
    options.tag = absl::StrCat("s", *number);
  }
  return std::shared_ptr<SessionImpl>(new SessionImpl(
      std::move(descriptor), control_plane, std::move(options)));
}

namespace {

// "route <source>-><destination> in <scope>", the route of `plan` in world
// ranks, as Gloo's GlooRoute::ToString. Callers validated the route's
// member indices; one that is not a member stays an index.
std::string RouteWords(const OpPlan& plan, absl::string_view scope) {
  const std::vector<uint32_t>& members = plan.comm->members;
  auto rank = [&](uint32_t index) {
    return index < members.size() ? members[index] : index;
  };
  return absl::StrCat("route ", rank(plan.route->first), "->",
                      rank(plan.route->second), " in ", scope);
}

}  // namespace

SubmittedOperation SessionImpl::Describe(const OpPlan& plan) const {
  SubmittedOperation what;
  if (plan.comm == nullptr) return what;
  what.self = descriptor_.rank();
  what.canonical = plan.canonical;
  if (what.canonical.empty()) {
    what.canonical = plan.name;
    for (const DeviceTensor& input : plan.inputs) {
      absl::StrAppend(&what.canonical, " ", input.descriptor().ToString());
    }
  }
  // Keyed by communicator, whose sequence numbers these are; named by
  // scope, on its executor lane, as Gloo names them.
  std::string scope = plan.scope;
  if (plan.comm->lane > 0) {
    absl::StrAppend(&scope, " on executor ", plan.comm->lane);
  }
  if (plan.route.has_value()) {
    const auto [source, destination] = *plan.route;
    what.scope_key =
        absl::StrCat(plan.comm->name, "-r", source, "-", destination);
    what.scope_name = RouteWords(plan, scope);
    what.members = {plan.comm->members[source],
                    plan.comm->members[destination]};
  } else {
    what.scope_key = plan.comm->name;
    what.scope_name = std::move(scope);
    what.members = plan.comm->members;
  }
  return what;
}

uint32_t CommEntry::NextSequence(
    const std::optional<std::pair<uint32_t, uint32_t>>& route) {
  absl::MutexLock lock(&sequence_mu_);
  return route.has_value() ? sequence_.NextTransfer(route->first, route->second)
                           : sequence_.NextCollective();
}

SessionImpl::SessionImpl(DistributedSessionDescriptor descriptor,
                         ControlPlane* control_plane,
                         NcclSessionOptions options)
    : descriptor_(std::move(descriptor)),
      control_plane_(control_plane),
      options_(std::move(options)),
      diagnosis_(control_plane,
                 absl::StrCat(control_plane->Namespace(), "/nccl/",
                              *options_.tag, "/"),
                 options_.failure_attribution_grace, descriptor_.epoch()),
      record_buffers_(std::make_unique<internal::RecordBuffers>()),
      watchdog_(Watchdog::Options{kBackendName, options_.watchdog_interval,
                                  options_.op_timeout, kNcclAbortEffect},
                &ledger_, &diagnosis_, &watchdog_session_) {}

SessionImpl::~SessionImpl() {
  watchdog_.Stop();
  if (!comms_.empty()) {
    // A failed job's communicators are aborted, never finalized: finalize
    // would wait for peers that are gone.
    absl::Status cause = SignalCause();
    if (!cause.ok()) Poison(cause);
    absl::Status latched = poison();
    if (!latched.ok()) {
      CancelNative(latched);
    } else {
      // Concurrently, like AbortAll: a Close whose finalize times out
      // aborts, and an abort waits for every kernel on the device.
      std::vector<std::thread> closes;
      for (auto& entry : comms_) {
        if (entry->comm == nullptr) continue;
        NcclCommunicator* comm = entry->comm.get();
        closes.emplace_back([comm, timeout = options_.destroy_timeout] {
          comm->Close(timeout);
        });
      }
      for (std::thread& t : closes) t.join();
    }
  }
  // Whatever still runs after the destroy timeout is leaked, never freed.
  quarantine_.WaitUntilEmpty(options_.destroy_timeout);
  quarantine_.Abandon();
}

bool SessionImpl::ready() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

std::string SessionImpl::unavailable_reason() const {
  absl::MutexLock lock(&mu_);
  return unavailable_reason_;
}

int SessionImpl::device() const {
  absl::MutexLock lock(&mu_);
  return device_;
}

std::shared_ptr<CudaStream> SessionImpl::stream() const {
  absl::MutexLock lock(&mu_);
  return stream_;
}

size_t SessionImpl::communicator_count() const {
  absl::MutexLock lock(&mu_);
  return ready_ ? comms_.size() : 0;
}

DistributedCapabilities SessionImpl::capabilities() const {
  absl::MutexLock lock(&mu_);
  if (!ready_ || poison_.poisoned()) return DistributedCapabilities{};
  // groups_ holds exactly the held groups (InitBrokeredCommunicators,
  // InitSplitCommunicators).
  return HeldCapabilities(descriptor_, options_.restrict_capabilities);
}

bool SessionImpl::SupportsQuarantine() const {
  // The quarantine releases work on exact completion: without that
  // capability (restricted by the options) the mode is not offered, as on
  // Gloo.
  return !options_.restrict_capabilities.has_value() ||
         options_.restrict_capabilities->exact_completion;
}

absl::Status SessionImpl::poison() const { return poison_.cause(); }

void SessionImpl::Poison(const absl::Status& cause) {
  poison_.Poison(cause.ok() ? absl::InternalError(
                                  "nccl backend: session poisoned without a "
                                  "cause")
                            : AsPoisonCause(cause));
}

absl::Status SessionImpl::FailClosed(const absl::Status& status) const {
  if (status.ok()) return status;
  std::string why;
  {
    absl::MutexLock lock(&mu_);
    if (!unavailable_reason_.empty()) {
      why = unavailable_reason_;
    } else if (!initialize_called_) {
      why = "the session was not initialized";
    } else if (!ready_) {
      why = "the session is not initialized";
    }
  }
  if (why.empty()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (", why, ")"));
}

absl::StatusOr<std::shared_ptr<CommEntry>> SessionImpl::CommFor(
    const CollectiveScope& scope, const char* operation,
    bool DistributedCapabilities::*flag, const char* capability) const {
  absl::Status admitted = Admit(
      {kBackendName, operation, scope, flag, capability},
      poison_.Check(kBackendName, operation), descriptor_, capabilities());
  if (!admitted.ok()) {
    // A capability this session lacks: say why it advertises nothing.
    return admitted.code() == absl::StatusCode::kUnimplemented
               ? FailClosed(admitted)
               : admitted;
  }
  absl::MutexLock lock(&mu_);
  if (scope.is_world()) return world_;
  auto it = groups_.find(scope.group_id());
  if (it == groups_.end()) {
    return absl::InternalError(
        absl::StrCat("nccl backend: no communicator for ", scope.ToString()));
  }
  return it->second;
}

absl::Status SessionImpl::CheckTensor(const DeviceTensor& tensor,
                                      absl::string_view operation) const {
  const int device = this->device();
  if (tensor.buffer() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: ", operation, ": the tensor has no buffer"));
  }
  if (tensor.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: ", operation, ": tensor ", tensor.ToString(),
        " is not on this session's device cuda:", device));
  }
  if (tensor.buffer()->size() < tensor.byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: ", operation, ": tensor ", tensor.ToString(),
        " has a buffer of ", tensor.buffer()->size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status SessionImpl::JobHealth() const {
  if (detached_.load()) {
    return absl::FailedPreconditionError(
        "nccl backend: the session was destroyed; its groups and backend "
        "can no longer submit work");
  }
  return control_plane_->JobHealth();
}

void SessionImpl::Detach() {
  // Last look at the job while the control plane still exists: a failure
  // the watchdog has not acted on yet makes the destructor abort.
  if (ready() && poison().ok() && !detached_.load()) {
    absl::Status health = SignalCause();
    if (health.ok()) health = control_plane_->JobHealth();
    if (!health.ok()) CancelNative(health);
  }
  // The watchdog first (it may be inside JobHealth(); this waits for its
  // current tick), so that it never sees the core detached.
  watchdog_.Detach();
  detached_.store(true);
}

absl::Status SessionImpl::CheckUsable() {
  absl::Status latched = poison();
  if (!latched.ok()) return latched;
  if (detached_.load()) return JobHealth();
  absl::Status cause = SignalCause();
  if (cause.ok()) cause = JobHealth();
  if (!cause.ok()) {
    CancelNative(cause);
    return poison();
  }
  return absl::OkStatus();
}

absl::Status SessionImpl::RefuseIfCapturing(
    const std::shared_ptr<CudaStream>& stream, absl::string_view operation,
    absl::string_view whose) const {
  if (stream == nullptr) return absl::OkStatus();
  return CheckNotCapturing(
      stream->get(), stream->device(),
      absl::StrCat("nccl backend: ", operation, ": ", whose));
}

absl::Status SessionImpl::Fail(const absl::Status& cause) {
  CancelNative(cause);
  return poison();
}

bool SessionImpl::CancelNative(const absl::Status& cause) {
  Poison(cause);
  const absl::Status latched = poison();
  absl::MutexLock lock(&abort_mu_);
  // Torn down once AbortAll returned: every ncclCommAbort returned, or the
  // process ended (abort_timeout, dataplane/abort_deadline.h).
  if (aborted_) return true;
  aborted_ = true;
  // What was running, for the message should the abort itself hang.
  const std::string unfinished = ledger_.DescribeUnfinished(4);
  ledger_.FailAll(latched);
  std::vector<std::shared_ptr<CommEntry>> comms;
  {
    absl::MutexLock state(&mu_);
    comms = comms_;
  }
  AbortAll(comms, latched, options_.abort_timeout, unfinished);
  return true;
}

void AbortAll(const std::vector<std::shared_ptr<CommEntry>>& comms,
              const absl::Status& cause, absl::Duration timeout,
              const std::string& unfinished) {
  // Which aborts returned, for the message should some not.
  auto returned =
      std::make_shared<std::vector<std::atomic<bool>>>(comms.size());
  AbortDeadline deadline(
      kBackendName, timeout, [&comms, returned, unfinished, cause] {
        std::vector<std::string> stuck;
        for (size_t c = 0; c < comms.size(); ++c) {
          if (comms[c]->comm == nullptr || (*returned)[c].load()) continue;
          stuck.push_back(absl::StrCat(comms[c]->name, " (",
                                       NameRanks(comms[c]->members), ")"));
        }
        return absl::StrCat(
            "communicators ", absl::StrJoin(stuck, ", "),
            " still aborting; unfinished operations: ", unfinished,
            "; aborted because: ", cause.ToString());
      });
  // Concurrently: ncclCommAbort frees device memory, which waits for every
  // kernel on the device, so aborting one communicator while another's
  // kernel still waits for a dead peer would never return.
  std::vector<std::thread> aborts;
  for (size_t c = 0; c < comms.size(); ++c) {
    if (comms[c]->comm == nullptr) continue;
    NcclCommunicator* comm = comms[c]->comm.get();
    aborts.emplace_back([comm, cause, returned, c] {
      comm->Abort(cause);
      (*returned)[c].store(true);
    });
  }
  for (std::thread& t : aborts) t.join();
}

void SessionImpl::Quarantine(std::shared_ptr<Operation> op) {
  op->QuarantineIn(quarantine_);
}

absl::StatusOr<DeviceTensor> SessionImpl::AllocateOutput(
    const ValueDescriptor& descriptor,
    const std::shared_ptr<CudaStream>& stream, absl::string_view operation) {
  auto tensor = DeviceTensor::Allocate(descriptor, stream);
  if (!tensor.ok()) {
    return Fail(absl::Status(
        tensor.status().code(),
        absl::StrCat("nccl backend: ", operation, ": allocating the output ",
                     descriptor.ToString(), ": ", tensor.status().message())));
  }
  return tensor;
}

absl::StatusOr<DeviceTensor> SessionImpl::OutputFor(
    const ValueDescriptor& descriptor, const DeviceTensor* into,
    const DeviceTensor* input, bool in_place,
    const std::shared_ptr<CudaStream>& stream, absl::string_view operation) {
  if (into == nullptr) return AllocateOutput(descriptor, stream, operation);
  if (absl::Status s = CheckTensor(*into, operation); !s.ok()) return s;
  OutputOverlap overlap = OutputOverlap::kNone;
  if (input != nullptr && into->Overlaps(*input)) {
    // NCCL runs in place only when both are the same bytes exactly.
    const bool same = into->data() == input->data() &&
                      into->byte_size() == input->byte_size();
    overlap = same ? OutputOverlap::kSameBytes : OutputOverlap::kPartial;
  }
  if (absl::Status s =
          CheckCallerOutput(kBackendName, operation, into->descriptor(),
                            descriptor, overlap, in_place);
      !s.ok()) {
    return s;
  }
  return *into;
}

std::function<absl::Status()> SessionImpl::EnqueueInterrupt() const {
  return [this]() -> absl::Status {
    absl::Status s = poison();
    if (!s.ok()) return s;
    return SignalCause();
  };
}

absl::Status SessionImpl::AgreeFirst(
    const OpPlan& plan, const internal::OperationAgreement& agreement,
    const std::string& canonical, const std::function<void()>& take_sequence,
    const std::function<std::string()>& where, absl::Status* refusal,
    bool* ahead_peers) {
  using Part = internal::OperationAgreement::Part;
  const CudaStream& stream = *plan.stream;
  CudaStreamHandle handle = stream.get();
  auto records = CudaEvent::Create(stream.device());
  if (!records.ok()) return records.status();
  // The fingerprints first: they pair whatever collective each member
  // submitted; all_to_all_v's counts only once they agree.
  const std::vector<Part> parts =
      agreement.has_counts()
          ? std::vector<Part>{Part::kFingerprints, Part::kCounts}
          : std::vector<Part>{Part::kAll};
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::Status s = plan.comm->comm->Enqueue(
        plan.name,
        [&](NcclCommHandle c) {
          if (i == 0) take_sequence();
          // A route's records go both ways: one group, or each end's send
          // would wait for the other's.
          return NcclGrouped(
              [&] { return agreement.Exchange(c, handle, parts[i]); });
        },
        MonotonicNow() + options_.enqueue_timeout, EnqueueInterrupt());
    if (!s.ok()) return s;
    // Back to page-locked memory in stream order: read once they arrived,
    // without another synchronization.
    if (s = agreement.Collect(stream, parts[i]); !s.ok()) return s;
    if (s = (*records)->Record(stream); !s.ok()) return s;
    // Until every member's record arrived: a member that never submits is
    // the watchdog's (op_timeout), whose abort poisons and ends this wait.
    absl::Duration sleep = absl::Microseconds(2);
    while (true) {
      absl::StatusOr<bool> arrived = (*records)->Query();
      if (!arrived.ok()) return arrived.status();
      if (*arrived) break;
      if (s = EnqueueInterrupt()(); !s.ok()) return s;
      absl::SleepFor(sleep);
      sleep = std::min(sleep * 2, absl::Microseconds(200));
    }
    std::vector<bool> disagreeing;
    absl::Status agreed = agreement.Verify(
        where(), canonical, VerdictPoint::kBeforePayload,
        plan.refused_transfers != nullptr ? &disagreeing : nullptr, parts[i],
        ahead_peers);
    if (agreed.code() != absl::StatusCode::kInvalidArgument) {
      if (!agreed.ok()) return agreed;  // the read failed
      continue;
    }
    // Refused: InvalidArgument naming who submitted what.
    if (plan.refused_transfers != nullptr) {
      *plan.refused_transfers = disagreeing;
    }
    *refusal = std::move(agreed);
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

struct SessionImpl::AheadCheck {
  std::weak_ptr<const internal::OperationAgreement> agreement;
  // Each part's arrival event, the part, and whether it was seen agreeing.
  std::vector<std::weak_ptr<CudaEvent>> events;
  std::vector<internal::OperationAgreement::Part> parts;
  std::vector<bool> agreed;
  std::string where, canonical;
};

absl::Status SessionImpl::SubmitRecordsAhead(
    const OpPlan& plan,
    const std::shared_ptr<const internal::OperationAgreement>& agreement,
    const std::vector<std::shared_ptr<CudaEvent>>& ahead_events,
    const std::function<void()>& take_sequence, const std::string& where,
    const std::string& canonical) {
  using Part = internal::OperationAgreement::Part;
  const CudaStream& stream = *plan.stream;
  CudaStreamHandle handle = stream.get();
  // The same launches as AgreeFirst's, so that members that check first
  // and members that go ahead pair launch for launch.
  const std::vector<Part> parts =
      agreement->has_counts()
          ? std::vector<Part>{Part::kFingerprints, Part::kCounts}
          : std::vector<Part>{Part::kAll};
  auto check = std::make_shared<AheadCheck>();
  check->agreement = agreement;
  check->where = where;
  check->canonical = canonical;
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::Status s = plan.comm->comm->Enqueue(
        plan.name,
        [&](NcclCommHandle c) {
          if (i == 0) take_sequence();
          return NcclGrouped(
              [&] { return agreement->Exchange(c, handle, parts[i]); });
        },
        MonotonicNow() + options_.enqueue_timeout, EnqueueInterrupt());
    if (!s.ok()) return s;
    if (s = agreement->Collect(stream, parts[i]); !s.ok()) return s;
    if (s = ahead_events[i]->Record(stream); !s.ok()) return s;
    check->events.push_back(ahead_events[i]);
    check->parts.push_back(parts[i]);
    check->agreed.push_back(false);
  }
  absl::MutexLock lock(&ahead_mu_);
  ahead_.push_back(std::move(check));
  return absl::OkStatus();
}

absl::Status SessionImpl::CheckRecordsAhead() {
  std::vector<std::shared_ptr<AheadCheck>> checks;
  {
    absl::MutexLock lock(&ahead_mu_);
    checks = ahead_;
  }
  if (checks.empty()) return absl::OkStatus();
  std::vector<AheadCheck*> finished;
  absl::Status verdict;
  for (const auto& check : checks) {
    auto agreement = check->agreement.lock();
    bool done = agreement != nullptr;
    for (size_t i = 0; done && i < check->events.size(); ++i) {
      if (check->agreed[i]) continue;
      auto event = check->events[i].lock();
      absl::StatusOr<bool> arrived =
          event != nullptr ? event->Query() : absl::StatusOr<bool>(false);
      // A failed query is the device's error, which the completion reports.
      if (event == nullptr || !arrived.ok() || !*arrived) {
        done = event == nullptr || !arrived.ok();
        break;
      }
      absl::Status s = agreement->Verify(check->where, check->canonical,
                                         VerdictPoint::kAfterPayload, nullptr,
                                         check->parts[i]);
      if (!s.ok()) {
        verdict = AsPoisonCause(s);
        break;
      }
      check->agreed[i] = true;
    }
    if (!verdict.ok()) break;
    if (agreement == nullptr || done) finished.push_back(check.get());
  }
  {
    absl::MutexLock lock(&ahead_mu_);
    std::erase_if(ahead_, [&](const std::shared_ptr<AheadCheck>& c) {
      return std::find(finished.begin(), finished.end(), c.get()) !=
             finished.end();
    });
  }
  return verdict;
}

bool SessionImpl::AgreedBefore(const std::string& comm,
                               uint64_t signature) const {
  absl::MutexLock lock(&agreed_mu_);
  auto it = agreed_.find(comm);
  return it != agreed_.end() && it->second.contains(signature);
}

void SessionImpl::NoteAgreed(const std::string& comm, uint64_t signature) {
  absl::MutexLock lock(&agreed_mu_);
  auto& seen = agreed_[comm];
  if (seen.size() >= kAgreedSignatures) seen.clear();
  seen.insert(signature);
}

absl::Status SessionImpl::RefuseWithPeers(OpPlan plan,
                                          const absl::Status& refusal) {
  if (refusal.ok()) return refusal;
  const bool peers_wait =
      plan.comm != nullptr && plan.comm->comm != nullptr &&
      PeersAwaitRecord(plan.comm->members.size(), options_.verify_agreement,
                       plan.agree_first);
  if (!peers_wait || !poison().ok() || detached_.load()) return refusal;
  // The record goes on the session's stream when the operation's own one
  // is what was wrong.
  if (plan.stream == nullptr || plan.stream->device() != device() ||
      !RefuseIfCapturing(plan.stream, plan.name, "the stream").ok()) {
    plan.stream = stream();
    if (plan.stream == nullptr) return refusal;
  }
  // The record itself must not be captured (it would never arrive): when
  // the session's stream is capturing too, the refusal cannot be told.
  if (!RefuseIfCapturing(plan.stream, plan.name, "the session's stream").ok()) {
    return refusal;
  }
  plan.canonical = kRefusedCanonical;
  // Told on a route (its one peer, "the other end of route 0->1 in world"),
  // or to the scope's members (a collective, or a batch, which may have
  // several peers), in Gloo's words (RefusalAfterTelling).
  const bool on_route = plan.route.has_value() && plan.batch.empty();
  const std::string told_scope =
      on_route ? RouteWords(plan, plan.scope) : plan.scope;
  // A batch is described by its first transfer's route, as SubmitBatch does.
  if (!plan.batch.empty()) {
    const auto& first = plan.batch.front();
    const uint32_t me = plan.comm->local_rank;
    plan.route = first.send ? std::make_pair(me, first.peer)
                            : std::make_pair(first.peer, me);
  }
  const uint64_t refused = OperationFingerprint(plan.canonical);
  for (auto& entry : plan.batch) {
    entry.fingerprint = refused;
    entry.canonical = plan.canonical;
  }
  plan.refused_transfers = nullptr;
  plan.agreement_counts.clear();  // the peers compare fingerprints first
  plan.agree_first = true;
  plan.inputs.clear();
  plan.outputs.clear();
  plan.retained.clear();
  plan.before = nullptr;
  plan.nccl = nullptr;
  plan.after = nullptr;
  auto told = Submit(std::move(plan));
  absl::Status sent = told.ok() ? told->completion->Wait() : told.status();
  // The peers' records differ from this one unless they refused too: that
  // is the refusal they hear about (an InvalidArgument that leaves the
  // session usable), not a failure of this member.
  const bool heard =
      sent.ok() ||
      (told.ok() && sent.code() == absl::StatusCode::kInvalidArgument &&
       poison().ok());
  return RefusalAfterTelling(refusal, told_scope, on_route,
                             heard ? absl::OkStatus() : sent);
}

absl::StatusOr<Submitted> SessionImpl::Submit(OpPlan plan) {
  absl::Status usable = CheckUsable();
  if (!usable.ok()) return usable;
  if (plan.stream == nullptr) {
    const std::string message =
        absl::StrCat("nccl backend: ", plan.name, ": no stream");
    return RefuseWithPeers(std::move(plan),
                           absl::InvalidArgumentError(message));
  }
  if (plan.stream->device() != device()) {
    const std::string message =
        absl::StrCat("nccl backend: ", plan.name,
                     ": the stream is on cuda:", plan.stream->device(),
                     ", the session on cuda:", device());
    return RefuseWithPeers(std::move(plan),
                           absl::InvalidArgumentError(message));
  }
  DeviceGuard guard(plan.stream->device());
  if (!guard.status().ok()) return Fail(guard.status());
  auto event = CudaEvent::Create(plan.stream->device());
  if (!event.ok()) return Fail(event.status());

  std::vector<std::shared_ptr<const void>> retained = std::move(plan.retained);
  retained.push_back(plan.stream);
  if (plan.comm != nullptr) retained.push_back(plan.comm);
  for (const auto* used : {&plan.inputs, &plan.outputs}) {
    for (const DeviceTensor& tensor : *used) {
      retained.push_back(tensor.buffer());
      if (tensor.ready() != nullptr) retained.push_back(tensor.ready());
    }
  }
  const SubmittedOperation what = Describe(plan);
  // Members that submit different work never report success
  // (internal/operation_agreement.h).
  std::shared_ptr<const internal::OperationAgreement> agreement;
  if (plan.comm != nullptr && plan.comm->members.size() > 1) {
    absl::StatusOr<std::shared_ptr<const internal::OperationAgreement>> made;
    const uint64_t fingerprint = OperationFingerprint(what.canonical);
    if (!plan.batch.empty()) {
      made = internal::OperationAgreement::ForBatch(
          plan.comm->members, plan.comm->local_rank, plan.batch, plan.stream,
          *record_buffers_);
    } else if (plan.route.has_value()) {
      made = internal::OperationAgreement::ForRoute(
          plan.comm->members, plan.comm->local_rank, plan.route->first,
          plan.route->second, fingerprint, plan.stream, *record_buffers_);
    } else {
      std::vector<uint64_t> words = {fingerprint};
      words.insert(words.end(), plan.agreement_counts.begin(),
                   plan.agreement_counts.end());
      made = internal::OperationAgreement::ForCollective(
          plan.comm->members, plan.comm->local_rank, std::move(words),
          !plan.agreement_counts.empty(), plan.stream, *record_buffers_);
    }
    if (!made.ok()) return Fail(made.status());
    agreement = *std::move(made);
    for (auto& r : agreement->Retained()) retained.push_back(std::move(r));
    retained.push_back(agreement);
  }
  // A count-carrying operation goes ahead (no host wait) once this
  // member's record was agreed before; verify_agreement always checks
  // first.
  const bool counts_checked =
      agreement != nullptr && plan.agree_first && !options_.verify_agreement;
  const uint64_t signature = counts_checked ? agreement->Signature() : 0;
  const bool ahead = counts_checked && AgreedBefore(plan.comm->name, signature);
  // Its records' arrival events (fingerprints, then counts), retained by
  // the operation so that the watchdog's check never outlives them.
  std::vector<std::shared_ptr<CudaEvent>> ahead_events;
  if (ahead) {
    for (int i = 0; i < (agreement->has_counts() ? 2 : 1); ++i) {
      auto e = CudaEvent::Create(plan.stream->device());
      if (!e.ok()) return Fail(e.status());
      retained.push_back(*e);
      ahead_events.push_back(*std::move(e));
    }
  }
  // Outstanding before any native work is queued: an abort from now on
  // (CancelNative, any thread), or one already under way, marks it failed,
  // so work that NCCL accepted and the abort then killed never reports
  // success.
  auto op = EventOperation(plan.name, *event, std::move(retained),
                           /*queued=*/false);
  // Its sequence number once NCCL ordered it (-1 until then).
  OperationLedger::SequenceCell ordered =
      ledger_.Add(op, MonotonicNow() + options_.op_timeout, what);
  // One operation's work is contiguous on its stream: no other submitter
  // interleaves its copies or NCCL calls while this one waits for NCCL to
  // accept (ncclInProgress), so every rank queues the same order.
  absl::MutexLock stream_order(&plan.stream->submit_mu());
  const CudaStream& stream = *plan.stream;
  // After native work may have been queued: poison, abort, and hold every
  // resource until the queued work finished.
  auto abort_with = [&](const absl::Status& cause) -> absl::Status {
    absl::Status poisoned = Fail(cause);
    if ((*event)->Record(stream).ok()) op->MarkQueued();
    op->QuarantineIn(quarantine_);
    return poisoned;
  };
  auto failed = [&](const absl::Status& cause) -> absl::Status {
    return abort_with(absl::Status(
        cause.code(),
        absl::StrCat("nccl backend: ", plan.name, ": ", cause.message())));
  };
  for (const auto* used : {&plan.inputs, &plan.outputs}) {
    for (const DeviceTensor& tensor : *used) {
      if (tensor.ready() == nullptr) continue;
      absl::Status s = StreamWaitEvent(stream, *tensor.ready());
      if (!s.ok()) return failed(s);
    }
  }
  if (agreement != nullptr) {
    absl::Status s = agreement->Stage(stream, ahead);
    if (!s.ok()) return failed(s);
  }
  const bool agree_first =
      (options_.verify_agreement || plan.agree_first) && !ahead;
  // Refused before the payload with nothing left to move: no copies either
  // (a caller-owned output stays as it was).
  bool nothing_moves = false;
  auto run_before = [&]() -> absl::Status {
    return plan.before ? plan.before(stream) : absl::OkStatus();
  };
  if (!plan.nccl && agreement == nullptr) {
    if (absl::Status s = run_before(); !s.ok()) return failed(s);
  } else {
    if (plan.comm == nullptr || plan.comm->comm == nullptr) {
      return failed(absl::InternalError("no communicator"));
    }
    std::shared_ptr<CommEntry> comm = plan.comm;
    CudaStreamHandle handle = stream.get();
    // The sequence number is taken where NCCL orders the work (the
    // agreement records, which go first, alone or in the payload's group).
    uint32_t sequence = 0;
    auto take_sequence = [&] {
      sequence = comm->NextSequence(plan.route);
      // A batch's other transfers take the next numbers of their routes.
      const uint32_t me = comm->local_rank;
      for (size_t i = 1; i < plan.batch.size(); ++i) {
        const auto& t = plan.batch[i];
        comm->NextSequence(t.send ? std::make_pair(me, t.peer)
                                  : std::make_pair(t.peer, me));
      }
      ordered->store(sequence);
    };
    auto where = [&] {
      // As Gloo words it: "<backend> <operation> on <scope>".
      return absl::StrCat("nccl ", plan.name);
    };
    bool payload = static_cast<bool>(plan.nccl);
    if (agreement != nullptr && agree_first) {
      absl::Status refusal;
      bool ahead_peers = false;
      absl::Status s = AgreeFirst(plan, *agreement, what.canonical,
                                  take_sequence, where, &refusal, &ahead_peers);
      if (!s.ok()) return failed(s);
      if (!refusal.ok() && ahead_peers) {
        // A member's payload is already queued and may never pair: nobody
        // can leave it out, so every member aborts, naming who submitted
        // what (the members that went ahead find it as their records
        // arrive).
        op->FailIfRunning(AsPoisonCause(refusal));
        return abort_with(AsPoisonCause(refusal));
      }
      if (refusal.ok() && counts_checked) {
        NoteAgreed(plan.comm->name, signature);
      }
      if (!refusal.ok()) {
        op->Refuse(refusal);
        // A batch still moves the transfers whose ends agree.
        payload = payload && plan.refused_transfers != nullptr;
        nothing_moves = !payload;
      }
    }
    if (ahead) {
      absl::Status s =
          SubmitRecordsAhead(plan, agreement, ahead_events, take_sequence,
                             where(), what.canonical);
      if (!s.ok()) return failed(s);
    }
    if (!nothing_moves) {
      if (absl::Status s = run_before(); !s.ok()) return failed(s);
    }
    if (ahead) {
      if (payload) {
        absl::Status s = plan.comm->comm->Enqueue(
            plan.name, [&](NcclCommHandle c) { return plan.nccl(c); },
            MonotonicNow() + options_.enqueue_timeout, EnqueueInterrupt());
        if (!s.ok()) {
          // A payload that does not pair can fail at once (NCCL's error for
          // it, or an abort a peer made on finding the disagreement): the
          // records, which ran before it, say why, naming who.
          bool arrived = true;
          for (const auto& e : ahead_events) {
            absl::StatusOr<bool> done = e->Query();
            arrived = arrived && done.ok() && *done;
          }
          absl::Status verdict =
              arrived ? agreement->Verify(where(), what.canonical,
                                          VerdictPoint::kAfterPayload)
                      : absl::OkStatus();
          if (!verdict.ok()) return abort_with(AsPoisonCause(verdict));
          return failed(s);
        }
      }
      op->SetVerifier([agreement, where = where(), canonical = what.canonical] {
        // The payload moved: the verdict poisons.
        return AsPoisonCause(
            agreement->Verify(where, canonical, VerdictPoint::kAfterPayload));
      });
    } else if (agreement == nullptr || !agree_first) {
      absl::Status s = plan.comm->comm->Enqueue(
          plan.name,
          [&](NcclCommHandle c) {
            take_sequence();
            if (agreement == nullptr) return plan.nccl(c);
            return NcclGrouped([&]() -> int {
              int r = agreement->Exchange(c, handle);
              if (r != kNcclSuccess && r != kNcclInProgress) return r;
              return plan.nccl ? plan.nccl(c) : kNcclSuccess;
            });
          },
          MonotonicNow() + options_.enqueue_timeout, EnqueueInterrupt());
      if (!s.ok()) return failed(s);
      if (agreement != nullptr) {
        // The records back to page-locked memory, before the completion
        // event: the verifier reads them without synchronizing.
        if (s = agreement->Collect(stream); !s.ok()) return failed(s);
        op->SetVerifier(
            [agreement, where = where(), canonical = what.canonical] {
              // The payload moved: the verdict poisons.
              return AsPoisonCause(agreement->Verify(
                  where, canonical, VerdictPoint::kAfterPayload));
            });
      }
    } else if (payload) {
      absl::Status s = plan.comm->comm->Enqueue(
          plan.name, [&](NcclCommHandle c) { return plan.nccl(c); },
          MonotonicNow() + options_.enqueue_timeout, EnqueueInterrupt());
      if (!s.ok()) return failed(s);
    }
  }
  if (plan.after && !nothing_moves) {
    absl::Status s = plan.after(stream);
    if (!s.ok()) return failed(s);
  }
  absl::Status recorded = (*event)->Record(stream);
  if (!recorded.ok()) return failed(recorded);
  op->MarkQueued();
  Submitted submitted;
  submitted.event = *event;
  submitted.completion = MakeNcclCompletion(std::move(op), shared_from_this());
  return submitted;
}

absl::Status SessionImpl::InitInterrupt() const {
  absl::Status s = SignalCause();
  if (!s.ok()) return s;
  return JobHealth();
}

absl::Status SessionImpl::Initialize() {
  {
    absl::MutexLock lock(&mu_);
    if (initialize_called_) {
      return absl::FailedPreconditionError(
          "nccl backend: Initialize was already called on this session");
    }
    initialize_called_ = true;
  }
  absl::Status s = InitializeLocked();
  if (s.ok()) {
    absl::MutexLock lock(&mu_);
    ready_ = true;
  }
  if (s.ok()) watchdog_.Start();
  return s;
}

absl::Status SessionImpl::InitializeLocked() {
  // Job failure notifications reach the watchdog only (the callback holds
  // no reference to this core).
  control_plane_->OnJobFailureWhileAlive(watchdog_.JobFailureCallback(),
                                         watchdog_.JobFailureOwner());

  DeviceProbe probe = ProbeDevices();
  if (probe.device_count == 0) {
    {
      absl::MutexLock lock(&mu_);
      unavailable_reason_ = probe.reason;
    }
    return absl::UnavailableError(
        absl::StrCat("nccl backend: ", probe.reason,
                     "; every NCCL capability is reported false"));
  }
  // One GPU per rank. By default the visible device count decides
  // (DefaultDevice, default_device.h): the local rank's device where the
  // process sees its node's GPUs, its one device where it sees one; an
  // ambiguous count fails here, before any communicator exists (sharing a
  // GPU would fail later inside NCCL, with an error that does not say why).
  int device = options_.device;
  if (device < 0) {
    absl::StatusOr<int> chosen =
        DefaultDevice(descriptor_.local_rank(), descriptor_.ranks_on_node(),
                      descriptor_.world_size(), probe.device_count);
    if (!chosen.ok()) {
      absl::MutexLock lock(&mu_);
      unavailable_reason_ = std::string(chosen.status().message());
      return chosen.status();
    }
    device = *chosen;
  }
  if (device >= probe.device_count) {
    absl::Status s = absl::InvalidArgumentError(
        absl::StrCat("nccl backend: device ", device, " does not exist (",
                     probe.device_count, " CUDA devices)"));
    absl::MutexLock lock(&mu_);
    unavailable_reason_ = std::string(s.message());
    return s;
  }
  absl::Status health = InitInterrupt();
  if (!health.ok()) {
    Poison(health);
    return health;
  }
  auto stream = CudaStream::Create(device);
  if (!stream.ok()) {
    Poison(stream.status());
    return stream.status();
  }

  if (options_.executors > 1 && !SplitSupported()) {
    absl::Status s = absl::FailedPreconditionError(absl::StrCat(
        "nccl backend: ", options_.executors,
        " executors need ncclCommSplit (NCCL 2.18 or later); this NCCL is ",
        NcclRuntimeVersion()));
    absl::MutexLock lock(&mu_);
    unavailable_reason_ = std::string(s.message());
    return s;
  }
  const absl::Time deadline = MonotonicNow() + options_.init_timeout;
  std::shared_ptr<CommEntry> world;
  std::map<CollectiveGroupId, std::shared_ptr<CommEntry>> groups;
  std::vector<std::shared_ptr<CommEntry>> comms;
  // Splitting needs a world root, which a session confined to its domain
  // (domain_groups.h) does not connect: it brokers each held group's own
  // unique ids instead.
  absl::Status made =
      SplitSupported() && HoldsWorld(descriptor_)
          ? InitSplitCommunicators(device, deadline, &world, &groups, &comms)
          : InitBrokeredCommunicators(device, deadline, &world, &groups,
                                      &comms);
  if (!made.ok()) {
    AbortAll(comms, made, options_.abort_timeout,
             "communicator initialization");
    Poison(made);
    return made;
  }
  absl::MutexLock lock(&mu_);
  device_ = device;
  stream_ = *std::move(stream);
  world_ = std::move(world);
  groups_ = std::move(groups);
  comms_ = std::move(comms);
  return absl::OkStatus();
}

namespace {

// The scopes of one ncclCommSplit of the root: disjoint groups (ids), so
// each rank is in at most one (its color is the group's index here).
using SplitRound = std::vector<CollectiveGroupId>;

// Packs the groups (id -> world ranks) into as few rounds as a greedy
// first fit gives, in id order: the same on every rank.
std::vector<SplitRound> PackSplitRounds(
    const std::map<CollectiveGroupId, std::set<uint32_t>>& members) {
  std::vector<SplitRound> rounds;
  std::vector<std::set<uint32_t>> taken;
  for (const auto& [id, ranks] : members) {
    size_t r = 0;
    for (; r < rounds.size(); ++r) {
      bool disjoint = true;
      for (uint32_t m : ranks) disjoint = disjoint && !taken[r].contains(m);
      if (disjoint) break;
    }
    if (r == rounds.size()) {
      rounds.emplace_back();
      taken.emplace_back();
    }
    rounds[r].push_back(id);
    taken[r].insert(ranks.begin(), ranks.end());
  }
  return rounds;
}

// Every rank's `mine` (the same length on every rank), rank by rank,
// through an ncclAllGather on `comm` (a ready communicator of the whole
// world), waited for with `deadline` and `interrupt`.
absl::StatusOr<std::vector<uint32_t>> GatherWords(
    CommEntry& comm, const std::vector<uint32_t>& mine, int device,
    absl::Time deadline, const std::function<absl::Status()>& interrupt) {
  auto stream = CudaStream::Create(device);
  if (!stream.ok()) return stream.status();
  const size_t n = mine.size();
  const size_t world = comm.members.size();
  auto in = ValueDescriptor::Create({n}, TensorDtype::kU32);
  auto out = ValueDescriptor::Create({n * world}, TensorDtype::kU32);
  if (!in.ok() || !out.ok()) return in.ok() ? out.status() : in.status();
  auto send = DeviceTensor::FromHostVector(*in, mine, *stream);
  if (!send.ok()) return send.status();
  auto receive = DeviceTensor::Allocate(*out, *stream);
  if (!receive.ok()) return receive.status();
  CudaStreamHandle handle = (*stream)->get();
  absl::Status s = comm.comm->Enqueue(
      "the exchange of group ids",
      [&](NcclCommHandle c) {
        return NcclAllGather(send->data(), receive->data(), n,
                             NcclDataType::kUint32, c, handle);
      },
      deadline, interrupt);
  if (!s.ok()) return s;
  auto done = CudaEvent::Create(device);
  if (!done.ok()) return done.status();
  if (s = (*done)->Record(**stream); !s.ok()) return s;
  while (true) {
    absl::StatusOr<bool> finished = (*done)->Query();
    if (!finished.ok()) return finished.status();
    if (*finished) break;
    if (interrupt) {
      if (s = interrupt(); !s.ok()) return s;
    }
    if (s = comm.comm->CheckAsyncError(); !s.ok()) return s;
    if (MonotonicNow() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("nccl backend: the exchange of group ids over ",
                       comm.name, " did not finish before the init deadline"));
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  return receive->ToHostVector<uint32_t>();
}

}  // namespace

absl::Status SessionImpl::InitSplitCommunicators(
    int device, absl::Time deadline, std::shared_ptr<CommEntry>* world,
    std::map<CollectiveGroupId, std::shared_ptr<CommEntry>>* groups,
    std::vector<std::shared_ptr<CommEntry>>* comms) {
  const uint32_t world_size = descriptor_.world_size();
  const uint32_t me = descriptor_.rank();
  auto interrupt = [this] { return InitInterrupt(); };
  std::vector<uint32_t> all(world_size);
  std::iota(all.begin(), all.end(), 0u);

  // The root: the one full init. Its resources are shared with every
  // scope split from it (no new connections or buffers: they share its
  // channels), and so is its order: every scope's lane-0 work runs in
  // launch order, as one Gloo executor runs it. Named for messages as the
  // world it spans.
  auto root = std::make_shared<CommEntry>();
  root->name = "world-root";
  root->members = all;
  root->local_rank = me;
  comms->push_back(root);
  CommIdRequest req;
  req.comm_name = "world";  // the key layout of docs/nccl.md, "Unique ids"
  req.members = all;
  req.rank = me;
  req.plan = PlanUniqueIds(world_size, options_.ranks_per_unique_id,
                           ScalableInitSupported());
  UniqueIdGenerator generator = options_.unique_id_generator;
  if (!generator) generator = [] { return NewNcclUniqueId(); };
  auto ids = BrokerUniqueIds(*control_plane_, *options_.tag, {req}, generator,
                             deadline, interrupt, descriptor_.epoch());
  if (!ids.ok()) return ids.status();
  NcclCommunicator::Options o;
  o.name = root->name;
  o.device = device;
  o.nranks = static_cast<int>(world_size);
  o.rank = static_cast<int>(me);
  o.unique_ids = (*ids)[0];
  o.share_resources = true;
  auto root_comm = NcclCommunicator::StartInit(std::move(o));
  if (!root_comm.ok()) return root_comm.status();
  (*root_comm)->set_destroy_timeout(options_.destroy_timeout);
  root->comm = *std::move(root_comm);
  if (absl::Status s = root->comm->AwaitReady(deadline, interrupt); !s.ok()) {
    return s;
  }

  // Which ranks are in which group: each rank knows only its own groups,
  // and every rank must make the same splits in the same order. Two
  // all-gathers over the root tell (how many groups, then their ids).
  std::map<CollectiveGroupId, std::set<uint32_t>> group_ranks;
  for (const auto& g : descriptor_.groups()) {
    group_ranks[g.id()].insert(g.members().begin(), g.members().end());
  }
  if (world_size > 1) {
    auto counts =
        GatherWords(*root, {static_cast<uint32_t>(descriptor_.groups().size())},
                    device, deadline, interrupt);
    if (!counts.ok()) return counts.status();
    const uint32_t most = *std::max_element(counts->begin(), counts->end());
    if (most > 0) {
      std::vector<uint32_t> mine(most, 0);
      for (size_t i = 0; i < descriptor_.groups().size(); ++i) {
        mine[i] = descriptor_.groups()[i].id();
      }
      auto gathered = GatherWords(*root, mine, device, deadline, interrupt);
      if (!gathered.ok()) return gathered.status();
      group_ranks.clear();
      for (uint32_t r = 0; r < world_size; ++r) {
        for (uint32_t i = 0; i < (*counts)[r]; ++i) {
          group_ranks[(*gathered)[r * most + i]].insert(r);
        }
      }
    }
  }

  // Every scope its own communicator, lane 0 of its own (groups with the
  // same members too, as every Gloo group has its own context).
  auto split = [&](const std::string& name,
                   const std::vector<uint32_t>& members, uint32_t local_rank,
                   int color) -> absl::StatusOr<std::shared_ptr<CommEntry>> {
    NcclCommunicator::Options child;
    child.name = name;
    child.device = device;
    child.nranks = static_cast<int>(members.size());
    child.rank = static_cast<int>(local_rank);
    // Their own splits (executor lanes) get resources, and an order, of
    // their own.
    child.share_resources = false;
    auto comm = root->comm->Split(
        std::move(child), color,
        static_cast<int>(color == kNcclSplitNoColor ? me : local_rank),
        deadline, interrupt);
    if (!comm.ok()) return comm.status();
    if (*comm == nullptr) return std::shared_ptr<CommEntry>();
    auto entry = std::make_shared<CommEntry>();
    entry->name = name;
    entry->members = members;
    entry->local_rank = local_rank;
    entry->comm = *std::move(comm);
    comms->push_back(entry);
    return entry;
  };
  auto world_entry = split("world", all, me, 0);
  if (!world_entry.ok()) return world_entry.status();
  *world = *world_entry;
  for (const SplitRound& round : PackSplitRounds(group_ranks)) {
    int color = kNcclSplitNoColor;
    const CollectiveGroupDescriptor* mine = nullptr;
    for (size_t i = 0; i < round.size(); ++i) {
      mine = descriptor_.group(round[i]);
      if (mine != nullptr) {
        color = static_cast<int>(i);
        break;
      }
    }
    const std::string name =
        mine == nullptr ? std::string()
                        : absl::StrCat("g", mine->id(), "-",
                                       CommName(mine->members(), world_size));
    auto entry = split(name, mine == nullptr ? all : mine->members(),
                       mine == nullptr ? me : mine->local_rank(), color);
    if (!entry.ok()) return entry.status();
    if (mine != nullptr) (*groups)[mine->id()] = *entry;
  }
  // The root last: messages that list communicators start with the world.
  std::rotate(comms->begin(), comms->begin() + 1, comms->end());
  return absl::OkStatus();
}

absl::Status SessionImpl::InitBrokeredCommunicators(
    int device, absl::Time deadline, std::shared_ptr<CommEntry>* world,
    std::map<CollectiveGroupId, std::shared_ptr<CommEntry>>* groups,
    std::vector<std::shared_ptr<CommEntry>>* comms_out) {
  // One communicator per distinct member list: the world first, then the
  // descriptor's groups (groups with the world's members share it).
  const uint32_t world_size = descriptor_.world_size();
  std::map<std::vector<uint32_t>, std::shared_ptr<CommEntry>> by_members;
  std::vector<std::shared_ptr<CommEntry>>& comms = *comms_out;
  auto entry_for = [&](const std::vector<uint32_t>& members,
                       uint32_t local_rank) {
    auto it = by_members.find(members);
    if (it != by_members.end()) return it->second;
    auto entry = std::make_shared<CommEntry>();
    entry->name = CommName(members, world_size);
    entry->members = members;
    entry->local_rank = local_rank;
    by_members.emplace(members, entry);
    comms.push_back(entry);
    return entry;
  };
  std::vector<uint32_t> all(world_size);
  std::iota(all.begin(), all.end(), 0u);
  // Only what the session holds (domain_groups.h): under recovery by
  // domain, no world and no group spanning domains.
  if (HoldsWorld(descriptor_)) *world = entry_for(all, descriptor_.rank());
  for (const CollectiveGroupDescriptor* g : HeldGroups(descriptor_)) {
    (*groups)[g->id()] = entry_for(g->members(), g->local_rank());
  }

  std::vector<CommIdRequest> requests;
  const bool scalable = ScalableInitSupported();
  for (const auto& entry : comms) {
    CommIdRequest req;
    req.comm_name = entry->name;
    req.members = entry->members;
    req.rank = entry->local_rank;
    req.plan = PlanUniqueIds(static_cast<uint32_t>(entry->members.size()),
                             options_.ranks_per_unique_id, scalable);
    requests.push_back(std::move(req));
  }
  auto interrupt = [this] { return InitInterrupt(); };
  UniqueIdGenerator generator = options_.unique_id_generator;
  if (!generator) generator = [] { return NewNcclUniqueId(); };
  auto ids =
      BrokerUniqueIds(*control_plane_, *options_.tag, requests, generator,
                      deadline, interrupt, descriptor_.epoch());
  if (!ids.ok()) return ids.status();
  for (size_t c = 0; c < comms.size(); ++c) {
    NcclCommunicator::Options o;
    o.name = comms[c]->name;
    o.device = device;
    o.nranks = static_cast<int>(comms[c]->members.size());
    o.rank = static_cast<int>(comms[c]->local_rank);
    o.unique_ids = (*ids)[c];
    auto comm = NcclCommunicator::StartInit(std::move(o));
    if (!comm.ok()) return comm.status();
    (*comm)->set_destroy_timeout(options_.destroy_timeout);
    comms[c]->comm = *std::move(comm);
  }
  // Poll every communicator with the one deadline.
  while (true) {
    std::vector<std::string> pending;
    for (auto& entry : comms) {
      absl::StatusOr<bool> ready = entry->comm->PollReady();
      if (!ready.ok()) return ready.status();
      if (!*ready) pending.push_back(entry->name);
    }
    if (pending.empty()) break;
    absl::Status stop = interrupt();
    if (!stop.ok()) return stop;
    if (MonotonicNow() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "nccl backend: communicator init did not finish within ",
          absl::FormatDuration(options_.init_timeout), " (still pending: ",
          absl::StrJoin(pending, ", "), "); all communicators aborted"));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return absl::OkStatus();
}

std::vector<std::shared_ptr<CommEntry>> SessionImpl::AllComms() const {
  absl::MutexLock lock(&mu_);
  return comms_;
}

absl::StatusOr<std::shared_ptr<CommEntry>> SessionImpl::LaneComm(
    const std::shared_ptr<CommEntry>& scope_comm, uint32_t lane,
    absl::string_view operation) {
  if (lane == 0) return scope_comm;
  if (lane >= options_.executors) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl backend: ", operation, ": the executor is on lane ",
                     lane, " but this session has ", options_.executors,
                     " executor lane(s) (NcclSessionOptions::executors)"));
  }
  absl::MutexLock lock(&scope_comm->lanes_mu);
  if (scope_comm->lanes.empty()) {
    if (absl::Status usable = CheckUsable(); !usable.ok()) return usable;
    // Every lane at once, in lane order: members may first use the scope
    // on different lanes, but they all make the same splits in the same
    // order (collective over the scope's members only).
    const absl::Time deadline = MonotonicNow() + options_.init_timeout;
    // Kept only once every lane is made: after a failed split the next
    // caller finds none and is refused with the poison, never indexes a
    // lane that was not made. (The lanes made are in comms_, torn down
    // with the session.)
    std::vector<std::shared_ptr<CommEntry>> lanes;
    for (uint32_t l = 1; l < options_.executors; ++l) {
      NcclCommunicator::Options o;
      o.name = absl::StrCat(scope_comm->name, "-e", l);
      o.device = device();
      o.nranks = static_cast<int>(scope_comm->members.size());
      o.rank = static_cast<int>(scope_comm->local_rank);
      auto comm = scope_comm->comm->Split(
          o, 0, static_cast<int>(scope_comm->local_rank), deadline,
          EnqueueInterrupt());
      if (!comm.ok()) {
        return Fail(absl::Status(
            comm.status().code(),
            absl::StrCat("nccl backend: ", operation, ": executor lane ", l,
                         " of ", scope_comm->name, ": ",
                         comm.status().message())));
      }
      auto entry = std::make_shared<CommEntry>();
      entry->name = o.name;
      entry->members = scope_comm->members;
      entry->local_rank = scope_comm->local_rank;
      entry->lane = l;
      entry->comm = *std::move(comm);
      {
        absl::MutexLock state(&mu_);
        comms_.push_back(entry);
      }
      lanes.push_back(std::move(entry));
    }
    scope_comm->lanes = std::move(lanes);
  }
  return scope_comm->lanes[lane - 1];
}

absl::Status SessionImpl::WatchdogSession::NativeHealth() {
  if (!core_->poison().ok()) return absl::OkStatus();
  DeviceGuard guard(core_->device());
  // Records that went ahead and arrived disagreeing: their payload may
  // never pair, so abort now rather than at op_timeout.
  if (absl::Status ahead = core_->CheckRecordsAhead(); !ahead.ok()) {
    return ahead;
  }
  for (auto& entry : core_->AllComms()) {
    if (entry->comm == nullptr) continue;
    absl::Status async = entry->comm->CheckAsyncError();
    if (!async.ok()) return async;
  }
  return absl::OkStatus();
}

bool SessionImpl::WatchdogSession::aborted() const {
  absl::MutexLock lock(&core_->abort_mu_);
  return core_->aborted_;
}

}  // namespace rankd::dataplane::nccl::internal
