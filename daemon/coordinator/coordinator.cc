#include "daemon/coordinator/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/error_reason.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "common/rank_list.h"
#include "daemon/request_limits.h"

namespace rankd {
namespace {

std::string NodeName(uint32_t index, const v1::NodeInfo& info) {
  if (info.hostname().empty()) return absl::StrCat("node ", index);
  return absl::StrCat("node ", index, " (", info.hostname(), " at ",
                      info.address(), ")");
}

absl::Status AbortedBy(const std::string& cause) {
  return absl::AbortedError(absl::StrCat("job failed: ", cause));
}

absl::Time DeadlineAfterMs(uint32_t ms) {
  return MonotonicNow() + absl::Milliseconds(ms);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    JobSpec spec, DeadlineTimer* timer) {
  auto groups = DeriveGroups(spec.topology, spec.world_size);
  if (!groups.ok()) return groups.status();
  return std::unique_ptr<Coordinator>(
      new Coordinator(std::move(spec), *std::move(groups), timer));
}

Coordinator::Coordinator(JobSpec spec, std::vector<GroupSpec> groups,
                         DeadlineTimer* timer)
    : spec_(std::move(spec)),
      groups_(std::move(groups)),
      job_incarnation_(NewIncarnation()),
      started_(MonotonicNow()),
      timer_(timer),
      by_domain_(spec_.recovery && spec_.recovery_by_domain &&
                 spec_.topology.data > 1),
      rank_nodes_(spec_.world_size),
      kv_(timer,
          KvLimits{spec_.limits.kv_max_bytes, spec_.limits.kv_max_keys,
                   spec_.limits.kv_max_keys_per_rank,
                   spec_.limits.kv_max_bytes_per_rank},
          KvRules{spec_.world_size, spec_.kv_shared_prefixes, spec_.recovery}),
      rounds_(
          spec_.world_size, [this](uint32_t r) { return NodeOfRank(r); }, timer,
          spec_.limits.max_round_bytes_per_rank,
          by_domain_ ? DomainSizeOf(spec_.topology) : 0) {
  absl::MutexLock lock(&mu_);
  nodes_.resize(spec_.nnodes);
  joined_on_node_.resize(spec_.nnodes);
  members_.resize(spec_.world_size);
  for (uint32_t r = 0; r < spec_.world_size; ++r) {
    members_[r].node_index = spec_.DefaultNodeOf(r);
    members_[r].local_rank = r % spec_.nproc_per_node;
    rank_nodes_[r].store(members_[r].node_index, std::memory_order_relaxed);
  }
  if (by_domain_) domains_.resize(spec_.topology.data);
  heartbeat_timer_ = timer_->Schedule(MonotonicNow() + spec_.heartbeat_interval,
                                      [this] { CheckHeartbeats(); });
}

// Timers are cancelled by BeginShutdown (tests may stop the timer first).
Coordinator::~Coordinator() = default;

uint64_t Coordinator::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

absl::Status Coordinator::CheckEpochLocked(uint32_t rank,
                                           uint64_t member_epoch) const {
  if (by_domain_) {
    const uint32_t d = DomainOfRank(rank);
    const uint64_t current = domains_[d].epoch;
    if (member_epoch == current) return absl::OkStatus();
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank, " joined into epoch ", member_epoch,
            " but its domain ", d, " is at epoch ", current,
            domains_[d].recovering ? " (RECOVERING)" : " (serving)",
            "; a process of an earlier epoch cannot act in a later one: join "
            "again with the same incarnation to enter epoch ",
            current)),
        ErrorReason::kEpochFenced);
  }
  if (member_epoch == epoch_) return absl::OkStatus();
  return WithReason(
      absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " joined into epoch ", member_epoch,
          " but the job is at epoch ", epoch_, " (", v1::JobState_Name(state_),
          "); a process of an earlier epoch cannot act in a later one: join "
          "again with the same incarnation to enter epoch ",
          epoch_)),
      ErrorReason::kEpochFenced);
}

absl::Status Coordinator::CheckKeyEpochLocked(const std::string& key,
                                              uint32_t rank,
                                              bool deleting) const {
  static constexpr absl::string_view kPrefix = "epoch/";
  // Recovery off: no epoch but 1, and keys behave as before epochs came.
  if (!spec_.recovery || !absl::StartsWith(key, kPrefix)) {
    return absl::OkStatus();
  }
  absl::string_view rest = absl::string_view(key).substr(kPrefix.size());
  const size_t slash = rest.find('/');
  uint64_t named = 0;
  if (slash == absl::string_view::npos ||
      !absl::SimpleAtoi(rest.substr(0, slash), &named) ||
      rest.substr(0, slash) != absl::StrCat(named)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key '", key,
        "' is under the reserved prefix epoch/ but does not "
        "name an epoch: write epoch-scoped keys as epoch/<epoch>/<name>"));
  }
  if (by_domain_) {
    // Each epoch above 1 belongs to the domain(s) its loss hit: only they
    // write its keys; a delete may clear an ended epoch's, never a live one.
    const uint32_t d = DomainOfRank(rank);
    const uint64_t own = domains_[d].epoch;
    if (named == own) return absl::OkStatus();
    bool live = false;
    for (const Domain& other : domains_) live = live || other.epoch == named;
    if (deleting && !live && named <= epoch_) return absl::OkStatus();
    // Unmarked (no ErrorReason): the writer passed CheckEpochLocked, so it
    // is a process of the current epoch misusing a key, not one fenced.
    return absl::FailedPreconditionError(absl::StrCat(
        "key '", key, "' belongs to epoch ", named, " but rank ", rank,
        "'s domain ", d, " is at epoch ", own,
        "; epoch-scoped keys are written only in their own epoch, by its "
        "domain"));
  }
  if (named == epoch_ || (deleting && named < epoch_)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "key '", key, "' belongs to epoch ", named, " but the job is at epoch ",
      epoch_, "; epoch-scoped keys are written only in their own epoch"));
}

uint32_t Coordinator::NodeOfRank(uint32_t rank) const {
  return rank < rank_nodes_.size()
             ? rank_nodes_[rank].load(std::memory_order_relaxed)
             : 0;
}

uint64_t Coordinator::EpochOfRankLocked(uint32_t rank) const {
  return by_domain_ ? domains_[DomainOfRank(rank)].epoch : epoch_;
}

bool Coordinator::RankRecoveringLocked(uint32_t rank) const {
  return by_domain_ ? domains_[DomainOfRank(rank)].recovering
                    : state_ == v1::JOB_STATE_RECOVERING;
}

bool Coordinator::RecoveringLocked() const {
  if (!by_domain_) return state_ == v1::JOB_STATE_RECOVERING;
  for (const Domain& d : domains_) {
    if (d.recovering) return true;
  }
  return false;
}

v1::JoinRankResponse Coordinator::JoinAnswerLocked(uint32_t rank) const {
  v1::JoinRankResponse answer;
  answer.set_job_incarnation(job_incarnation_);
  answer.set_recovers_in_place(spec_.recovery);
  if (rank >= spec_.world_size) {
    answer.set_epoch(epoch_);
    return answer;
  }
  answer.set_epoch(EpochOfRankLocked(rank));
  if (by_domain_) {
    answer.set_recovery_by_domain(true);
    answer.set_first_world_round(
        domains_[DomainOfRank(rank)].first_world_round);
  }
  return answer;
}

absl::Status Coordinator::JobFailedLocked() const {
  if (state_ == v1::JOB_STATE_FAILED) return AbortedBy(failure_);
  if (shutting_down_) {
    return absl::UnavailableError("the coordinator is shutting down");
  }
  return absl::OkStatus();
}

absl::Status Coordinator::CheckNode(const v1::NodeRef& node) const {
  absl::MutexLock lock(&mu_);
  return CheckNodeLocked(node);
}

absl::Status Coordinator::CheckNodeLocked(const v1::NodeRef& node) const {
  if (auto s = CheckJobId(node.job_id(), spec_.job_id, "coordinator");
      !s.ok()) {
    return s;
  }
  if (node.node_index() >= spec_.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node index ", node.node_index(), " is outside [0, ",
                     spec_.nnodes, ")"));
  }
  const Node& n = nodes_[node.node_index()];
  if (n.state == v1::NODE_STATE_NOT_REGISTERED) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node.node_index(), " has not registered"));
  }
  if (n.info.daemon_incarnation() != node.daemon_incarnation()) {
    // The registered incarnation is not echoed: it is the node's identity.
    return absl::FailedPreconditionError(absl::StrFormat(
        "%snode %d: daemon incarnation %x is stale (another is registered); "
        "a restarted daemon cannot reuse its predecessor's state",
        kDaemonFenced, node.node_index(), node.daemon_incarnation()));
  }
  if (n.state == v1::NODE_STATE_LOST) {
    // Its ranks were lost and their slots freed: only a new daemon may
    // serve the node again.
    return absl::FailedPreconditionError(absl::StrCat(
        kDaemonFenced, "node ", node.node_index(), " was declared lost (",
        n.detail, "); only a new daemon can serve it again"));
  }
  if (n.state != v1::NODE_STATE_REGISTERED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node.node_index(), " is ", v1::NodeState_Name(n.state)));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::CheckMemberLocked(const v1::MemberRef& member) const {
  if (auto s = CheckJobId(member.job_id(), spec_.job_id, "daemon"); !s.ok()) {
    return s;
  }
  if (member.rank() >= spec_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", member.rank(), " is outside the world of size ",
                     spec_.world_size));
  }
  const Member& m = members_[member.rank()];
  if (m.state == v1::MEMBER_STATE_NOT_JOINED) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", member.rank(), " has not joined"));
  }
  if (m.incarnation != member.incarnation()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("rank %d: incarnation %x is stale (the rank joined "
                        "with another)",
                        member.rank(), member.incarnation()));
  }
  if (m.state != v1::MEMBER_STATE_JOINED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", member.rank(), " is ", v1::MemberState_Name(m.state)));
  }
  if (auto s = JobFailedLocked(); !s.ok()) return s;
  return CheckEpochLocked(member.rank(), m.epoch);
}

absl::StatusOr<v1::RegisterNodeResponse> Coordinator::RegisterNode(
    const v1::RegisterNodeRequest& request) {
  const v1::NodeInfo& info = request.node();
  if (auto s = CheckNodeInfo(info); !s.ok()) return s;
  if (info.node_index() >= spec_.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("node index ", info.node_index(), " is outside [0, ",
                     spec_.nnodes, ") (--nnodes=", spec_.nnodes, ")"));
  }
  if (info.daemon_incarnation() == 0) {
    return absl::InvalidArgumentError("daemon_incarnation must be non-zero");
  }
  if (auto s = CheckJobId(request.config().job_id(), spec_.job_id,
                          "coordinator", " (check --job_id)");
      !s.ok()) {
    return s;
  }
  if (auto s =
          CheckSameJob(ToJobConfig(spec_), request.config(), info.node_index());
      !s.ok()) {
    return s;
  }
  {
    absl::ReleasableMutexLock lock(&mu_);
    Node& node = nodes_[info.node_index()];
    if (node.state != v1::NODE_STATE_NOT_REGISTERED) {
      if (std::find(node.retired_incarnations.begin(),
                    node.retired_incarnations.end(),
                    info.daemon_incarnation()) !=
          node.retired_incarnations.end()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "node %d: daemon incarnation %x was replaced by %x; a replaced "
            "daemon cannot serve the node again",
            info.node_index(), info.daemon_incarnation(),
            node.info.daemon_incarnation()));
      }
      if (node.info.daemon_incarnation() == info.daemon_incarnation()) {
        if (auto s = JobFailedLocked(); !s.ok()) return s;
        if (node.state == v1::NODE_STATE_LOST) {
          // Its ranks were lost and their slots freed: only a new daemon
          // (a new incarnation) may serve the node again.
          return absl::FailedPreconditionError(absl::StrFormat(
              "node %d: daemon incarnation %x was lost (%s); only a new "
              "daemon (a new incarnation) can register the node again",
              info.node_index(), info.daemon_incarnation(), node.detail));
        }
        node.last_heartbeat = MonotonicNow();
        v1::RegisterNodeResponse response;
        response.set_job_incarnation(job_incarnation_);
        response.set_last_event_sequence(events_.last_sequence());
        return response;  // a retried registration
      }
      const bool replace =
          spec_.recovery && !shutting_down_ &&
          (state_ == v1::JOB_STATE_READY ||
           state_ == v1::JOB_STATE_RECOVERING) &&
          (node.state == v1::NODE_STATE_REGISTERED ||
           node.state == v1::NODE_STATE_LOST ||
           // Shut down cleanly once its ranks were lost
           // (a pod replaced: SIGTERM, then a new one).
           (node.state == v1::NODE_STATE_LEFT && RecoveringLocked()));
      if (replace) {
        // A replacement daemon takes the index over: its predecessor and
        // that one's ranks are lost (if not already), the job recovers.
        const uint64_t old_incarnation = node.info.daemon_incarnation();
        node.retired_incarnations.push_back(old_incarnation);
        if (node.retired_incarnations.size() > kMaxRetiredIncarnations) {
          node.retired_incarnations.pop_front();
        }
        LoseNodeLocked(info.node_index(),
                       "its daemon restarted (a new daemon incarnation "
                       "registered)");
        node.state = v1::NODE_STATE_REGISTERED;
        node.info = info;
        node.detail.clear();
        node.last_heartbeat = MonotonicNow();
        lost_nodes_.erase(info.node_index());
        v1::JobEvent registered;
        registered.set_kind(v1::EVENT_KIND_NODE_REGISTERED);
        registered.set_node_index(info.node_index());
        // No incarnation in the words: ranks and operators read events, and
        // a daemon's incarnation is not theirs to learn (docs/operations.md,
        // "Credentials"); the structured field is scrubbed for them.
        registered.set_message(
            absl::StrFormat("%s registered again (a new daemon incarnation) at "
                            "epoch %d",
                            NodeName(info.node_index(), info), epoch_));
        *registered.mutable_node() = info;
        AppendEventLocked(std::move(registered));
        std::vector<JoinWaiter> released;
        MaybeRecoveredLocked(&released);
        v1::RegisterNodeResponse response;
        response.set_job_incarnation(job_incarnation_);
        response.set_last_event_sequence(events_.last_sequence());
        lock.Release();
        ReleaseEnded();
        DropEndedEpochKeys();
        for (auto& w : released) w.reply(w.answer);
        return response;
      }
      std::string why = absl::StrFormat(
          "its daemon restarted (a new daemon incarnation registered), so "
          "this job incarnation cannot continue; recreate the whole group");
      if (state_ != v1::JOB_STATE_FAILED &&
          node.state == v1::NODE_STATE_REGISTERED) {
        LoseNodeLocked(info.node_index(), why);
      }
      FailJobLocked(
          absl::StrCat(NodeName(info.node_index(), node.info), ": ", why));
    } else if (auto s = JobFailedLocked(); !s.ok()) {
      return s;
    } else {
      node.state = v1::NODE_STATE_REGISTERED;
      node.info = info;
      node.last_heartbeat = MonotonicNow();
      v1::JobEvent registered;
      registered.set_kind(v1::EVENT_KIND_NODE_REGISTERED);
      registered.set_node_index(info.node_index());
      registered.set_message(
          absl::StrCat(NodeName(info.node_index(), info), " registered"));
      *registered.mutable_node() = info;
      AppendEventLocked(std::move(registered));
      v1::RegisterNodeResponse response;
      response.set_job_incarnation(job_incarnation_);
      response.set_last_event_sequence(events_.last_sequence());
      return response;
    }
  }
  ReleaseEnded();
  absl::MutexLock lock(&mu_);
  return AbortedBy(failure_);
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(
    const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  if (auto s = CheckNodeLocked(request.node()); !s.ok()) return s;
  nodes_[request.node().node_index()].last_heartbeat = MonotonicNow();
  v1::HeartbeatResponse response;
  response.set_state(state_);
  response.set_failure(failure_);
  return response;
}

absl::StatusOr<EventLog::SubscriptionId> Coordinator::Subscribe(
    const v1::SubscribeRequest& request, EventLog::Subscriber sink,
    std::function<void(absl::Status)> close) {
  absl::MutexLock lock(&mu_);
  if (auto s = CheckNodeLocked(request.node()); !s.ok()) return s;
  if (shutting_down_) {
    return absl::UnavailableError("the coordinator is shutting down");
  }
  Node& node = nodes_[request.node().node_index()];
  if (node.open_streams >= spec_.limits.max_streams_per_caller) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "node ", request.node().node_index(), " has ", node.open_streams,
        " Subscribe streams open already; the limit is ",
        spec_.limits.max_streams_per_caller, " (--max_streams_per_caller)"));
  }
  ++node.open_streams;
  EventLog::SubscriptionId id =
      events_.Subscribe(request.after_sequence(), std::move(sink));
  if (close) stream_closers_[id] = std::move(close);
  return id;
}

void Coordinator::EndSubscription(EventLog::SubscriptionId id,
                                  const v1::NodeRef& node, bool connection_lost,
                                  const std::string& reason) {
  events_.Unsubscribe(id);
  {
    absl::MutexLock lock(&mu_);
    stream_closers_.erase(id);
    // Subscribe checked the index before the stream opened.
    --nodes_[node.node_index()].open_streams;
    if (!connection_lost || shutting_down_ || !CheckNodeLocked(node).ok()) {
      return;
    }
    LoseNodeLocked(node.node_index(),
                   absl::StrCat("its event stream closed (", reason, ")"));
  }
  ReleaseEnded();
}

absl::StatusOr<v1::LeaveNodeResponse> Coordinator::LeaveNode(
    const v1::LeaveNodeRequest& request) {
  if (auto s = CheckReason(request.reason()); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = CheckNodeLocked(request.node()); !s.ok()) return s;
    uint32_t index = request.node().node_index();
    std::vector<uint32_t> stranded;
    for (uint32_t r = 0; r < members_.size(); ++r) {
      if (members_[r].node_index == index &&
          members_[r].state == v1::MEMBER_STATE_JOINED) {
        stranded.push_back(r);
      }
    }
    if (!stranded.empty()) {
      LoseNodeLocked(
          index, absl::StrCat("its daemon shut down (", request.reason(), ")"));
    } else {
      Node& node = nodes_[index];
      node.state = v1::NODE_STATE_LEFT;
      node.detail = request.reason();
      AppendEventLocked(v1::EVENT_KIND_NODE_LEFT, index, {},
                        absl::StrCat(NodeName(index, node.info),
                                     " left: ", request.reason()));
      return v1::LeaveNodeResponse();
    }
  }
  ReleaseEnded();
  return v1::LeaveNodeResponse();
}

void Coordinator::JoinRank(const v1::JoinRankRequest& request,
                           Reply<v1::JoinRankResponse> reply) {
  v1::JoinRankResponse response;
  response.set_job_incarnation(job_incarnation_);
  std::vector<JoinWaiter> released;  // joins waiting for the world
  absl::Status status;
  bool wait = false;
  {
    absl::MutexLock lock(&mu_);
    status = JoinRankLocked(request, &released);
    response = JoinAnswerLocked(request.rank());
    // With recovery by domain a join waits for its own domain, not the
    // world: the others may be serving, or recovering on their own.
    if (status.ok() && request.wait_for_world_ms() > 0 &&
        (state_ == v1::JOB_STATE_FORMING ||
         (by_domain_ ? state_ != v1::JOB_STATE_FAILED &&
                           RankRecoveringLocked(request.rank())
                     : state_ == v1::JOB_STATE_RECOVERING))) {
      uint64_t id = next_waiter_++;
      JoinWaiter& w = join_waiters_[id];
      w.rank = request.rank();
      w.reply = std::move(reply);
      w.started = MonotonicNow();
      w.timer = timer_->Schedule(DeadlineAfterMs(request.wait_for_world_ms()),
                                 [this, id] { ExpireJoinWaiter(id); });
      wait = true;
    }
  }
  ReleaseEnded();  // a failure found while recovering (never expected)
  DropEndedEpochKeys();
  for (auto& w : released) w.reply(w.answer);
  if (wait) return;
  if (!status.ok()) return reply(status);
  reply(response);
}

absl::Status Coordinator::JoinRankLocked(const v1::JoinRankRequest& request,
                                         std::vector<JoinWaiter>* released) {
  if (auto s = CheckNodeLocked(request.node()); !s.ok()) return s;
  if (auto s = CheckOptionalTimeoutMs(request.wait_for_world_ms(),
                                      "wait_for_world_ms");
      !s.ok()) {
    return s;
  }
  if (auto s = CheckDevice(request.device()); !s.ok()) return s;
  if (auto s = JobFailedLocked(); !s.ok()) return s;
  if (state_ == v1::JOB_STATE_COMPLETED) {
    return absl::FailedPreconditionError(
        "the job has completed: every rank left");
  }
  const uint32_t rank = request.rank();
  const uint32_t node_index = request.node().node_index();
  if (rank >= spec_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the world of size ", spec_.world_size));
  }
  // Shown in members, events and every node's view: a node's daemon
  // checks it, and so does the coordinator, which trusts no node for it.
  if (request.local_rank() >= spec_.nproc_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_rank ", request.local_rank(), " is outside [0, ",
                     spec_.nproc_per_node, ") (nproc_per_node)"));
  }
  if (request.incarnation() == 0) {
    return absl::InvalidArgumentError("incarnation must be non-zero");
  }
  Member& m = members_[rank];
  if (m.state == v1::MEMBER_STATE_JOINED) {
    if (m.incarnation == request.incarnation() && m.node_index == node_index) {
      // A retried join of the same process, or a survivor of a loss
      // entering the job's (its domain's) new epoch: the last survivor to
      // do so may make the world whole.
      m.epoch = EpochOfRankLocked(rank);
      MaybeRecoveredLocked(released);
      return absl::OkStatus();
    }
    return absl::AlreadyExistsError(absl::StrFormat(
        "rank %d is already held by pid %d on node %d; two processes claim "
        "it",
        rank, m.pid, m.node_index));
  }
  const bool replacing =
      m.state == v1::MEMBER_STATE_LOST && RankRecoveringLocked(rank);
  if (m.state != v1::MEMBER_STATE_NOT_JOINED && !replacing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " already ran in this job incarnation and is ",
        v1::MemberState_Name(m.state),
        spec_.recovery
            ? absl::StrCat("; a replacement joins only while the job is "
                           "RECOVERING (it is ",
                           v1::JobState_Name(state_), ")")
            : "; a restarted process cannot rejoin: recreate the whole "
              "group (or run the coordinator with --recovery=on)"));
  }
  if (replacing &&
      (m.incarnation == request.incarnation() ||
       std::find(m.retired_incarnations.begin(), m.retired_incarnations.end(),
                 request.incarnation()) != m.retired_incarnations.end())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d: incarnation %x was lost; only a new process (a new "
        "incarnation) can take the rank's slot at epoch %d",
        rank, request.incarnation(), EpochOfRankLocked(rank)));
  }
  if (state_ == v1::JOB_STATE_DRAINING) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is draining: rank ", drained_by_,
                     " left, so it runs no more rounds; recreate the group"));
  }
  const uint32_t on_node = joined_on_node_[node_index];
  if (on_node >= spec_.nproc_per_node) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node ", node_index, " already has ", on_node,
                     " ranks (--nproc_per_node=", spec_.nproc_per_node, ")"));
  }
  if (replacing) {
    m.retired_incarnations.push_back(m.incarnation);
    if (m.retired_incarnations.size() > kMaxRetiredIncarnations) {
      m.retired_incarnations.pop_front();
    }
  }
  m.state = v1::MEMBER_STATE_JOINED;
  m.node_index = node_index;
  m.local_rank = request.local_rank();
  m.incarnation = request.incarnation();
  m.pid = request.pid();
  m.device = request.device();
  m.epoch = EpochOfRankLocked(rank);
  m.detail.clear();
  rank_nodes_[rank].store(node_index, std::memory_order_relaxed);
  ++joined_;
  ++joined_on_node_[node_index];
  if (replacing) {
    lost_ranks_.erase(rank);
    replaced_ranks_.insert(rank);
    if (by_domain_) {
      Domain& d = domains_[DomainOfRank(rank)];
      d.lost_ranks.erase(rank);
      d.replaced_ranks.insert(rank);
    }
  }
  v1::MemberDetails details;
  details.set_local_rank(request.local_rank());
  details.set_incarnation(request.incarnation());
  details.set_pid(request.pid());
  *details.mutable_device() = request.device();
  HoldJoinLocked(node_index, rank, std::move(details));
  if (joined_ == spec_.world_size && state_ == v1::JOB_STATE_FORMING) {
    state_ = v1::JOB_STATE_READY;
    AppendEventLocked(v1::EVENT_KIND_JOB_READY, std::nullopt, {},
                      absl::StrCat("all ", spec_.world_size, " ranks joined"));
    for (auto& [id, w] : join_waiters_) {
      timer_->Cancel(w.timer);
      w.answer = JoinAnswerLocked(w.rank);
      released->push_back(std::move(w));
    }
    join_waiters_.clear();
  }
  MaybeRecoveredLocked(released);
  return absl::OkStatus();
}

void Coordinator::MaybeRecoveredLocked(std::vector<JoinWaiter>* released) {
  if (by_domain_) return MaybeDomainsRecoveredLocked(released);
  if (state_ != v1::JOB_STATE_RECOVERING || joined_ != spec_.world_size ||
      !lost_nodes_.empty() || !lost_ranks_.empty() ||
      !NotRejoinedLocked(std::nullopt).empty()) {
    // A slot still free, or a survivor not in this epoch yet (one that
    // hangs must not leave the job READY with no deadline): the recovery
    // deadline keeps running.
    return;
  }
  state_ = v1::JOB_STATE_READY;
  timer_->Cancel(recovery_timer_);
  recovery_timer_ = 0;
  std::string replaced =
      replaced_ranks_.empty()
          ? std::string("no rank replaced")
          : absl::StrCat("replaced rank",
                         replaced_ranks_.size() > 1 ? "s " : " ",
                         FormatRankList(std::vector<uint32_t>(
                             replaced_ranks_.begin(), replaced_ranks_.end())));
  AppendEventLocked(
      v1::EVENT_KIND_JOB_READY, std::nullopt, {},
      absl::StrCat(
          "all ", spec_.world_size, " ranks joined: ready at epoch ", epoch_,
          " after ",
          absl::ToInt64Milliseconds(MonotonicNow() - recovering_since_),
          " ms of recovery (", replaced, ")"));
  replaced_ranks_.clear();
  recovery_cause_.clear();
  ready_again_ = epoch_;
  for (auto& [id, w] : join_waiters_) {
    timer_->Cancel(w.timer);
    w.answer = JoinAnswerLocked(w.rank);
    released->push_back(std::move(w));
  }
  join_waiters_.clear();
}

void Coordinator::DropEndedEpochKeys() {
  uint64_t from = 0;
  uint64_t ready = 0;
  std::vector<uint64_t> domain_epochs;  // recovery by domain
  {
    absl::MutexLock lock(&mu_);
    domain_epochs.swap(epochs_to_drop_);
    if (!ready_again_.has_value()) {
      if (domain_epochs.empty()) return;
    } else {
      ready = *ready_again_;
      ready_again_.reset();
      from = keys_kept_from_epoch_;
      keys_kept_from_epoch_ = std::max(keys_kept_from_epoch_, ready);
    }
  }
  for (uint64_t ended : domain_epochs) {
    kv_.DropPrefix(absl::StrCat("epoch/", ended, "/"),
                   absl::FailedPreconditionError(absl::StrCat(
                       "epoch ", ended, " ended: its keys (epoch/", ended,
                       "/...) were dropped when its domain served again")));
  }
  for (uint64_t ended = from; ended < ready; ++ended) {
    kv_.DropPrefix(
        absl::StrCat("epoch/", ended, "/"),
        absl::FailedPreconditionError(absl::StrCat(
            "epoch ", ended, " ended: its keys (epoch/", ended,
            "/...) were dropped when the job became READY at epoch ", ready)));
  }
}

void Coordinator::HoldJoinLocked(uint32_t node_index, uint32_t rank,
                                 v1::MemberDetails details) {
  v1::JobEvent& event = held_joins_.event;
  if (event.ranks_size() == 0) {
    event.set_kind(v1::EVENT_KIND_MEMBER_JOINED);
    event.set_node_index(node_index);
    held_joins_.timer = timer_->Schedule(MonotonicNow() + kJoinHold, [this] {
      absl::MutexLock lock(&mu_);
      AppendHeldJoinsLocked();
    });
  } else if (event.has_node_index() && event.node_index() != node_index) {
    event.clear_node_index();  // several nodes: each member names its own
  }
  details.set_node_index(node_index);
  event.add_ranks(rank);
  *event.add_members() = std::move(details);
  if (event.ranks_size() >= kMaxHeldJoins) AppendHeldJoinsLocked();
}

void Coordinator::AppendHeldJoinsLocked() {
  if (held_joins_.event.ranks_size() == 0) return;
  timer_->Cancel(held_joins_.timer);
  v1::JobEvent event = std::move(held_joins_.event);
  held_joins_ = HeldJoins();
  // One rank: its pid, as before; several: their list (the pids are in
  // `members`).
  const std::string ranks = FormatRankList(
      std::vector<uint32_t>(event.ranks().begin(), event.ranks().end()));
  if (event.ranks_size() == 1) {
    event.set_message(absl::StrCat("rank ", event.ranks(0), " (pid ",
                                   event.members(0).pid(), ") joined on node ",
                                   event.members(0).node_index()));
    *event.mutable_member() = event.members(0);
  } else if (event.has_node_index()) {
    event.set_message(
        absl::StrCat("ranks ", ranks, " joined on node ", event.node_index()));
  } else {
    std::vector<uint32_t> nodes;
    for (const v1::MemberDetails& m : event.members()) {
      nodes.push_back(m.node_index());
    }
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    event.set_message(absl::StrCat("ranks ", ranks, " joined on nodes ",
                                   FormatRankList(std::move(nodes))));
  }
  event.set_epoch(epoch_);
  events_.Append(std::move(event));
}

void Coordinator::AppendEventLocked(v1::JobEvent event) {
  AppendHeldJoinsLocked();
  if (event.epoch() == 0) event.set_epoch(epoch_);  // a domain's set its own
  events_.Append(std::move(event));
}

void Coordinator::AppendEventLocked(v1::EventKind kind,
                                    std::optional<uint32_t> node_index,
                                    const std::vector<uint32_t>& ranks,
                                    std::string message) {
  v1::JobEvent event;
  event.set_kind(kind);
  if (node_index.has_value()) event.set_node_index(*node_index);
  for (uint32_t r : ranks) event.add_ranks(r);
  event.set_message(std::move(message));
  AppendEventLocked(std::move(event));
}

void Coordinator::ExpireJoinWaiter(uint64_t id) {
  JoinWaiter waiter;
  std::string missing;
  {
    absl::MutexLock lock(&mu_);
    auto it = join_waiters_.find(id);
    if (it == join_waiters_.end()) return;
    waiter = std::move(it->second);
    join_waiters_.erase(it);
    missing = MissingRanksLocked();
  }
  waiter.reply(absl::DeadlineExceededError(
      absl::StrCat("job '", spec_.job_id, "' was not complete after ",
                   absl::ToInt64Milliseconds(MonotonicNow() - waiter.started),
                   " ms: ", missing)));
}

std::string Coordinator::MissingRanksLocked() const {
  std::map<uint32_t, std::vector<uint32_t>> by_node;
  std::vector<uint32_t> all;
  for (uint32_t r = 0; r < members_.size(); ++r) {
    if (members_[r].state == v1::MEMBER_STATE_NOT_JOINED ||
        lost_ranks_.contains(r)) {
      by_node[members_[r].node_index].push_back(r);
      all.push_back(r);
    }
  }
  std::vector<std::string> parts;
  for (auto& [node, ranks] : by_node) {
    parts.push_back(absl::StrCat("node ", node, ": ", FormatRankList(ranks)));
  }
  std::vector<uint32_t> unregistered;
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].state == v1::NODE_STATE_NOT_REGISTERED)
      unregistered.push_back(n);
  }
  std::string out =
      absl::StrCat(all.size(), " of ", spec_.world_size,
                   " ranks have not joined: ", FormatRankList(all), " (",
                   absl::StrJoin(parts, "; "), ")");
  if (!unregistered.empty()) {
    absl::StrAppend(&out,
                    "; nodes never registered: ", FormatRankList(unregistered));
  }
  if (std::vector<uint32_t> behind = NotRejoinedLocked(std::nullopt);
      !behind.empty()) {
    absl::StrAppend(
        &out, "; surviving rank", behind.size() > 1 ? "s " : " ",
        FormatRankList(behind), " not joined again into ",
        by_domain_ ? "their domain's epoch" : absl::StrCat("epoch ", epoch_));
  }
  return out;
}

absl::StatusOr<v1::ReleaseRankResponse> Coordinator::ReleaseRank(
    const v1::ReleaseRankRequest& request) {
  if (auto s = CheckReason(request.reason()); !s.ok()) return s;
  bool failed = false;
  bool left_now = false;
  absl::Status job_failure;  // the job's, when it failed before this leave
  std::vector<JoinWaiter> draining_joins;  // joins waiting for the world
  {
    absl::MutexLock lock(&mu_);
    if (auto s = CheckNodeLocked(request.node()); !s.ok()) return s;
    const uint32_t rank = request.rank();
    if (rank >= spec_.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " is outside the world of size ", spec_.world_size));
    }
    Member& m = members_[rank];
    if (m.state != v1::MEMBER_STATE_JOINED ||
        m.incarnation != request.incarnation() ||
        m.node_index != request.node().node_index()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rank %d (incarnation %x) is not joined on node %d", rank,
          request.incarnation(), request.node().node_index()));
    }
    m.detail = request.reason();
    if (request.clean()) {
      m.state = v1::MEMBER_STATE_LEFT;
      ++left_;
      left_now = true;
      job_failure = JobFailedLocked();
      AppendEventLocked(v1::EVENT_KIND_MEMBER_LEFT, m.node_index, {rank},
                        absl::StrCat("rank ", rank, " left"));
      if (left_ == spec_.world_size && state_ != v1::JOB_STATE_FAILED) {
        state_ = v1::JOB_STATE_COMPLETED;
        AppendEventLocked(v1::EVENT_KIND_JOB_COMPLETED, std::nullopt, {},
                          "every rank left cleanly");
      } else if (RecoveringLocked()) {
        // The job is ending while slots are still lost: they will never be
        // taken, so it could never complete; it fails, saying why.
        timer_->Cancel(recovery_timer_);
        recovery_timer_ = 0;
        FailJobLocked(absl::StrCat("rank ", rank,
                                   " left while the job was RECOVERING at "
                                   "epoch ",
                                   epoch_,
                                   "; never replaced: ", StillLostLocked()));
        job_failure = JobFailedLocked();
        failed = true;
      } else if (state_ == v1::JOB_STATE_READY ||
                 state_ == v1::JOB_STATE_FORMING) {
        // Rounds need every rank, so the job serves no more: it says so
        // rather than stay READY (or wait to form) with a rank gone.
        state_ = v1::JOB_STATE_DRAINING;
        drained_by_ = rank;
        for (auto& [id, w] : join_waiters_) {
          timer_->Cancel(w.timer);
          draining_joins.push_back(std::move(w));
        }
        join_waiters_.clear();
      }
    } else {
      m.state = v1::MEMBER_STATE_LOST;
      std::string why =
          absl::StrCat("rank ", rank, " (pid ", m.pid, " on node ",
                       m.node_index, ") lost: ", request.reason());
      AppendLossLocked(v1::EVENT_KIND_MEMBER_LOST, m.node_index, {rank}, why);
      LoseLocked(why, {rank}, std::nullopt);
      failed = true;
    }
  }
  if (failed) ReleaseEnded();
  for (auto& w : draining_joins) {
    w.reply(absl::FailedPreconditionError(absl::StrCat(
        "rank ", request.rank(),
        " left the job before every rank joined; it will never be READY")));
  }
  if (left_now) {
    // Rounds need every rank; once one left, none can complete. A rank
    // that leaves because the job failed must not have its leave reported
    // as the rounds' cause when it wins the race with the failure's own
    // release of the rounds (ReleaseEnded).
    rounds_.Fail(job_failure.ok()
                     ? absl::FailedPreconditionError(absl::StrCat(
                           "rank ", request.rank(),
                           " left the job; all_gather_words needs every rank"))
                     : job_failure);
  }
  return v1::ReleaseRankResponse();
}

void Coordinator::ContributeWords(const v1::ContributeWordsRequest& request,
                                  Reply<v1::AllGatherWordsResponse> reply) {
  ContributeWordsShared(
      request, [reply = std::move(reply)](
                   std::shared_ptr<const WordRounds::Outcome> outcome) {
        reply(outcome->result());
      });
}

void Coordinator::ContributeWordsShared(
    const v1::ContributeWordsRequest& request, WordRounds::SharedDone done) {
  // What the request carries is checked before whom it claims to be.
  absl::Status status = CheckTimeoutMs(request.timeout_ms(), "timeout_ms");
  if (status.ok() && request.frames_size() == 0) {
    // Such a contribution would open (and, timing out, complete) a round
    // without any rank in it.
    status = absl::InvalidArgumentError(absl::StrCat(
        "a contribution to all_gather_words round ", request.round(),
        " carries no frame; a node contributes its ranks' frames"));
  }
  uint64_t epoch = 0;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    epoch = epoch_;
    status = CheckNodeLocked(request.node());
    if (status.ok()) status = JobFailedLocked();
    for (const auto& f : request.frames()) {
      if (!status.ok()) break;
      if (f.rank() >= spec_.world_size) {
        status = absl::InvalidArgumentError(
            absl::StrCat("rank ", f.rank(), " is outside the world of size ",
                         spec_.world_size));
      } else if (members_[f.rank()].node_index != request.node().node_index() ||
                 members_[f.rank()].state != v1::MEMBER_STATE_JOINED) {
        status = absl::FailedPreconditionError(
            absl::StrCat("rank ", f.rank(), " is not a joined member of node ",
                         request.node().node_index()));
      } else {
        status = CheckEpochLocked(f.rank(), members_[f.rank()].epoch);
      }
    }
    // Only a round the rounds may accept moves where a recovered domain
    // re-enters: a refused one far ahead (a misbehaving node) would put
    // the entry past rounds the other domains reach, or wrap it to 0.
    if (status.ok() &&
        request.round() <= rounds_.HighestAcceptable(request.frames())) {
      highest_round_admitted_ =
          std::max(highest_round_admitted_, request.round());
    }
  }
  if (!status.ok()) {
    return done(
        std::make_shared<const WordRounds::Outcome>(request.round(), status));
  }
  rounds_.ContributeShared(request.round(),
                           std::vector<v1::RankFrame>(request.frames().begin(),
                                                      request.frames().end()),
                           DeadlineAfterMs(request.timeout_ms()),
                           std::move(done),
                           absl::Milliseconds(request.waited_ms()), epoch);
}

absl::StatusOr<v1::KvSetResponse> Coordinator::KvSet(
    const v1::KvSetRequest& request) {
  KvReader writer;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = CheckMemberLocked(request.member()); !s.ok()) return s;
    if (auto s = CheckKeyEpochLocked(request.key(), request.member().rank());
        !s.ok()) {
      return s;
    }
    // The epoch the write is admitted in: the store refuses it if a loss
    // ends that epoch before it lands.
    writer = ReaderLocked(request.member().rank());
  }
  KvCondition condition;
  if (request.has_expected()) condition.expected = request.expected();
  condition.if_absent = request.if_absent();
  auto stored = kv_.SetAs(request.key(), request.value(),
                          request.member().rank(), condition, writer);
  if (!stored.ok()) return stored.status();
  v1::KvSetResponse response;
  response.set_stored(*stored);
  return response;
}

void Coordinator::KvGet(const v1::KvGetRequest& request,
                        Reply<v1::KvGetResponse> reply,
                        const CancellationRef& cancellation) {
  absl::Status status =
      CheckOptionalTimeoutMs(request.timeout_ms(), "timeout_ms");
  KvReader reader;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    status = CheckMemberLocked(request.member());
    // The epoch the get is admitted in: a loss that ends it ends the get
    // (LoseLocked), even one that ends it before the store sees the get.
    if (status.ok()) reader = ReaderLocked(request.member().rank());
  }
  if (!status.ok()) return reply(status);
  const uint32_t rank = request.member().rank();
  // Only gets that may wait count (a get without a wait returns at once).
  const bool waits = request.timeout_ms() > 0;
  if (waits) {
    absl::Status admitted;
    {
      absl::MutexLock lock(&kv_gets_mu_);
      uint32_t& waiting = kv_gets_waiting_[rank];
      if (waiting >= spec_.limits.max_waiting_gets_per_rank) {
        admitted = absl::ResourceExhaustedError(
            absl::StrCat("rank ", rank, " has ", waiting,
                         " key-value gets waiting already; the limit is ",
                         spec_.limits.max_waiting_gets_per_rank,
                         " (--max_waiting_gets_per_rank)"));
      } else {
        ++waiting;
      }
    }
    if (!admitted.ok()) return reply(admitted);  // never under a lock
  }
  kv_.Get(
      request.key(), DeadlineAfterMs(request.timeout_ms()),
      [this, rank, waits,
       reply = std::move(reply)](absl::StatusOr<std::string> value) {
        if (waits) {
          absl::MutexLock lock(&kv_gets_mu_);
          if (--kv_gets_waiting_[rank] == 0) kv_gets_waiting_.erase(rank);
        }
        if (!value.ok()) return reply(value.status());
        v1::KvGetResponse response;
        response.set_value(*std::move(value));
        reply(response);
      },
      cancellation, reader);
}

KvReader Coordinator::ReaderLocked(uint32_t rank) const {
  return KvReader{by_domain_ ? DomainOfRank(rank) : 0, EpochOfRankLocked(rank)};
}

absl::StatusOr<v1::KvAddResponse> Coordinator::KvAdd(
    const v1::KvAddRequest& request) {
  KvReader writer;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = CheckMemberLocked(request.member()); !s.ok()) return s;
    if (auto s = CheckKeyEpochLocked(request.key(), request.member().rank());
        !s.ok()) {
      return s;
    }
    writer = ReaderLocked(request.member().rank());  // as KvSet's
  }
  auto value =
      kv_.Add(request.key(), request.delta(), request.member().rank(), writer);
  if (!value.ok()) return value.status();
  v1::KvAddResponse response;
  response.set_value(*value);
  return response;
}

absl::StatusOr<v1::KvDeleteResponse> Coordinator::KvDelete(
    const v1::KvDeleteRequest& request) {
  KvReader writer;
  {
    absl::MutexLock lock(&mu_);
    if (auto s = CheckMemberLocked(request.member()); !s.ok()) return s;
    if (auto s = CheckKeyEpochLocked(request.key(), request.member().rank(),
                                     /*deleting=*/true);
        !s.ok()) {
      return s;
    }
    writer = ReaderLocked(request.member().rank());  // as KvSet's
  }
  std::optional<std::string> expected;
  if (request.has_expected()) expected = request.expected();
  auto existed =
      kv_.Delete(request.key(), request.member().rank(), expected, writer);
  if (!existed.ok()) return existed.status();
  v1::KvDeleteResponse response;
  response.set_existed(*existed);
  return response;
}

absl::StatusOr<v1::KvCountResponse> Coordinator::KvCount(
    const v1::KvCountRequest& request) {
  {
    absl::MutexLock lock(&mu_);
    if (auto s = CheckMemberLocked(request.member()); !s.ok()) return s;
  }
  auto keys = kv_.Count(request.prefix());
  if (!keys.ok()) return keys.status();
  v1::KvCountResponse response;
  response.set_keys(*keys);
  return response;
}

void Coordinator::LoseNodeLocked(uint32_t node_index, const std::string& why) {
  Node& node = nodes_[node_index];
  if (node.state != v1::NODE_STATE_REGISTERED) return;
  node.state = v1::NODE_STATE_LOST;
  node.detail = why;
  std::vector<uint32_t> lost;
  for (uint32_t r = 0; r < members_.size(); ++r) {
    Member& m = members_[r];
    if (m.node_index == node_index && m.state == v1::MEMBER_STATE_JOINED) {
      m.state = v1::MEMBER_STATE_LOST;
      m.detail = absl::StrCat("node ", node_index, " lost");
      lost.push_back(r);
    }
  }
  std::string message =
      absl::StrCat(NodeName(node_index, node.info), " lost: ", why);
  if (!lost.empty()) {
    absl::StrAppend(&message, "; its rank", lost.size() > 1 ? "s " : " ",
                    FormatRankList(lost), lost.size() > 1 ? " are" : " is",
                    " lost");
  }
  AppendLossLocked(v1::EVENT_KIND_NODE_LOST, node_index, lost, message);
  if (state_ != v1::JOB_STATE_COMPLETED) LoseLocked(message, lost, node_index);
}

bool Coordinator::LossRecoversLocked() const {
  return spec_.recovery && !shutting_down_ &&
         (state_ == v1::JOB_STATE_READY || state_ == v1::JOB_STATE_RECOVERING);
}

void Coordinator::AppendLossLocked(v1::EventKind kind, uint32_t node_index,
                                   const std::vector<uint32_t>& ranks,
                                   std::string message) {
  v1::JobEvent event;
  event.set_kind(kind);
  event.set_node_index(node_index);
  for (uint32_t r : ranks) event.add_ranks(r);
  event.set_message(std::move(message));
  event.set_ends_epoch(LossRecoversLocked());
  AppendEventLocked(std::move(event));
}

void Coordinator::LoseLocked(const std::string& cause,
                             const std::vector<uint32_t>& ranks,
                             std::optional<uint32_t> node) {
  if (!LossRecoversLocked()) {
    FailJobLocked(cause);
    return;
  }
  if (by_domain_) return LoseDomainsLocked(cause, ranks, node);
  for (uint32_t r : ranks) {
    // The slot is free for a replacement, on whichever node has room.
    lost_ranks_.insert(r);
    replaced_ranks_.erase(r);
    --joined_;
    --joined_on_node_[members_[r].node_index];
  }
  if (node.has_value()) lost_nodes_.insert(*node);
  const uint64_t ended = epoch_;
  const bool first = state_ == v1::JOB_STATE_READY;
  AppendHeldJoinsLocked();  // joins of the ended epoch say so
  ++epoch_;
  state_ = v1::JOB_STATE_RECOVERING;
  if (first) {
    recovering_since_ = MonotonicNow();
    recovery_cause_ = cause;
    recovery_timer_ =
        timer_->Schedule(recovering_since_ + spec_.recovery_deadline,
                         [this] { ExpireRecovery(); });
  }
  const int64_t left_ms = absl::ToInt64Milliseconds(
      recovering_since_ + spec_.recovery_deadline - MonotonicNow());
  std::string message = absl::StrCat(
      "epoch ", ended, " ended: ", cause, "; recovering at epoch ", epoch_,
      first ? "" : " (a loss during recovery)", ": waiting for ",
      StillLostLocked(), ", at most ", std::max<int64_t>(left_ms, 0),
      " ms more (--recovery_deadline_ms)");
  // Marked (common/error_reason.h): what it answers (gets, joins waiting
  // for the world of the ended epoch) ended with the epoch, not the job.
  epoch_ended_ =
      WithReason(absl::AbortedError(message), ErrorReason::kEpochEnded);
  // Gets waiting from the ended epoch end with the loss, in this step, so
  // that none is answered with what the next epoch writes.
  ended_gets_.push_back(kv_.EndEpoch(0, ended, *epoch_ended_));
  // Joins waiting for the world of the ended epoch: answered by
  // ReleaseEnded (they join again into the new one). Taken now, under mu_:
  // a join that arrives before ReleaseEnded runs waits for the new epoch
  // and must stay.
  for (auto& [id, w] : join_waiters_) {
    timer_->Cancel(w.timer);
    ended_joins_.emplace_back(std::move(w), *epoch_ended_);
  }
  join_waiters_.clear();
  AppendEventLocked(v1::EVENT_KIND_JOB_RECOVERING, node, ranks, message);
}

void Coordinator::LoseDomainsLocked(const std::string& cause,
                                    const std::vector<uint32_t>& ranks,
                                    std::optional<uint32_t> node) {
  if (node.has_value()) lost_nodes_.insert(*node);
  std::map<uint32_t, std::vector<uint32_t>> hit;  // domain -> its lost ranks
  for (uint32_t r : ranks) hit[DomainOfRank(r)].push_back(r);
  AppendHeldJoinsLocked();  // joins of the ended epochs say so
  const absl::Time now = MonotonicNow();
  for (auto& [index, lost] : hit) {
    Domain& d = domains_[index];
    for (uint32_t r : lost) {
      // The slot is free for a replacement, on whichever node has room.
      lost_ranks_.insert(r);
      replaced_ranks_.erase(r);
      d.lost_ranks.insert(r);
      d.replaced_ranks.erase(r);
      --joined_;
      --joined_on_node_[members_[r].node_index];
    }
    const uint64_t ended = d.epoch;
    if (ended > 1) d.ended_epochs.push_back(ended);  // epoch 1's keys stay
    const bool first = !d.recovering;
    d.recovering = true;
    // A number of its own: no other domain ever shares a re-form's keys.
    d.epoch = ++epoch_;
    d.first_world_round = 0;
    if (first) {
      d.recovering_since = now;
      d.recovery_cause = cause;
      d.recovery_timer = timer_->Schedule(
          now + spec_.recovery_deadline,
          [this, index = index] { ExpireDomainRecovery(index); });
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(
        d.recovering_since + spec_.recovery_deadline - now);
    const uint32_t size = DomainSizeOf(spec_.topology);
    const std::string message = absl::StrCat(
        "domain ", index, " (ranks ", index * size, "-", (index + 1) * size - 1,
        ") epoch ", ended, " ended: ", cause, "; recovering at epoch ", d.epoch,
        first ? "" : " (a loss during recovery)", ": waiting for ",
        StillLostInDomainLocked(index), ", at most ",
        std::max<int64_t>(left_ms, 0), " ms more (--recovery_deadline_ms)");
    const absl::Status ended_status =
        WithReason(absl::AbortedError(message), ErrorReason::kEpochEnded);
    // World rounds open now fail on every contributor; later ones span
    // the serving domains. Under mu_, so that no contribution admitted
    // after this loss reaches the rounds before it (NodeOfRank, which
    // WordRounds calls under its lock, takes no lock).
    absl::StatusOr<WordRounds::Answers> owed =
        rounds_.LoseDomain(index, d.epoch, ended_status);
    if (owed.ok()) owed_round_answers_.push_back(*std::move(owed));
    // Gets waiting from the domain's ended epoch end with its loss.
    ended_gets_.push_back(kv_.EndEpoch(index, ended, ended_status));
    // Joins of the domain waiting for it: their epoch ended.
    for (auto it = join_waiters_.begin(); it != join_waiters_.end();) {
      if (DomainOfRank(it->second.rank) != index) {
        ++it;
        continue;
      }
      timer_->Cancel(it->second.timer);
      ended_joins_.emplace_back(std::move(it->second), ended_status);
      it = join_waiters_.erase(it);
    }
    v1::JobEvent event;
    event.set_kind(v1::EVENT_KIND_DOMAIN_RECOVERING);
    if (node.has_value()) event.set_node_index(*node);
    for (uint32_t r : lost) event.add_ranks(r);
    event.set_message(message);
    event.set_domain(index);
    event.set_epoch(d.epoch);
    AppendEventLocked(std::move(event));
  }
  bool serving = false;
  for (const Domain& d : domains_) serving = serving || !d.recovering;
  state_ = serving ? v1::JOB_STATE_READY : v1::JOB_STATE_RECOVERING;
}

void Coordinator::MaybeDomainsRecoveredLocked(
    std::vector<JoinWaiter>* released) {
  if (state_ != v1::JOB_STATE_READY && state_ != v1::JOB_STATE_RECOVERING) {
    return;
  }
  const uint32_t size = DomainSizeOf(spec_.topology);
  for (uint32_t index = 0; index < domains_.size(); ++index) {
    Domain& d = domains_[index];
    if (!d.recovering || !d.lost_ranks.empty()) continue;
    // Every slot held, and every member in the domain's epoch: its
    // survivors joined again too (the domain's deadline runs until then).
    bool whole = true;
    for (uint32_t r = index * size; r < (index + 1) * size; ++r) {
      whole = whole && members_[r].state == v1::MEMBER_STATE_JOINED &&
              members_[r].epoch == d.epoch;
    }
    if (!whole) continue;
    // Past every round admitted so far: each round below it was decided
    // without the domain, every round from it on waits for it.
    // (Never UINT64_MAX: WordRounds accepts no round that far.)
    const uint64_t entry = highest_round_admitted_ + 1;
    if (absl::Status admitted = rounds_.AdmitDomain(index, d.epoch, entry);
        !admitted.ok()) {
      // Never expected (every round is admitted here first); if it were,
      // no round membership could be trusted any more.
      FailJobLocked(absl::StrCat(
          "domain ", index,
          " could not re-enter world rounds: ", admitted.message()));
      return;
    }
    d.recovering = false;
    timer_->Cancel(d.recovery_timer);
    d.recovery_timer = 0;
    d.first_world_round = entry;
    epochs_to_drop_.insert(epochs_to_drop_.end(), d.ended_epochs.begin(),
                           d.ended_epochs.end());
    d.ended_epochs.clear();
    const std::string replaced =
        d.replaced_ranks.empty()
            ? std::string("no rank replaced")
            : absl::StrCat(
                  "replaced rank", d.replaced_ranks.size() > 1 ? "s " : " ",
                  FormatRankList(std::vector<uint32_t>(
                      d.replaced_ranks.begin(), d.replaced_ranks.end())));
    v1::JobEvent event;
    event.set_kind(v1::EVENT_KIND_DOMAIN_READY);
    event.set_domain(index);
    event.set_epoch(d.epoch);
    event.set_first_world_round(entry);
    event.set_message(absl::StrCat(
        "domain ", index, " (ranks ", index * size, "-", (index + 1) * size - 1,
        ") whole again: serving at epoch ", d.epoch, " from world round ",
        entry, " on, after ",
        absl::ToInt64Milliseconds(MonotonicNow() - d.recovering_since),
        " ms of recovery (", replaced, ")"));
    AppendEventLocked(std::move(event));
    d.replaced_ranks.clear();
    d.recovery_cause.clear();
    for (auto it = join_waiters_.begin(); it != join_waiters_.end();) {
      if (DomainOfRank(it->second.rank) != index) {
        ++it;
        continue;
      }
      timer_->Cancel(it->second.timer);
      it->second.answer = JoinAnswerLocked(it->second.rank);
      released->push_back(std::move(it->second));
      it = join_waiters_.erase(it);
    }
  }
  state_ = v1::JOB_STATE_READY;  // at least one domain serves now
  bool serving = false;
  for (const Domain& d : domains_) serving = serving || !d.recovering;
  if (!serving) state_ = v1::JOB_STATE_RECOVERING;
}

void Coordinator::ExpireDomainRecovery(uint32_t index) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == v1::JOB_STATE_FAILED || shutting_down_ ||
        index >= domains_.size()) {
      return;
    }
    Domain& d = domains_[index];
    if (!d.recovering ||
        MonotonicNow() < d.recovering_since + spec_.recovery_deadline) {
      return;
    }
    d.recovery_timer = 0;
    FailJobLocked(absl::StrCat(
        "recovery deadline of ",
        absl::ToInt64Milliseconds(spec_.recovery_deadline),
        " ms (--recovery_deadline_ms) passed for domain ", index, " at epoch ",
        d.epoch, " with it still RECOVERING; never came back: ",
        StillLostInDomainLocked(index), " (first loss: ", d.recovery_cause,
        "); a job short of a data-parallel replica fails, to be recreated "
        "whole"));
  }
  ReleaseEnded();
}

std::string Coordinator::StillLostInDomainLocked(uint32_t index) const {
  const Domain& d = domains_[index];
  std::map<uint32_t, std::vector<uint32_t>> by_node;
  for (uint32_t r : d.lost_ranks) {
    by_node[members_[r].node_index].push_back(r);
  }
  std::vector<std::string> parts;
  for (auto& [n, ranks] : by_node) {
    parts.push_back(absl::StrCat("rank", ranks.size() > 1 ? "s " : " ",
                                 FormatRankList(ranks), " (node ", n, ")"));
  }
  if (std::string survivors = RejoinText(NotRejoinedLocked(index), d.epoch);
      !survivors.empty()) {
    parts.push_back(std::move(survivors));
  }
  if (parts.empty()) return "nothing";
  return absl::StrJoin(parts, ", ");
}

std::vector<uint32_t> Coordinator::NotRejoinedLocked(
    std::optional<uint32_t> domain) const {
  std::vector<uint32_t> out;
  uint32_t from = 0;
  uint32_t to = spec_.world_size;
  if (domain.has_value()) {
    from = *domain * DomainSizeOf(spec_.topology);
    to = from + DomainSizeOf(spec_.topology);
  }
  for (uint32_t r = from; r < to; ++r) {
    const Member& m = members_[r];
    if (m.state == v1::MEMBER_STATE_JOINED && m.epoch < EpochOfRankLocked(r)) {
      out.push_back(r);
    }
  }
  return out;
}

std::string Coordinator::RejoinText(const std::vector<uint32_t>& ranks,
                                    uint64_t epoch) {
  if (ranks.empty()) return "";
  // A list, not by node: right after a loss it names nearly every rank.
  return absl::StrCat("surviving rank", ranks.size() > 1 ? "s " : " ",
                      FormatRankList(ranks), " to join again into epoch ",
                      epoch);
}

std::string Coordinator::StillLostLocked() const {
  std::map<uint32_t, std::vector<uint32_t>> by_node;
  for (uint32_t r : lost_ranks_) by_node[members_[r].node_index].push_back(r);
  std::vector<std::string> parts;
  for (auto& [n, ranks] : by_node) {
    parts.push_back(absl::StrCat("rank", ranks.size() > 1 ? "s " : " ",
                                 FormatRankList(ranks), " (node ", n, ")"));
  }
  if (!lost_nodes_.empty()) {
    parts.push_back(absl::StrCat("node", lost_nodes_.size() > 1 ? "s " : " ",
                                 FormatRankList(std::vector<uint32_t>(
                                     lost_nodes_.begin(), lost_nodes_.end())),
                                 " to register again"));
  }
  if (std::string survivors =
          RejoinText(NotRejoinedLocked(std::nullopt), epoch_);
      !survivors.empty()) {
    parts.push_back(std::move(survivors));
  }
  if (parts.empty()) return "nothing";
  return absl::StrJoin(parts, ", ");
}

void Coordinator::ExpireRecovery() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != v1::JOB_STATE_RECOVERING ||
        MonotonicNow() < recovering_since_ + spec_.recovery_deadline) {
      return;
    }
    recovery_timer_ = 0;
    FailJobLocked(absl::StrCat(
        "recovery deadline of ",
        absl::ToInt64Milliseconds(spec_.recovery_deadline),
        " ms (--recovery_deadline_ms) passed at epoch ", epoch_,
        " with the job still RECOVERING; never came back: ", StillLostLocked(),
        " (first loss: ", recovery_cause_, ")"));
  }
  ReleaseEnded();
}

void Coordinator::FailJob(const std::string& cause) {
  {
    absl::MutexLock lock(&mu_);
    FailJobLocked(cause);
  }
  ReleaseEnded();
}

void Coordinator::FailJobLocked(const std::string& cause) {
  if (state_ == v1::JOB_STATE_FAILED) return;
  state_ = v1::JOB_STATE_FAILED;
  failure_ = cause;
  AppendEventLocked(v1::EVENT_KIND_JOB_FAILED, std::nullopt, {}, cause);
}

void Coordinator::ReleaseEnded() {
  absl::Status cause;
  std::map<uint64_t, JoinWaiter> waiters;
  std::optional<absl::Status> ended;
  uint64_t epoch = 0;
  std::vector<WordRounds::Answers> owed;
  std::vector<std::pair<JoinWaiter, absl::Status>> ended_joins;
  std::vector<KvStore::EndedGets> ended_gets;
  {
    absl::MutexLock lock(&mu_);
    ended.swap(epoch_ended_);
    owed.swap(owed_round_answers_);
    ended_joins.swap(ended_joins_);
    ended_gets.swap(ended_gets_);
    epoch = epoch_;
    cause = JobFailedLocked();
    if (!cause.ok()) {
      // Joins waiting for the world: the job failed. (Those of an epoch
      // that ended are in ended_joins, taken when it ended.)
      waiters.swap(join_waiters_);
      for (auto& [id, w] : waiters) timer_->Cancel(w.timer);
    }
  }
  // Recovery by domain: what the domains' losses owe.
  for (WordRounds::Answers& answers : owed) answers.Send();
  for (auto& [w, status] : ended_joins) w.reply(status);
  for (KvStore::EndedGets& gets : ended_gets) gets.Send();
  if (cause.ok() && !ended.has_value()) return;
  if (ended.has_value()) {
    // The epoch that ended: its rounds fail with the loss named, and
    // rounds are numbered afresh in the new one. Not under mu_: WordRounds
    // calls NodeOfRank under its own lock.
    rounds_.Restart(epoch, *ended);
  }
  if (!cause.ok()) {
    rounds_.Fail(cause);
    kv_.Fail(cause);
  }
  for (auto& [id, w] : waiters) w.reply(cause);
}

void Coordinator::BeginShutdown() {
  std::map<EventLog::SubscriptionId, std::function<void(absl::Status)>> closers;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    timer_->Cancel(heartbeat_timer_);
    heartbeat_timer_ = 0;
    timer_->Cancel(recovery_timer_);
    recovery_timer_ = 0;
    for (Domain& d : domains_) {
      timer_->Cancel(d.recovery_timer);
      d.recovery_timer = 0;
    }
    closers.swap(stream_closers_);
  }
  ReleaseEnded();
  for (auto& [id, close] : closers) {
    close(absl::UnavailableError("the coordinator is shutting down"));
  }
}

void Coordinator::CheckHeartbeats() {
  bool failed = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    absl::Time now = MonotonicNow();
    for (uint32_t n = 0; n < nodes_.size(); ++n) {
      if (nodes_[n].state != v1::NODE_STATE_REGISTERED) continue;
      absl::Duration age = now - nodes_[n].last_heartbeat;
      if (age > spec_.heartbeat_timeout) {
        LoseNodeLocked(
            n, absl::StrCat("no heartbeat for ", absl::ToInt64Milliseconds(age),
                            " ms (--heartbeat_timeout_ms=",
                            absl::ToInt64Milliseconds(spec_.heartbeat_timeout),
                            ")"));
        failed = true;
      }
    }
    heartbeat_timer_ = timer_->Schedule(now + spec_.heartbeat_interval,
                                        [this] { CheckHeartbeats(); });
  }
  if (failed) ReleaseEnded();
}

v1::JobStatus Coordinator::GetJob() const {
  v1::JobStatus status;
  status.set_job_id(spec_.job_id);
  status.set_job_incarnation(job_incarnation_);
  status.set_world_size(spec_.world_size);
  status.set_nnodes(spec_.nnodes);
  status.set_completed_rounds(rounds_.completed_rounds());
  status.set_uptime_ms(absl::ToInt64Milliseconds(MonotonicNow() - started_));
  status.set_kv_waiters(static_cast<uint32_t>(kv_.waiting()));
  absl::MutexLock lock(&mu_);
  status.set_state(state_);
  status.set_failure(failure_);
  status.set_epoch(epoch_);
  // By domain each recovering domain has its own deadline: the job's is
  // the nearest of them (below).
  if (state_ == v1::JOB_STATE_RECOVERING && !by_domain_) {
    status.set_recovery_deadline_left_ms(std::max<int64_t>(
        1, absl::ToInt64Milliseconds(
               recovering_since_ + spec_.recovery_deadline - MonotonicNow())));
  }
  uint32_t serving = 0;
  for (uint32_t i = 0; i < domains_.size(); ++i) {
    const Domain& d = domains_[i];
    v1::DomainStatus* out = status.add_domains();
    out->set_domain(i);
    out->set_state(d.recovering ? v1::DOMAIN_STATE_RECOVERING
                                : v1::DOMAIN_STATE_SERVING);
    out->set_epoch(d.epoch);
    for (uint32_t r : d.lost_ranks) out->add_lost_ranks(r);
    out->set_first_world_round(d.first_world_round);
    if (d.recovering) {
      const int64_t left = std::max<int64_t>(
          1,
          absl::ToInt64Milliseconds(d.recovering_since +
                                    spec_.recovery_deadline - MonotonicNow()));
      out->set_recovery_deadline_left_ms(left);
      if (status.recovery_deadline_left_ms() == 0 ||
          left < status.recovery_deadline_left_ms()) {
        status.set_recovery_deadline_left_ms(left);
      }
    } else {
      ++serving;
    }
  }
  if (by_domain_) status.set_serving_domains(serving);
  status.set_joined_ranks(joined_);
  uint32_t registered = 0;
  for (const Node& n : nodes_) {
    if (n.state != v1::NODE_STATE_NOT_REGISTERED) ++registered;
  }
  status.set_registered_nodes(registered);
  return status;
}

v1::Topology Coordinator::GetTopology() const {
  v1::Topology topology = BuildTopology(spec_, groups_);
  absl::MutexLock lock(&mu_);
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    v1::NodeInfo* info = topology.add_nodes();
    if (nodes_[n].state != v1::NODE_STATE_NOT_REGISTERED)
      *info = nodes_[n].info;
    info->set_node_index(n);
  }
  return topology;
}

v1::MemberList Coordinator::ListMembers() const {
  std::map<uint32_t, uint64_t> waiting = rounds_.WaitingRanks();
  uint64_t completed = rounds_.completed_rounds();
  v1::MemberList list;
  absl::Time now = MonotonicNow();
  absl::MutexLock lock(&mu_);
  for (uint32_t r = 0; r < members_.size(); ++r) {
    const Member& m = members_[r];
    v1::MemberStatus* out = list.add_members();
    out->set_rank(r);
    out->set_node_index(m.node_index);
    out->set_local_rank(m.local_rank);
    out->set_state(m.state);
    out->set_round(completed);
    if (m.state == v1::MEMBER_STATE_JOINED) {
      if (auto it = waiting.find(r); it != waiting.end()) {
        out->set_state(v1::MEMBER_STATE_IN_ROUND);
        out->set_round(it->second);
      }
    }
    out->set_incarnation(m.incarnation);
    out->set_pid(m.pid);
    *out->mutable_device() = m.device;
    out->set_detail(m.detail);
    if (m.state == v1::MEMBER_STATE_JOINED) out->set_epoch(m.epoch);
  }
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    v1::NodeStatus* out = list.add_nodes();
    out->set_node_index(n);
    out->set_state(node.state);
    out->set_hostname(node.info.hostname());
    out->set_address(node.info.address());
    out->set_heartbeat_age_ms(
        node.state == v1::NODE_STATE_NOT_REGISTERED
            ? -1
            : absl::ToInt64Milliseconds(now - node.last_heartbeat));
    out->set_detail(node.detail);
  }
  return list;
}

std::optional<std::string> Coordinator::PeekKey(const std::string& key) const {
  return kv_.Peek(key);
}

}  // namespace rankd
