#include "dataplane/gloo/internal/session_impl.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "dataplane/domain_groups.h"
#include "dataplane/gloo/internal/gloo_abort.h"
#include "dataplane/gloo/internal/mesh_context.h"
#include "dataplane/gloo/internal/native_ops.h"
#include "dataplane/gloo/internal/rankd_store.h"
#include "gloo/transport/tcp/device.h"

namespace rankd::dataplane::gloo::internal {
namespace {

using internal::CatchNative;

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Gloo writes to sockets without MSG_NOSIGNAL: a write to a peer that died
// would raise SIGPIPE and kill the process. Ignore it unless the process
// installed its own handler.
void IgnoreSigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
      current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

absl::Status Scoped(const std::string& operation, const absl::Status& cause) {
  return absl::Status(cause.code(), absl::StrCat("gloo ", operation,
                                                 " failed: ", cause.message()));
}

}  // namespace

SessionImpl::SessionImpl(ControlPlane* control_plane,
                         DistributedSessionDescriptor descriptor,
                         GlooSessionOptions options)
    : control_plane_(control_plane),
      descriptor_(std::move(descriptor)),
      options_(std::move(options)),
      diagnosis_(std::make_shared<const MismatchDiagnosis>(
          control_plane_,
          RankdStore::Prefix(control_plane_->Namespace(), *options_.instance,
                             "diagnosis"),
          options_.failure_attribution_grace, descriptor_.epoch())),
      watchdog_(
          Watchdog::Options{
              "gloo", options_.watchdog_interval, options_.op_timeout,
              kAbortEffect,
              // Gloo's own failure path may wait twice the grace: for the
              // peers' reports, then for the control plane's notice.
              2 * options_.failure_attribution_grace + absl::Seconds(1)},
          &ledger_, diagnosis_.get(), &watchdog_session_) {
  for (uint32_t lane = 0; lane < options_.executors; ++lane) {
    executors_.push_back(std::make_unique<GlooExecutor>("gloo", lane));
  }
}

SessionImpl::~SessionImpl() { Shutdown(); }

absl::StatusOr<std::shared_ptr<SessionImpl>> SessionImpl::Create(
    ControlPlane* control_plane, DistributedSessionDescriptor descriptor,
    GlooSessionOptions options) {
  if (control_plane == nullptr) {
    return absl::InvalidArgumentError("gloo backend: no control plane");
  }
  if (options.connect_timeout <= absl::ZeroDuration() ||
      options.op_timeout <= absl::ZeroDuration() ||
      options.words_timeout <= absl::ZeroDuration() ||
      options.watchdog_interval <= absl::ZeroDuration() ||
      options.all_reduce_ring_segment_bytes == 0) {
    return absl::InvalidArgumentError(
        "gloo backend: connect_timeout, op_timeout, words_timeout, "
        "watchdog_interval and all_reduce_ring_segment_bytes must be "
        "positive");
  }
  if (options.executors < 1 || options.executors > kMaxGlooExecutors) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo backend: executors must be 1 to ", kMaxGlooExecutors,
                     "; got ", options.executors));
  }
  if (absl::Status health = control_plane->JobHealth(); !health.ok()) {
    return health;
  }
  if (!options.instance.has_value()) {
    auto number = NextSessionNumber(
        *control_plane,
        OwnedKey(descriptor.rank(),
                 absl::StrCat(RankdStore::Prefix(control_plane->Namespace(), 0,
                                                 "sessions"),
                              descriptor.rank()),
                 descriptor.epoch()),
        "gloo");
    if (!number.ok()) return number.status();
    options.instance = *number;
  }
  IgnoreSigpipe();
  std::shared_ptr<SessionImpl> comm(new SessionImpl(
      control_plane, std::move(descriptor), std::move(options)));
  for (auto& executor : comm->executors_) executor->Bind(comm);

  ::gloo::transport::tcp::attr attr;
  if (!comm->options_.interface.empty()) {
    attr.iface = comm->options_.interface;
  } else {
    attr.hostname = comm->options_.hostname;
  }
  absl::Status device_status = CatchNative(
      absl::StrCat("gloo backend: creating the TCP device on ",
                   comm->options_.interface.empty() ? comm->options_.hostname
                                                    : comm->options_.interface),
      [&] { comm->device_ = ::gloo::transport::tcp::CreateDevice(attr); });
  if (!device_status.ok()) return device_status;

  const DistributedSessionDescriptor& d = comm->descriptor_;
  std::vector<uint32_t> everyone(d.world_size());
  std::iota(everyone.begin(), everyone.end(), 0u);
  // Only the groups the session holds (domain_groups.h: under recovery by
  // domain, those inside the rank's domain, never the world).
  std::vector<const CollectiveGroupDescriptor*> sorted = HeldGroups(d);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->id() < b->id(); });
  const CollectiveGroupDescriptor* world_group = nullptr;
  for (const auto* g : sorted) {
    if (g->id() == kWorldGroupId && g->members() == everyone) world_group = g;
  }
  // Without a group 1 holding every rank, the world gets its own context.
  // Lane 0 keeps the rendezvous names of a one-executor
  // session; lane e appends ".e<e>".
  const uint32_t lanes = comm->executor_count();
  // One group to connect: its rendezvous name, this rank's place in it,
  // its members and its descriptor (null for a world of its own).
  struct Pending {
    std::string name;
    uint32_t rank;
    std::vector<uint32_t> members;
    const CollectiveGroupDescriptor* descriptor;
    absl::StatusOr<std::shared_ptr<GlooGroup>> group =
        absl::UnknownError("not connected");
  };
  std::vector<Pending> pending;
  if (world_group == nullptr && HoldsWorld(d)) {
    pending.push_back({"world", d.rank(), everyone, nullptr});
  }
  for (const auto* g : sorted) {
    pending.push_back(
        {absl::StrCat(g->id()), g->local_rank(), g->members(), g});
  }
  // Connects one group on every lane.
  auto connect = [&comm, lanes, world_group](Pending& p) {
    const bool world = p.descriptor == nullptr || p.descriptor == world_group;
    const uint32_t id =
        p.descriptor == nullptr ? kWorldGroupId : p.descriptor->id();
    std::shared_ptr<GlooGroup> group;
    for (uint32_t lane = 0; lane < lanes; ++lane) {
      auto context = comm->Connect(p.name, lane, p.rank, p.members);
      if (!context.ok()) {
        p.group = context.status();
        return;
      }
      if (lane == 0) {
        group = std::make_shared<GlooGroup>(comm.get(), id, world, p.members,
                                            p.rank, *std::move(context));
      } else {
        group->AddLane(*std::move(context));
      }
    }
    p.group = std::move(group);
  };
  // Every group at once, each on a thread of its own (a rank holds a few:
  // one per parallel dimension, and the world). One after another, each
  // group's full-mesh connect waited for members still busy with their
  // previous group, a convoy that cost a re-form about as much again as
  // the slowest group (docs/dataplane.md, "Connecting").
  {
    std::vector<std::thread> threads;
    for (size_t i = 1; i < pending.size(); ++i) {
      threads.emplace_back(connect, std::ref(pending[i]));
    }
    if (!pending.empty()) connect(pending[0]);
    for (auto& t : threads) t.join();
  }
  for (Pending& p : pending) {
    if (!p.group.ok()) return p.group.status();
  }
  for (Pending& p : pending) {
    if (p.descriptor == nullptr) {
      comm->world_ = *std::move(p.group);
      continue;
    }
    if (p.descriptor == world_group) comm->world_ = *p.group;
    comm->groups_.push_back(*std::move(p.group));
  }

  // A job failure notice aborts at once, on the notifying thread (aborting
  // Gloo contexts waits for peers never, for a tick of Gloo's event loop at
  // most: gloo_abort.h), so that the next submission is refused;
  // the watchdog polls JobHealth() for a notice that never comes.
  std::weak_ptr<SessionImpl> weak = comm;
  control_plane->OnJobFailureWhileAlive(
      [weak](const absl::Status& failure) {
        if (auto c = weak.lock()) c->Abort(failure);
      },
      weak);
  comm->watchdog_.Start();
  return comm;
}

absl::StatusOr<std::shared_ptr<::gloo::Context>> SessionImpl::Connect(
    const std::string& name, uint32_t lane, uint32_t rank,
    const std::vector<uint32_t>& members) {
  const uint32_t size = static_cast<uint32_t>(members.size());
  if (size <= 1) return std::shared_ptr<::gloo::Context>();
  auto context = std::make_shared<MeshContext>(static_cast<int>(rank),
                                               static_cast<int>(size));
  context->setTimeout(Millis(options_.connect_timeout));
  RankdStore store(
      control_plane_,
      RankdStore::Prefix(control_plane_->Namespace(), *options_.instance,
                         lane == 0 ? name : absl::StrCat(name, ".e", lane)),
      options_.connect_timeout, members, descriptor_.epoch());
  absl::Status s = CatchNative(
      absl::StrCat("gloo backend: connecting ",
                   name == "world" ? name : absl::StrCat("group ", name),
                   lane == 0 ? "" : absl::StrCat(" on executor ", lane), " (",
                   size, " members, this rank is member ", rank, ")"),
      [&] {
        std::shared_ptr<::gloo::transport::Device> device = device_;
        // A failure notice stops the connect at once: a pair whose peer
        // died would otherwise wait for Gloo's connect timeout.
        context->ConnectFullMesh(
            store, device, [this] { return control_plane_->JobHealth(); });
      });
  if (!s.ok()) {
    // Prefer the job's failure (naming the lost rank) when there is one.
    absl::Status health = control_plane_->JobHealth();
    if (!health.ok()) {
      // A connect the failure stopped already carries its words.
      if (absl::StrContains(s.message(), health.message())) {
        return absl::Status(health.code(), s.message());
      }
      return absl::Status(health.code(),
                          absl::StrCat(s.message(), ": ", health.message()));
    }
    return s;
  }
  // Every operation's waits, including those that carry no timeout of
  // their own (bcube's), are bounded by op_timeout from now on.
  internal::SetTransportTimeout(*context, Millis(options_.op_timeout));
  return std::shared_ptr<::gloo::Context>(std::move(context));
}

bool SessionImpl::idle() const {
  for (const auto& executor : executors_) {
    if (!executor->idle()) return false;
  }
  return true;
}

void SessionImpl::Shutdown() {
  if (shut_down_.exchange(true)) return;
  watchdog_.Stop();
  if (!idle()) {
    const absl::Status cause = absl::CancelledError(
        "gloo backend: the session was destroyed with work in flight");
    poison_.Poison(cause);
    AbortAll(std::string(cause.message()));
  }
  for (auto& executor : executors_) {
    executor->Shutdown(
        absl::CancelledError("gloo backend: the session was destroyed"));
  }
}

std::shared_ptr<GlooGroup> SessionImpl::group(CollectiveGroupId id) const {
  for (const auto& g : groups_) {
    if (g->id() == id) return g;
  }
  return nullptr;
}

void SessionImpl::AbortAll(const std::string& reason) {
  // First: an operation failing because of this abort must not wait for
  // peers to explain it.
  diagnosis_->NoteLocalAbort();
  aborted_.store(true);
  const std::string message = absl::StrCat("aborted by rankd: ", reason);
  // Every context of every group and lane at once (gloo_abort.h: one by
  // one, each pair's close waits for a tick of Gloo's event loop).
  std::vector<::gloo::Context*> contexts;
  auto add = [&](const std::shared_ptr<GlooGroup>& g) {
    if (g == nullptr) return;
    contexts.push_back(g->context().get());
    for (const auto& lane : g->lanes()) {
      if (lane != nullptr) contexts.push_back(lane->context().get());
    }
  };
  add(world_);
  for (const auto& g : groups_) {
    if (g != world_) add(g);
  }
  // Runs on control-plane and executor threads: never let Gloo throw here.
  CatchNative("gloo backend: abort", [&] {
    internal::AbortGlooContexts(contexts, message);
  }).IgnoreError();
  // Queued work is now refused without running: no caller needs to take it.
  for (auto& executor : executors_) executor->StartHeld();
}

void SessionImpl::Abort(const absl::Status& cause) {
  if (cause.ok()) return;
  poison_.Poison(cause);
  AbortAll(std::string(poison_.cause().message()));
}

absl::Status SessionImpl::Admission(const char* operation) const {
  if (absl::Status s = poison_.Check("gloo", operation); !s.ok()) return s;
  return quarantine_.Fence("gloo");
}

absl::Status SessionImpl::BeforeRun(const std::string& operation) const {
  // Poison alone only latches: work submitted before it is still good and
  // runs, as NCCL's, already on its stream, does (docs/contract.md). Once
  // the contexts are aborted nothing queued can run.
  if (!aborted_.load()) return absl::OkStatus();
  return absl::Status(
      poison_.cause().code(),
      absl::StrCat("gloo ", operation,
                   " not run: session poisoned by an earlier failure: ",
                   poison_.cause().message()));
}

absl::Status SessionImpl::OnNativeFailure(const std::string& operation,
                                          const absl::Status& error,
                                          bool explained) {
  if (!poison_.poisoned()) {
    // A lost peer usually shows up here as a closed socket a little before
    // the control plane's notice, which names it: wait briefly for that.
    // Not for an explained failure (a disagreement MismatchDiagnosis proved
    // while the job was healthy): there is nothing left to attribute.
    const absl::Time deadline =
        explained ? MonotonicNow()
                  : MonotonicNow() + options_.failure_attribution_grace;
    absl::Status health = control_plane_->JobHealth();
    while (health.ok() && !poison_.poisoned() && MonotonicNow() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
      health = control_plane_->JobHealth();
    }
    if (!health.ok()) {
      poison_.Poison(absl::Status(
          health.code(), absl::StrCat(health.message(), " (gloo transport: ",
                                      error.message(), ")")));
    } else {
      poison_.Poison(error);
    }
  }
  // Make the peers' pending operations fail promptly too.
  AbortAll(std::string(poison_.cause().message()));
  return Scoped(operation, poison_.cause());
}

void SessionImpl::Track(const std::shared_ptr<Operation>& op) {
  ledger_.Add(op, MonotonicNow() + options_.op_timeout, SubmittedOperation{},
              /*records_sequence=*/false);
}

void SessionImpl::WorkFinished() { quarantine_.Notify(); }

void SessionImpl::RunIfNext(const std::shared_ptr<Operation>& op) {
  for (auto& executor : executors_) {
    if (executor->RunIfNext(op)) return;
  }
}

void SessionImpl::StartHeld(const std::shared_ptr<Operation>&) {
  for (auto& executor : executors_) executor->StartHeld();
}

bool SessionImpl::SupportsQuarantine() const {
  return !options_.restrict_capabilities.has_value() ||
         options_.restrict_capabilities->exact_completion;
}

bool SessionImpl::CancelNative(const absl::Status& cause) {
  poison_.Poison(cause);
  AbortAll(std::string(poison_.cause().message()));
  // The running operation now fails at once and queued ones are refused;
  // Gloo's own op timeout bounds anything the abort could not wake.
  const absl::Time until =
      MonotonicNow() + options_.op_timeout + absl::Seconds(5);
  bool unwound = true;
  for (auto& executor : executors_) {
    unwound = executor->WaitIdle(
                  std::max(until - MonotonicNow(), absl::ZeroDuration())) &&
              unwound;
  }
  return unwound;
}

}  // namespace rankd::dataplane::gloo::internal
