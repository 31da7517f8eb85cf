#include "dataplane/gloo/gloo_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/agreement.h"
#include "dataplane/batch.h"
#include "dataplane/bundle.h"
#include "dataplane/caller_output.h"
#include "dataplane/domain_groups.h"
#include "dataplane/gloo/internal/agreement_check.h"
#include "dataplane/gloo/internal/native_ops.h"
#include "dataplane/gloo/internal/session_impl.h"
#include "dataplane/gloo/internal/sum_kernels.h"
#include "dataplane/mismatch_diagnosis.h"
#include "dataplane/operation_description.h"
#include "dataplane/route.h"
#include "dataplane/shape.h"

namespace rankd::dataplane::gloo {
namespace {

using internal::CatchNative;
using internal::Milliseconds;

using internal::OperationTag;

constexpr char kBackend[] = "gloo";

// A one-member operation's copy up to this size runs on the submitting
// thread when the executor is idle (a thread hand-off costs more); larger
// ones go to the executor thread, so that the submitter can overlap them.
constexpr size_t kLocalCopyMaxBytes = 64 * 1024;

Milliseconds Millis(absl::Duration d) {
  return Milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

std::optional<size_t> CheckedSum(absl::Span<const size_t> values) {
  size_t total = 0;
  for (size_t v : values) {
    if (v > std::numeric_limits<size_t>::max() - total) return std::nullopt;
    total += v;
  }
  return total;
}

// One transfer of a batch as its agreement check sees it: the other
// member (index) and whether this member sends.
struct BatchEnd {
  uint32_t peer;
  bool send;
};

// The route numbers of a batch's transfers, in order: each takes the next
// number of its route. Executor thread only.
std::vector<uint32_t> NumberBatch(GlooGroup& g,
                                  absl::Span<const BatchEnd> ends) {
  const uint32_t me = g.local_rank();
  std::vector<uint32_t> sequence;
  sequence.reserve(ends.size());
  for (const BatchEnd& t : ends) {
    sequence.push_back(t.send ? g.NextRouteSequence(me, t.peer)
                              : g.NextRouteSequence(t.peer, me));
  }
  return sequence;
}

// A batch's agreement check: the two ends of each transfer exchange
// fingerprints on the check slots of the transfer's number on its route,
// as SendReceive's check does (so either form pairs with the other).
// Sends mine[i] for transfer i and receives the peer's into theirs[i]; a
// transport failure is returned as is.
absl::Status ExchangeBatchFingerprints(GlooGroup& g, const std::string& op,
                                       absl::Span<const BatchEnd> ends,
                                       absl::Span<const uint32_t> sequence,
                                       std::vector<uint64_t>& mine,
                                       std::vector<uint64_t>& theirs,
                                       Milliseconds timeout) {
  using internal::PostedTransfer;
  using internal::RouteSlot;
  const uint32_t me = g.local_rank();
  theirs.assign(ends.size(), 0);
  std::vector<PostedTransfer> checks;
  for (size_t i = 0; i < ends.size(); ++i) {
    const BatchEnd& t = ends[i];
    const bool ascending = t.send ? me < t.peer : t.peer < me;
    const uint32_t check_tag =
        OperationTag(sequence[i], OperationFingerprint("agreement check"));
    const int peer = static_cast<int>(t.peer);
    checks.push_back({peer, RouteSlot(ascending, check_tag, t.send ? 0 : 1),
                      &mine[i], sizeof(uint64_t), true});
    checks.push_back({peer, RouteSlot(ascending, check_tag, t.send ? 1 : 0),
                      &theirs[i], sizeof(uint64_t), false});
  }
  return CatchNative(absl::StrCat("gloo ", op, " (agreement check)"), [&] {
    internal::NativeTransfers(g.context(), checks, timeout);
  });
}

// Copies pieces between a member-major buffer (member m's outer blocks of
// counts[m] slices, one member after another) and a value partitioned along
// an axis (each outer block holds every member's slices in member order):
// into the partitioned value when `to_axis`, out of it otherwise.
void Interleave(const uint8_t* from, uint8_t* to,
                const std::vector<size_t>& counts, const AxisLayout& layout,
                bool to_axis) {
  const size_t total = *CheckedSum(counts);
  size_t packed = 0, prefix = 0;
  for (size_t m = 0; m < counts.size(); ++m) {
    const size_t piece = counts[m] * layout.unit_bytes;
    for (size_t o = 0; o < layout.outer; ++o) {
      const size_t by_axis = (o * total + prefix) * layout.unit_bytes;
      if (piece > 0) {
        std::memcpy(to + (to_axis ? by_axis : packed),
                    from + (to_axis ? packed : by_axis), piece);
      }
      packed += piece;
    }
    prefix += counts[m];
  }
}

// What an operation's messages call it: `label` when the caller named it
// (the session: "all_gather on world"), otherwise `name` on its group as
// `executor` runs it ("all_gather_even on group 2 on executor 1").
std::string Labeled(std::string label, const char* name, GlooGroup& group,
                    const GlooExecutor& executor) {
  if (!label.empty()) return label;
  return absl::StrCat(name, " on ", group.OnLane(executor.lane())->ToString());
}

// The output of `op`: a new tensor of `result` whose bytes the operation
// overwrites entirely, or the caller's `into`, which must have exactly the
// result's descriptor and may share `input`'s buffer only when the
// operation can run in place (`in_place`).
absl::StatusOr<HostTensor> OutputFor(const std::string& op,
                                     std::optional<HostTensor> into,
                                     const ValueDescriptor& result,
                                     const HostTensor& input, bool in_place) {
  if (!into.has_value()) return HostTensor::Uninitialized(result);
  // A host tensor is its whole buffer: sharing one is sharing every byte.
  const OutputOverlap overlap =
      into->SharesBufferWith(input) && into->byte_size() > 0
          ? OutputOverlap::kSameBytes
          : OutputOverlap::kNone;
  if (absl::Status s = CheckCallerOutput(kBackend, op, into->descriptor(),
                                         result, overlap, in_place);
      !s.ok()) {
    return s;
  }
  return *std::move(into);
}

// Runs `call`, the Gloo call of operation number `sequence` on the group
// or route `scope_of` describes (described by `canonical`). A native
// failure is handed to `diagnosis`, which names the members that submitted
// something else, if any did. Nothing is described unless the call failed:
// this runs once per operation.
TaskResult RunNative(const MismatchDiagnosis& diagnosis,
                     absl::FunctionRef<SubmittedOperation()> scope_of,
                     uint32_t sequence, const std::string& op,
                     const std::string& canonical,
                     absl::FunctionRef<void()> call) {
  absl::Status s = CatchNative("gloo", op, call);
  if (s.ok()) return TaskResult::Ok();
  SubmittedOperation scope = scope_of();
  scope.sequence = sequence;
  scope.canonical = canonical;
  Explanation why = diagnosis.Explain(scope, s);
  return why.members_disagree ? TaskResult::Explained(std::move(why.status))
                              : TaskResult::Native(std::move(why.status));
}

// The diagnosis record of a collective on `g` (sequence and canonical
// description are filled in by RunNative).
SubmittedOperation OnGroup(const GlooGroup& g) {
  SubmittedOperation scope;
  scope.scope_key = g.ScopeKey();
  scope.scope_name = g.ToString();
  scope.members = g.members();
  scope.self = g.rank();
  return scope;
}

// The diagnosis record of a transfer on `route`: its two ends.
SubmittedOperation OnRoute(const GlooRoute& route) {
  SubmittedOperation scope;
  const GlooGroup& g = *route.group();
  scope.scope_key =
      absl::StrCat("r", route.source(), "-", route.destination(), g.ScopeKey());
  scope.scope_name = route.ToString();
  scope.members = {route.source(), route.destination()};
  scope.self = g.rank();
  return scope;
}

// What every queued operation needs besides its data: whether to check
// agreement first, Gloo's timeout, and the diagnosis of a native failure.
struct RunSettings {
  bool verify;
  Milliseconds timeout;
  std::shared_ptr<const MismatchDiagnosis> diagnosis;
};

RunSettings SettingsOf(const internal::SessionImpl& impl) {
  return {impl.options().verify_agreement, Millis(impl.options().op_timeout),
          impl.diagnosis()};
}

// Runs `call` (given its Gloo tag) as the next collective of `g`, whose
// canonical description `canonical` has `fingerprint`, after the agreement
// check when `run` asks for it.
TaskResult RunCollective(GlooGroup& g, const RunSettings& run,
                         const std::string& op, const std::string& canonical,
                         uint64_t fingerprint,
                         absl::FunctionRef<void(uint32_t tag)> call) {
  if (run.verify) {
    TaskResult r = internal::VerifyAgreement(g, op, canonical, run.timeout);
    if (!r.status.ok()) return r;
  }
  const uint32_t sequence = g.NextSequence();
  const uint32_t tag = OperationTag(sequence, fingerprint);
  return RunNative(
      *run.diagnosis, [&] { return OnGroup(g); }, sequence, op, canonical,
      [&] { call(tag); });
}

// The submission of `output` once queued as `completion`.
template <typename T>
absl::StatusOr<Submission<T, GlooCompletionPtr>> Submitted(
    absl::StatusOr<GlooCompletionPtr> completion, T output) {
  if (!completion.ok()) return completion.status();
  return Submission<T, GlooCompletionPtr>{std::move(output),
                                          *std::move(completion)};
}

// The Agreement of agree_success.
class GlooAgreement final : public Agreement {
 public:
  struct State {
    absl::Mutex mu;
    std::optional<bool> value ABSL_GUARDED_BY(mu);
  };

  GlooAgreement(std::shared_ptr<State> state,
                std::shared_ptr<GlooCompletion> completion)
      : state_(std::move(state)), completion_(std::move(completion)) {}

  absl::StatusOr<bool> Resolve() const override {
    if (!completion_->IsComplete()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "gloo backend: ", completion_->operation(),
          " has not completed yet; resolve it after its completion"));
    }
    if (absl::Status s = completion_->Wait(); !s.ok()) return s;
    absl::MutexLock lock(&state_->mu);
    return *state_->value;
  }

 private:
  std::shared_ptr<State> state_;
  std::shared_ptr<GlooCompletion> completion_;
};

}  // namespace

GlooBackend::GlooBackend(std::shared_ptr<internal::SessionImpl> impl)
    : impl_(std::move(impl)) {
  caps_ = HeldCapabilities(impl_->descriptor(),
                           impl_->options().restrict_capabilities);
}

GlooBackend::~GlooBackend() { impl_->Shutdown(); }

absl::StatusOr<std::unique_ptr<GlooBackend>> GlooBackend::Open(
    const DistributedSessionDescriptor& descriptor, ControlPlane* control_plane,
    const GlooSessionOptions& options) {
  auto comm = internal::SessionImpl::Create(control_plane, descriptor, options);
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<GlooBackend>(new GlooBackend(*std::move(comm)));
}

const DistributedSessionDescriptor& GlooBackend::descriptor() const {
  return impl_->descriptor();
}
const GlooSessionOptions& GlooBackend::options() const {
  return impl_->options();
}
GlooExecutor& GlooBackend::executor() { return impl_->executor(0); }
uint32_t GlooBackend::executor_count() const { return impl_->executor_count(); }
absl::StatusOr<GlooExecutor*> GlooBackend::executor(uint32_t lane) {
  if (lane >= impl_->executor_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo backend: executor ", lane, " does not exist: the backend has ",
        impl_->executor_count(), " (GlooSessionOptions::executors)"));
  }
  return &impl_->executor(lane);
}
GlooGroup& GlooBackend::world() { return *impl_->world(); }
absl::Status GlooBackend::poison() const { return impl_->poison(); }
size_t GlooBackend::quarantined() const { return impl_->quarantined(); }
void GlooBackend::Poison(const absl::Status& cause) { impl_->Poison(cause); }
void GlooBackend::Abort(const absl::Status& cause) { impl_->Abort(cause); }
absl::Status GlooBackend::Admission(const char* operation) const {
  return impl_->Admission(operation);
}

absl::StatusOr<GlooGroup*> GlooBackend::group(CollectiveGroupId id) {
  std::shared_ptr<GlooGroup> g = impl_->group(id);
  if (g == nullptr) {
    // A group of this rank that the session does not hold (domain_groups.h).
    if (absl::Status held = CheckHeld(kBackend, "resolving a group",
                                      descriptor(), CollectiveScope::Group(id));
        !held.ok()) {
      return held;
    }
    return absl::NotFoundError(absl::StrCat("gloo backend: rank ",
                                            descriptor().rank(),
                                            " is not a member of group ", id));
  }
  return g.get();
}

absl::StatusOr<GlooGroup*> GlooBackend::ResolveGroup(
    const CollectiveScope& scope) {
  if (scope.is_world()) {
    if (impl_->world() == nullptr) {
      return CheckHeld(kBackend, "resolving a scope", descriptor(), scope);
    }
    return &world();
  }
  return group(scope.group_id());
}

absl::StatusOr<GlooRoute> GlooBackend::Route(GlooGroup& group,
                                             uint32_t source_rank,
                                             uint32_t destination_rank) {
  if (group.owner() != impl_.get() || group.lane() != 0) {
    return absl::InvalidArgumentError(
        "gloo backend: route: the group does not belong to this backend");
  }
  auto ends = RouteBetweenRanks(kBackend, "opening a route", group.ToString(),
                                group.members(), source_rank, destination_rank,
                                group.local_rank());
  if (!ends.ok()) return ends.status();
  return GlooRoute(group.shared_from_this(), static_cast<uint32_t>(ends->first),
                   static_cast<uint32_t>(ends->second));
}

absl::Status GlooBackend::Precheck(const char* name, const GlooGroup& group,
                                   const GlooExecutor& executor) const {
  if (absl::Status s = impl_->Admission(name); !s.ok()) return s;
  if (group.owner() != impl_.get() || group.lane() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo backend: ", name, ": the group does not belong to this backend"));
  }
  if (!impl_->Owns(executor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo backend: ", name,
                     ": the executor does not belong to this backend"));
  }
  return RequireCollective(caps_, kBackend, name,
                           group.is_world()
                               ? CollectiveScope::World()
                               : CollectiveScope::Group(group.id()));
}

absl::Status GlooBackend::RefuseWithPeers(
    const char* name, const std::string& op, GlooGroup& group,
    GlooExecutor& executor, AgreementCheck check, const absl::Status& refusal) {
  const bool peers_wait =
      PeersAwaitRecord(group.size(), options().verify_agreement,
                       /*checks_first=*/check == AgreementCheck::kAllToAll);
  if (refusal.ok() || !peers_wait || impl_->poisoned()) return refusal;
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const Milliseconds timeout = Millis(options().op_timeout);
  const bool every_operation_checks = options().verify_agreement;
  // What the peers' check gathers: the fingerprint (and for
  // all_to_all_v, counts, here zeros) of what this member "submitted".
  auto told = executor.Submit(
      name, op, {g},
      [g, check, timeout, every_operation_checks](const std::string& op) {
        if (check == AgreementCheck::kAllToAll) {
          const std::vector<size_t> none(g->size(), 0);
          return internal::VerifyAllToAllCounts(*g, op, kRefusedCanonical, none,
                                                none, timeout,
                                                every_operation_checks);
        }
        return internal::VerifyAgreement(*g, op, kRefusedCanonical, timeout);
      });
  return RefusalAfterTelling(refusal, group.ToString(), /*route=*/false,
                             told.status());
}

absl::Status GlooBackend::RefuseWithPeer(const char* name,
                                         const std::string& op,
                                         const GlooRoute& route,
                                         GlooExecutor& executor,
                                         const absl::Status& refusal) {
  // A route has two members, its two ends.
  if (refusal.ok() || impl_->poisoned() ||
      !PeersAwaitRecord(/*members=*/2, options().verify_agreement,
                        /*checks_first=*/false)) {
    return refusal;
  }
  std::shared_ptr<GlooGroup> g = route.group()->OnLane(executor.lane());
  const uint32_t source = route.source_index();
  const uint32_t destination = route.destination_index();
  const Milliseconds timeout = Millis(options().op_timeout);
  auto told = executor.Submit(
      name, op, {g}, [g, source, destination, timeout](const std::string& op) {
        return internal::ExchangeRouteFingerprints(
            *g, op, g->NextRouteSequence(source, destination), source,
            destination, kRefusedCanonical, timeout);
      });
  return RefusalAfterTelling(refusal, route.ToString(), /*route=*/true,
                             told.status());
}

absl::Status GlooBackend::RefuseBatchWithPeers(
    const char* name, const std::string& op, GlooGroup& group,
    GlooExecutor& executor, absl::Span<const PeerValue<HostTensor>> sends,
    absl::Span<const PeerValue<HostTensor>> receives,
    const absl::Status& refusal) {
  // Each transfer's peer checks it as a route does (its two ends).
  if (refusal.ok() || impl_->poisoned() ||
      !PeersAwaitRecord(group.size(), options().verify_agreement,
                        /*checks_first=*/false)) {
    return refusal;
  }
  // In BatchSendReceiveImpl's order, so that each transfer takes the same
  // number on its route as it would have.
  std::vector<BatchEnd> ends;
  for (const auto* list : {&sends, &receives}) {
    for (const PeerValue<HostTensor>& t : *list) {
      ends.push_back({static_cast<uint32_t>(t.peer), list == &sends});
    }
  }
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const Milliseconds timeout = Millis(options().op_timeout);
  auto told = executor.Submit(
      name, op, {g},
      [g, ends = std::move(ends), timeout](const std::string& op) {
        const std::vector<uint32_t> sequence = NumberBatch(*g, ends);
        std::vector<uint64_t> mine(ends.size(),
                                   OperationFingerprint(kRefusedCanonical));
        std::vector<uint64_t> theirs;
        absl::Status s = ExchangeBatchFingerprints(*g, op, ends, sequence, mine,
                                                   theirs, timeout);
        // The peers' check now fails naming this member; nothing moves.
        if (!s.ok()) return TaskResult::Native(s);
        return TaskResult::Ok();
      });
  return RefusalAfterTelling(refusal, group.ToString(), /*route=*/false,
                             told.status());
}

GlooUnitSubmission GlooBackend::SubmitLocalDependencies(
    absl::Span<const HostTensor* const> values, GlooExecutor& executor) {
  std::vector<std::shared_ptr<const void>> resources;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gloo backend: submit_local_dependencies: value ", i, " is null"));
    }
    resources.push_back(values[i]->resource());
  }
  // Host tensors are evaluated already; the task only orders.
  auto completion =
      executor.Submit("submit_local_dependencies", "submit_local_dependencies",
                      std::move(resources),
                      [](const std::string&) { return TaskResult::Ok(); });
  return Submitted(std::move(completion), Unit{});
}

GlooTensorSubmission GlooBackend::AllReduceSum(const HostTensor& value,
                                               GlooGroup& group,
                                               GlooExecutor& executor) {
  return AllReduceSumImpl("all_reduce_sum", "", value, std::nullopt, group,
                          executor);
}

GlooTensorSubmission GlooBackend::AllReduceSumInto(const HostTensor& value,
                                                   const HostTensor& output,
                                                   GlooGroup& group,
                                                   GlooExecutor& executor) {
  return AllReduceSumImpl("all_reduce_sum", "", value, output, group, executor);
}

GlooTensorSubmission GlooBackend::AllReduceSumImpl(
    const char* name, std::string label, const HostTensor& value,
    std::optional<HostTensor> into, GlooGroup& group, GlooExecutor& executor,
    Caller caller) {
  if (caller == Caller::kBackendSurface) {
    if (absl::Status s = Precheck(name, group, executor); !s.ok()) return s;
  }
  std::string op = Labeled(std::move(label), name, group, executor);
  auto refuse = [&](const absl::Status& refusal) {
    return RefuseWithPeers(name, op, group, executor,
                           AgreementCheck::kCollective, refusal);
  };
  auto kernel = internal::SumKernelFor(value.dtype(), name);
  if (!kernel.ok()) return refuse(kernel.status());
  // A donated sole owner is summed in place (its buffer is the output).
  // Otherwise out of place without a separate copy pass: Gloo copies the
  // input into the output segment by segment inside its ring.
  if (!into.has_value() && value.donated_and_sole_owner()) into = value;
  auto output = OutputFor(op, std::move(into), value.descriptor(), value,
                          /*in_place=*/true);
  if (!output.ok()) return refuse(output.status());
  return SubmitAllReduce(name, std::move(op), value, *output, *kernel, group,
                         executor);
}

GlooTensorSubmission GlooBackend::SubmitAllReduce(
    const char* name, std::string op, const HostTensor& value,
    const HostTensor& output, const internal::SumKernel& kernel,
    GlooGroup& group, GlooExecutor& executor) {
  constexpr char kind[] = "all_reduce_sum";
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const bool in_place = output.SharesBufferWith(value);
  if (g->context() == nullptr) {
    // One member: the sum is the value, with no peer to agree with or
    // pair with, so no description, fingerprint or plan. Local work: it
    // runs at once when the executor is idle (GlooExecutor::Submit), unless
    // a large copy is better overlapped on the executor thread.
    const bool local = in_place || value.byte_size() <= kLocalCopyMaxBytes;
    auto completion = executor.Submit(
        name, std::move(op), {value.resource(), output.resource(), g},
        [value, output, in_place](const std::string&) {
          if (!in_place) {
            std::memcpy(output.data(), value.data(), value.byte_size());
          }
          return TaskResult::Ok();
        },
        local);
    return Submitted(std::move(completion), output);
  }
  std::shared_ptr<const std::string> canonical =
      DescribeOnValueRemembered(kind, value.descriptor());
  if (options().all_reduce_bcube_max_bytes != kDefaultAllReduceBcubeMaxBytes ||
      options().all_reduce_ring_segment_bytes !=
          kDefaultAllReduceRingSegmentBytes) {
    // So that verify_agreement and the diagnosis tell members whose plan
    // options differ apart (the salt below only keeps them from pairing).
    canonical = std::make_shared<const std::string>(
        absl::StrCat(*canonical, " (all_reduce_bcube_max_bytes ",
                     options().all_reduce_bcube_max_bytes,
                     ", all_reduce_ring_segment_bytes ",
                     options().all_reduce_ring_segment_bytes, ")"));
  }
  const internal::AllReducePlan plan = internal::AllReducePlanFor(
      value.byte_size(), options().all_reduce_bcube_max_bytes,
      options().all_reduce_ring_segment_bytes);
  // Members that chose different plans must never pair.
  const uint64_t fingerprint = OperationFingerprint(*canonical) ^ plan.salt();
  // The buffers, not the tensors: the operation retains both until the
  // work finished (HostExecutor::Submit), so the work needs no copy of
  // their descriptors.
  const void* const in = in_place ? nullptr : value.data();
  void* const out = output.data();
  const size_t elements = output.descriptor().element_count();
  auto completion = executor.Submit(
      name, std::move(op), {value.resource(), output.resource(), g},
      [g, in, out, elements, kernel, canonical = std::move(canonical),
       fingerprint, plan, run = SettingsOf(*impl_)](const std::string& op) {
        const Milliseconds timeout = run.timeout;
        return RunCollective(
            *g, run, op, *canonical, fingerprint, [&](uint32_t tag) {
              if (elements == 0) {
                // No rows to sum, but still a collective (docs/contract.md,
                // "Empty values"): it waits for every member, as NCCL's
                // agreement record does, so a member that never submits it is
                // named instead of this one completing alone.
                internal::NativeBarrier(g->context(), tag, timeout);
                return;
              }
              internal::NativeAllReduce(g->context(), in, out, elements, kernel,
                                        tag, timeout, plan);
            });
      });
  return Submitted(std::move(completion), output);
}

GlooTensorSubmission GlooBackend::AllGatherEven(const HostTensor& value,
                                                size_t axis, GlooGroup& group,
                                                GlooExecutor& executor) {
  return AllGatherEvenImpl("all_gather_even", "", value, axis, std::nullopt,
                           group, executor);
}

GlooTensorSubmission GlooBackend::AllGatherEvenImpl(
    const char* name, std::string label, const HostTensor& value, size_t axis,
    std::optional<HostTensor> output, GlooGroup& group, GlooExecutor& executor,
    Caller caller) {
  if (caller == Caller::kBackendSurface) {
    if (absl::Status s = Precheck(name, group, executor); !s.ok()) return s;
  }
  const std::string op = Labeled(std::move(label), name, group, executor);
  auto gathered =
      LayoutEvenGather(value.descriptor(), axis, group.size(), kBackend, op);
  if (!gathered.ok()) {
    return RefuseWithPeers(name, op, group, executor,
                           AgreementCheck::kCollective, gathered.status());
  }
  return SubmitGather("all_gather_even", name, op, value,
                      std::vector<size_t>(group.size(), gathered->input.extent),
                      axis, std::move(output), group, executor);
}

GlooTensorSubmission GlooBackend::AllGatherUneven(
    const HostTensor& value, absl::Span<const size_t> counts, size_t axis,
    GlooGroup& group, GlooExecutor& executor) {
  return AllGatherUnevenImpl(value, counts, axis, std::nullopt, group,
                             executor);
}

GlooTensorSubmission GlooBackend::AllGatherUnevenImpl(
    const HostTensor& value, absl::Span<const size_t> counts, size_t axis,
    std::optional<HostTensor> output, GlooGroup& group,
    GlooExecutor& executor) {
  constexpr char kind[] = "all_gather_uneven";
  if (absl::Status s = Precheck(kind, group, executor); !s.ok()) return s;
  const std::string op = Labeled("", kind, group, executor);
  auto layout =
      LayoutUnevenGather(value.descriptor(), axis, counts, group.size(),
                         group.local_rank(), kBackend, op);
  if (!layout.ok()) {
    return RefuseWithPeers(kind, op, group, executor,
                           AgreementCheck::kCollective, layout.status());
  }
  return SubmitGather(kind, kind, op, value,
                      std::vector<size_t>(counts.begin(), counts.end()), axis,
                      std::move(output), group, executor);
}

GlooTensorSubmission GlooBackend::SubmitGather(
    const char* kind, const char* name, const std::string& op,
    const HostTensor& value, std::vector<size_t> counts, size_t axis,
    std::optional<HostTensor> into, GlooGroup& group, GlooExecutor& executor) {
  const ValueDescriptor& d = value.descriptor();
  auto refuse = [&](const absl::Status& refusal) {
    return RefuseWithPeers(name, op, group, executor,
                           AgreementCheck::kCollective, refusal);
  };
  // The callers checked the counts' sum (LayoutEvenGather,
  // LayoutUnevenGather).
  const size_t total = *CheckedSum(counts);
  auto out_descriptor = WithExtent(d, axis, total, kBackend, op);
  if (!out_descriptor.ok()) return refuse(out_descriptor.status());
  // A scalar gathers as [1].
  const ValueDescriptor in_descriptor =
      d.shape().empty() ? *ValueDescriptor::Create({1}, d.dtype()) : d;
  const AxisLayout layout = *LayoutAlong(in_descriptor, axis, kBackend, op);
  auto made = OutputFor(op, std::move(into), *out_descriptor, value,
                        /*in_place=*/false);
  if (!made.ok()) return refuse(made.status());
  HostTensor output = *std::move(made);
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const std::string canonical =
      DescribeAlongAxis(kind, axis, in_descriptor, counts);
  const uint64_t fingerprint = OperationFingerprint(canonical);
  auto completion = executor.Submit(
      name, op, {value.resource(), output.resource(), g},
      [g, value, output, counts, layout, canonical, fingerprint,
       run = SettingsOf(*impl_)](const std::string& op) {
        if (g->context() == nullptr) {
          std::memcpy(output.data(), value.data(), value.byte_size());
          return TaskResult::Ok();
        }
        std::vector<size_t> bytes(counts.size());
        size_t all = 0;
        for (size_t m = 0; m < counts.size(); ++m) {
          bytes[m] = layout.outer * counts[m] * layout.unit_bytes;
          all += bytes[m];
        }
        // Axis 0 is member-major already; otherwise gather then interleave.
        std::vector<uint8_t> staging(layout.outer == 1 ? 0 : all);
        uint8_t* target = layout.outer == 1 ? output.data() : staging.data();
        TaskResult r = RunCollective(
            *g, run, op, canonical, fingerprint, [&](uint32_t tag) {
              internal::NativeAllGatherV(g->context(), value.data(), target,
                                         bytes, tag, run.timeout);
            });
        if (!r.status.ok()) return r;
        if (layout.outer != 1) {
          Interleave(staging.data(), output.data(), counts, layout, true);
        }
        return TaskResult::Ok();
      });
  return Submitted(std::move(completion), std::move(output));
}

GlooTensorSubmission GlooBackend::VariableAllToAll(const HostTensor& value,
                                                   const PeerCounts& counts,
                                                   size_t axis,
                                                   GlooGroup& group,
                                                   GlooExecutor& executor) {
  return VariableAllToAllImpl("variable_all_to_all", "", value, counts, axis,
                              std::nullopt, group, executor);
}

GlooTensorSubmission GlooBackend::VariableAllToAllImpl(
    const char* name, std::string label, const HostTensor& value,
    const PeerCounts& counts, size_t axis, std::optional<HostTensor> into,
    GlooGroup& group, GlooExecutor& executor, Caller caller) {
  constexpr char kind[] = "variable_all_to_all";
  if (caller == Caller::kBackendSurface) {
    if (absl::Status s = Precheck(name, group, executor); !s.ok()) return s;
    if (absl::Status s = RequireCapability(caps_.variable_all_to_all, kBackend,
                                           name, "variable_all_to_all");
        !s.ok()) {
      return s;
    }
  }
  const std::string op = Labeled(std::move(label), name, group, executor);
  const ValueDescriptor& d = value.descriptor();
  // The count matrix is always checked first: the peers wait for this
  // member's record.
  auto refuse = [&](const absl::Status& refusal) {
    return RefuseWithPeers(name, op, group, executor, AgreementCheck::kAllToAll,
                           refusal);
  };
  auto planned = LayoutAllToAll(d, axis, counts.send, counts.receive,
                                group.size(), group.local_rank(), kBackend, op);
  if (!planned.ok()) return refuse(planned.status());
  const AxisLayout layout = planned->input;
  // Every byte of the output is received or copied.
  auto made = OutputFor(op, std::move(into), planned->output, value,
                        /*in_place=*/false);
  if (!made.ok()) return refuse(made.status());
  HostTensor output = *std::move(made);
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const std::string canonical = DescribeAlongAxis(kind, axis, d);
  const uint64_t fingerprint = OperationFingerprint(canonical);
  const Milliseconds timeout = Millis(options().op_timeout);
  const bool every_operation_checks = options().verify_agreement;
  auto completion = executor.Submit(
      name, op, {value.resource(), output.resource(), g},
      [g, value, output, counts, layout, canonical, fingerprint, timeout,
       every_operation_checks,
       diagnosis = impl_->diagnosis()](const std::string& op) {
        if (g->context() == nullptr) {
          std::memcpy(output.data(), value.data(), value.byte_size());
          return TaskResult::Ok();
        }
        // Always: no member knows the whole count matrix, so no tag can
        // carry it, and a message longer than the receive posted for it
        // would end the process on Gloo's I/O thread.
        TaskResult check = internal::VerifyAllToAllCounts(
            *g, op, canonical, counts.send, counts.receive, timeout,
            every_operation_checks);
        if (!check.status.ok()) return check;
        const size_t n = counts.send.size();
        std::vector<int64_t> send_bytes(n), recv_bytes(n);
        for (size_t p = 0; p < n; ++p) {
          send_bytes[p] = layout.outer * counts.send[p] * layout.unit_bytes;
          recv_bytes[p] = layout.outer * counts.receive[p] * layout.unit_bytes;
        }
        const bool direct = layout.outer == 1;
        std::vector<uint8_t> packed, staging;
        if (!direct) {
          packed.resize(value.byte_size());
          Interleave(value.data(), packed.data(), counts.send, layout, false);
          staging.resize(output.byte_size());
        }
        const uint32_t sequence = g->NextSequence();
        const uint32_t tag = OperationTag(sequence, fingerprint);
        TaskResult r = RunNative(
            *diagnosis, [&] { return OnGroup(*g); }, sequence, op, canonical,
            [&] {
              internal::NativeAllToAllV(
                  g->context(), direct ? value.data() : packed.data(),
                  send_bytes, direct ? output.data() : staging.data(),
                  recv_bytes, tag, timeout);
            });
        if (!r.status.ok()) return r;
        if (!direct) {
          Interleave(staging.data(), output.data(), counts.receive, layout,
                     true);
        }
        return TaskResult::Ok();
      });
  return Submitted(std::move(completion), std::move(output));
}

GlooTensorSubmission GlooBackend::Broadcast(const HostTensor& value,
                                            size_t root_member_index,
                                            GlooGroup& group,
                                            GlooExecutor& executor) {
  return BroadcastImpl(value, root_member_index, std::nullopt, group, executor);
}

GlooTensorSubmission GlooBackend::BroadcastImpl(const HostTensor& value,
                                                size_t root_member_index,
                                                std::optional<HostTensor> into,
                                                GlooGroup& group,
                                                GlooExecutor& executor) {
  constexpr char kind[] = "broadcast";
  if (absl::Status s = Precheck(kind, group, executor); !s.ok()) return s;
  const std::string op = Labeled("", kind, group, executor);
  auto refuse = [&](const absl::Status& refusal) {
    return RefuseWithPeers(kind, op, group, executor,
                           AgreementCheck::kCollective, refusal);
  };
  if (root_member_index >= group.size()) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        "gloo backend: ", op, ": root member index ", root_member_index,
        " is outside the group's ", group.size(), " members")));
  }
  const bool root = root_member_index == group.local_rank();
  // The root's output starts as a copy of its value (unless it is the
  // value's own buffer); the others' is overwritten by the broadcast.
  auto made = OutputFor(op, std::move(into), value.descriptor(), value,
                        /*in_place=*/true);
  if (!made.ok()) return refuse(made.status());
  HostTensor output = *std::move(made);
  const bool copy_in = root && !output.SharesBufferWith(value);
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const std::string canonical =
      DescribeRooted(kind, root_member_index, value.descriptor());
  const uint64_t fingerprint = OperationFingerprint(canonical);
  const int root_index = static_cast<int>(root_member_index);
  auto completion = executor.Submit(
      kind, op, {value.resource(), output.resource(), g},
      [g, value, output, copy_in, root_index, canonical, fingerprint,
       run = SettingsOf(*impl_)](const std::string& op) {
        if (copy_in) {
          std::memcpy(output.data(), value.data(), value.byte_size());
        }
        if (g->context() == nullptr) return TaskResult::Ok();
        return RunCollective(
            *g, run, op, canonical, fingerprint, [&](uint32_t tag) {
              internal::NativeBroadcast(g->context(), output.data(),
                                        output.byte_size(), root_index, tag,
                                        run.timeout);
            });
      });
  return Submitted(std::move(completion), std::move(output));
}

GlooUnitSubmission GlooBackend::Barrier(GlooGroup& group,
                                        GlooExecutor& executor) {
  constexpr char kind[] = "barrier";
  if (absl::Status s = Precheck(kind, group, executor); !s.ok()) return s;
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const std::string op = Labeled("", kind, group, executor);
  auto completion = executor.Submit(
      kind, op, {g}, [g, run = SettingsOf(*impl_)](const std::string& op) {
        if (g->context() == nullptr) return TaskResult::Ok();
        return RunCollective(
            *g, run, op, "barrier", OperationFingerprint("barrier"),
            [&](uint32_t tag) {
              internal::NativeBarrier(g->context(), tag, run.timeout);
            });
      });
  return Submitted(std::move(completion), Unit{});
}

GlooAgreementSubmission GlooBackend::AgreeSuccess(bool success,
                                                  GlooGroup& group,
                                                  GlooExecutor& executor) {
  constexpr char kind[] = "agree_success";
  if (absl::Status s = Precheck(kind, group, executor); !s.ok()) return s;
  auto state = std::make_shared<GlooAgreement::State>();
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  const std::string op = Labeled("", kind, group, executor);
  auto completion = executor.Submit(
      kind, op, {g, state},
      [g, state, success, run = SettingsOf(*impl_)](const std::string& op) {
        // Count the false votes: the agreement holds iff there are none.
        uint32_t false_votes = success ? 0 : 1;
        if (g->context() != nullptr) {
          auto kernel =
              *internal::SumKernelFor(TensorDtype::kU32, "agree_success");
          TaskResult r = RunCollective(
              *g, run, op, "agree_success",
              OperationFingerprint("agree_success"), [&](uint32_t tag) {
                internal::NativeAllReduce(g->context(), nullptr, &false_votes,
                                          1, kernel, tag, run.timeout,
                                          internal::AllReducePlan{});
              });
          if (!r.status.ok()) return r;
        }
        absl::MutexLock lock(&state->mu);
        state->value = false_votes == 0;
        return TaskResult::Ok();
      });
  if (!completion.ok()) return completion.status();
  auto agreement = std::make_shared<const GlooAgreement>(state, *completion);
  return Submission<std::shared_ptr<const Agreement>, GlooCompletionPtr>{
      std::move(agreement), *std::move(completion)};
}

absl::Status GlooBackend::CheckDestination(const char* name,
                                           const GlooRoute& route) const {
  // A route of another backend is refused by SubmitBundle.
  const GlooGroup* g = route.group().get();
  if (g == nullptr || g->owner() != impl_.get()) return absl::OkStatus();
  return CheckRouteDestination(kBackend, name, g->ToString(), g->members(),
                               route.source_index(), route.destination_index(),
                               g->local_rank());
}

GlooBundleSubmission GlooBackend::SendReceive(
    absl::Span<const HostTensor> tensors, const GlooRoute& route,
    GlooExecutor& executor) {
  if (route.group() != nullptr && route.group()->rank() == route.source()) {
    return SubmitBundle("send_receive", "", tensors, {}, {}, route, executor);
  }
  std::vector<ValueDescriptor> descriptors;
  for (const HostTensor& t : tensors) descriptors.push_back(t.descriptor());
  return SubmitBundle("send_receive", "", {}, descriptors, {}, route, executor);
}

GlooBundleSubmission GlooBackend::ReceiveBundle(
    absl::Span<const ValueDescriptor> descriptors, const GlooRoute& route,
    GlooExecutor& executor) {
  if (absl::Status s = CheckDestination("receive_bundle", route); !s.ok()) {
    return s;
  }
  return SubmitBundle("send_receive", "", {}, descriptors, {}, route, executor);
}

GlooBundleSubmission GlooBackend::ReceiveBundleInto(
    absl::Span<const HostTensor> outputs, const GlooRoute& route,
    GlooExecutor& executor) {
  if (absl::Status s = CheckDestination("receive_bundle_into", route);
      !s.ok()) {
    return s;
  }
  std::vector<ValueDescriptor> descriptors;
  for (const HostTensor& t : outputs) descriptors.push_back(t.descriptor());
  return SubmitBundle("send_receive", "", {}, descriptors, outputs, route,
                      executor);
}

GlooBundleSubmission GlooBackend::SubmitBundle(
    const char* name, std::string label, absl::Span<const HostTensor> send,
    absl::Span<const ValueDescriptor> receive,
    absl::Span<const HostTensor> receive_into, const GlooRoute& route,
    GlooExecutor& executor, Caller caller) {
  if (caller == Caller::kBackendSurface) {
    if (absl::Status s = impl_->Admission(name); !s.ok()) return s;
    if (route.group() == nullptr || route.group()->owner() != impl_.get() ||
        route.group()->lane() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gloo backend: ", name,
                       ": the route does not belong to this backend"));
    }
    if (!impl_->Owns(executor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gloo backend: ", name,
                       ": the executor does not belong to this backend"));
    }
    if (absl::Status s = RequireCapability(caps_.point_to_point, kBackend, name,
                                           "point_to_point");
        !s.ok()) {
      return s;
    }
  }
  std::shared_ptr<GlooGroup> g = route.group()->OnLane(executor.lane());
  const std::string op = label.empty()
                             ? absl::StrCat(name, " on ",
                                            GlooRoute(g, route.source_index(),
                                                      route.destination_index())
                                                .ToString())
                             : std::move(label);
  const bool is_source = g->rank() == route.source();
  const size_t count = is_source ? send.size() : receive.size();
  if (absl::Status s = CheckBundleSize(kBackend, op, count); !s.ok()) {
    return RefuseWithPeer(name, op, route, executor, s);
  }
  std::vector<HostTensor> tensors;
  std::vector<ValueDescriptor> described;
  std::vector<std::shared_ptr<const void>> resources = {g};
  if (is_source) {
    for (const HostTensor& t : send) {
      tensors.push_back(t);
      described.push_back(t.descriptor());
      resources.push_back(t.resource());
    }
  } else {
    if (!receive_into.empty()) {
      if (absl::Status s =
              CheckBundleOutputs(kBackend, op, receive_into, receive.size());
          !s.ok()) {
        return RefuseWithPeer(name, op, route, executor, s);
      }
    }
    for (size_t i = 0; i < receive.size(); ++i) {
      tensors.push_back(receive_into.empty()
                            ? HostTensor::Uninitialized(receive[i])
                            : receive_into[i]);
      described.push_back(receive[i]);
      resources.push_back(tensors.back().resource());
    }
  }
  const std::string canonical = DescribeBundle(described);
  const uint64_t fingerprint = OperationFingerprint(canonical);
  const bool verify = options().verify_agreement;
  const Milliseconds timeout = Millis(options().op_timeout);
  const uint32_t source = route.source_index();
  const uint32_t destination = route.destination_index();
  auto completion = executor.Submit(
      name, op, std::move(resources),
      [g, tensors, is_source, source, destination, canonical, fingerprint,
       verify, timeout, diagnosis = impl_->diagnosis(),
       scope = OnRoute(
           GlooRoute(g, route.source_index(), route.destination_index()))](
          const std::string& op) {
        const uint32_t sequence = g->NextRouteSequence(source, destination);
        const bool ascending = source < destination;
        const int peer = static_cast<int>(is_source ? destination : source);
        if (verify) {
          // Each end tells the other what it expects; both compare.
          TaskResult r = internal::ExchangeRouteFingerprints(
              *g, op, sequence, source, destination, canonical, timeout);
          if (!r.status.ok()) return r;
        }
        // Bundles that differ get different slots: they never pair.
        const uint32_t tag = OperationTag(sequence, fingerprint);
        // Every tensor is a message, an empty one for a value with no rows,
        // and an empty bundle is one empty message: a transfer completes
        // only with its peer's, so one the peer never makes times out
        // naming it instead of completing alone, and the route's numbers
        // stay in step (docs/contract.md, "Empty values").
        const size_t pieces = std::max<size_t>(tensors.size(), 1);
        for (size_t i = 0; i < pieces; ++i) {
          uint8_t* data = i < tensors.size() ? tensors[i].data() : nullptr;
          const size_t bytes = i < tensors.size() ? tensors[i].byte_size() : 0;
          const uint64_t slot =
              internal::RouteSlot(ascending, tag, static_cast<uint16_t>(2 + i));
          TaskResult r = RunNative(
              *diagnosis, [&] { return scope; }, sequence, op, canonical,
              [&] {
                if (is_source) {
                  internal::NativeSend(g->context(), peer, slot, data, bytes,
                                       timeout);
                } else {
                  internal::NativeRecv(g->context(), peer, slot, data, bytes,
                                       timeout);
                }
              });
          if (!r.status.ok()) return r;
        }
        return TaskResult::Ok();
      });
  return Submitted(std::move(completion), std::move(tensors));
}

GlooBundleSubmission GlooBackend::BatchSendReceive(
    absl::Span<const PeerValue<HostTensor>> sends,
    absl::Span<const PeerValue<HostTensor>> receives, GlooGroup& group,
    GlooExecutor& executor) {
  return BatchSendReceiveImpl("batch_send_receive", "", sends, receives, group,
                              executor);
}

GlooBundleSubmission GlooBackend::BatchSendReceiveImpl(
    const char* name, std::string label,
    absl::Span<const PeerValue<HostTensor>> sends,
    absl::Span<const PeerValue<HostTensor>> receives, GlooGroup& group,
    GlooExecutor& executor, Caller caller) {
  if (caller == Caller::kBackendSurface) {
    if (absl::Status s = Precheck(name, group, executor); !s.ok()) return s;
    if (absl::Status s = RequireCapability(caps_.point_to_point, kBackend, name,
                                           "point_to_point");
        !s.ok()) {
      return s;
    }
  }
  const std::string op = Labeled(std::move(label), name, group, executor);
  // Its peers first: a batch whose peers are wrong names no one to tell.
  if (absl::Status s =
          CheckBatchPeers(sends, receives, group.size(), group.local_rank(),
                          group.ToString(), kBackend, op);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckBatchBuffers(sends, receives, kBackend, op);
      !s.ok()) {
    return RefuseBatchWithPeers(name, op, group, executor, sends, receives, s);
  }
  // What each transfer is, as the peer's single-tensor SendReceive
  // describes it, so either form pairs with the other.
  struct Transfer {
    uint32_t peer;  // member index
    bool send;
    HostTensor tensor;
    std::string canonical;
  };
  std::vector<Transfer> transfers;
  std::vector<std::shared_ptr<const void>> resources;
  std::vector<HostTensor> received;
  for (const auto* list : {&sends, &receives}) {
    for (const PeerValue<HostTensor>& t : *list) {
      transfers.push_back({static_cast<uint32_t>(t.peer), list == &sends,
                           t.value, DescribeBundle({t.value.descriptor()})});
      resources.push_back(t.value.resource());
      if (list == &receives) received.push_back(t.value);
    }
  }
  std::shared_ptr<GlooGroup> g = group.OnLane(executor.lane());
  resources.push_back(g);
  const bool verify = options().verify_agreement;
  const Milliseconds timeout = Millis(options().op_timeout);
  auto completion = executor.Submit(
      name, op, std::move(resources),
      [g, transfers = std::move(transfers), verify, timeout,
       diagnosis = impl_->diagnosis()](const std::string& op) {
        using internal::PostedTransfer;
        using internal::RouteSlot;
        const uint32_t me = g->local_rank();
        const size_t n = transfers.size();
        std::vector<BatchEnd> ends;
        for (const Transfer& t : transfers) ends.push_back({t.peer, t.send});
        // Route order: every transfer takes the next number of its route.
        const std::vector<uint32_t> sequence = NumberBatch(*g, ends);
        std::vector<uint64_t> fingerprint(n);
        for (size_t i = 0; i < n; ++i) {
          fingerprint[i] = OperationFingerprint(transfers[i].canonical);
        }
        auto ascending = [&](const Transfer& t) {
          return t.send ? me < t.peer : t.peer < me;
        };
        std::vector<bool> agreed(n, true);
        absl::Status verdict;
        if (verify) {
          std::vector<uint64_t> mine = fingerprint;
          std::vector<uint64_t> theirs;
          absl::Status s = ExchangeBatchFingerprints(*g, op, ends, sequence,
                                                     mine, theirs, timeout);
          if (!s.ok()) return TaskResult::Native(s);
          std::vector<TransferRecord> records;
          for (size_t i = 0; i < n; ++i) {
            const Transfer& t = transfers[i];
            records.push_back({t.peer, g->members()[t.peer], t.send,
                               t.canonical, mine[i], theirs[i]});
          }
          std::vector<bool> disagreeing;
          verdict =
              TransfersVerdict(absl::StrCat("gloo ", op), records,
                               VerdictPoint::kBeforePayload, &disagreeing);
          for (size_t i = 0; i < n; ++i) agreed[i] = !disagreeing[i];
        }
        // The payloads; a transfer the ends disagreed on moves nothing, the
        // others still move so that every peer stays in step. A value with
        // no rows moves as an empty message, so that it pairs like any
        // other (docs/contract.md, "Empty values").
        std::vector<PostedTransfer> payloads;
        for (size_t i = 0; i < n; ++i) {
          const Transfer& t = transfers[i];
          if (!agreed[i]) continue;
          const uint32_t tag = OperationTag(sequence[i], fingerprint[i]);
          payloads.push_back({static_cast<int>(t.peer),
                              RouteSlot(ascending(t), tag, 2), t.tensor.data(),
                              t.tensor.byte_size(), t.send});
        }
        if (!payloads.empty()) {
          // A failure is diagnosed on the batch's first receive (its first
          // send when it receives nothing), as NCCL's is.
          size_t named = 0;
          while (named < n && transfers[named].send) ++named;
          if (named == n) named = 0;
          const Transfer& first = transfers[named];
          GlooRoute route(g, first.send ? me : first.peer,
                          first.send ? first.peer : me);
          TaskResult r = RunNative(
              *diagnosis, [&] { return OnRoute(route); }, sequence[named], op,
              first.canonical,
              [&] {
                internal::NativeTransfers(g->context(), payloads, timeout);
              });
          if (!r.status.ok()) return r;
        }
        if (!verdict.ok()) return TaskResult::Agreed(std::move(verdict));
        return TaskResult::Ok();
      });
  return Submitted(std::move(completion), std::move(received));
}

GlooTensorSubmission GlooBackend::AllGatherEvenInto(const HostTensor& value,
                                                    size_t axis,
                                                    const HostTensor& output,
                                                    GlooGroup& group,
                                                    GlooExecutor& executor) {
  return AllGatherEvenImpl("all_gather_even", "", value, axis, output, group,
                           executor);
}

GlooTensorSubmission GlooBackend::AllGatherUnevenInto(
    const HostTensor& value, absl::Span<const size_t> counts, size_t axis,
    const HostTensor& output, GlooGroup& group, GlooExecutor& executor) {
  return AllGatherUnevenImpl(value, counts, axis, output, group, executor);
}

GlooTensorSubmission GlooBackend::VariableAllToAllInto(
    const HostTensor& value, const PeerCounts& counts, size_t axis,
    const HostTensor& output, GlooGroup& group, GlooExecutor& executor) {
  return VariableAllToAllImpl("variable_all_to_all", "", value, counts, axis,
                              output, group, executor);
}

GlooTensorSubmission GlooBackend::BroadcastInto(const HostTensor& value,
                                                size_t root_member_index,
                                                const HostTensor& output,
                                                GlooGroup& group,
                                                GlooExecutor& executor) {
  return BroadcastImpl(value, root_member_index, output, group, executor);
}

}  // namespace rankd::dataplane::gloo
