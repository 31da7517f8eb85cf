#include "daemon/node/node_agent.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/error_reason.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "common/rank_list.h"
#include "daemon/coordinator/kv_store.h"
#include "daemon/coordinator/word_rounds.h"
#include "daemon/request_limits.h"

namespace rankd {
namespace {

absl::Status AbortedBy(const std::string& cause) {
  return absl::AbortedError(absl::StrCat("job failed: ", cause));
}

// The device a join records: a "cuda" one with a negative index ("the
// session decides", as for a rank that names no local slot) is the GPU of
// the slot it got, the default-device rule's choice on a multi-GPU node.
v1::DeviceInfo DeviceOfSlot(v1::DeviceInfo device, uint32_t local_rank) {
  if (device.kind() == "cuda" && device.index() < 0) {
    device.set_index(static_cast<int32_t>(local_rank));
  }
  return device;
}

}  // namespace

std::string RankCaller::Describe() const {
  if (connection.empty()) return "this daemon";
  if (!absl::StartsWith(connection, "unix#")) return connection;
  std::string who = pid > 0 ? absl::StrCat("pid ", pid) : "a process";
  if (uid.has_value()) absl::StrAppend(&who, " (uid ", *uid, ")");
  return absl::StrCat(who, " on the Unix socket (connection ",
                      connection.substr(5), ")");
}

absl::StatusOr<std::unique_ptr<NodeAgent>> NodeAgent::Create(
    JobSpec spec, v1::NodeInfo node, CoordinatorLink* link,
    DeadlineTimer* timer) {
  auto groups = DeriveGroups(spec.topology, spec.world_size);
  if (!groups.ok()) return groups.status();
  return std::unique_ptr<NodeAgent>(new NodeAgent(
      std::move(spec), *std::move(groups), std::move(node), link, timer));
}

NodeAgent::NodeAgent(JobSpec spec, std::vector<GroupSpec> groups,
                     v1::NodeInfo node, CoordinatorLink* link,
                     DeadlineTimer* timer)
    : spec_(std::move(spec)),
      groups_(std::move(groups)),
      node_(std::move(node)),
      started_(MonotonicNow()),
      link_(link),
      timer_(timer),
      replica_(spec_),
      rounds_(spec_.nproc_per_node, timer, [this](LocalRounds::Batch batch) {
        SendBatch(std::move(batch));
      }) {}

NodeAgent::~NodeAgent() = default;

void NodeAgent::Start(absl::Time register_deadline,
                      std::function<void(absl::Status)> done) {
  v1::RegisterNodeRequest request;
  *request.mutable_config() = ToJobConfig(spec_);
  *request.mutable_node() = node_;
  link_->Start(
      request, register_deadline, this,
      [this, done](absl::StatusOr<v1::RegisterNodeResponse> result) {
        std::vector<std::function<void(absl::Status)>> queued;
        absl::Status status = result.status();
        {
          absl::MutexLock lock(&mu_);
          if (result.ok()) {
            registered_ = true;
            job_incarnation_ = result->job_incarnation();
          } else {
            registration_ = absl::Status(
                result.status().code(),
                absl::StrCat("node ", node_.node_index(),
                             " could not register with the coordinator at ",
                             link_->coordinator_address(), ": ",
                             result.status().message()));
            status = registration_;
          }
          queued.swap(until_registered_);
        }
        for (auto& work : queued) work(status);
        done(status);
      });
}

bool NodeAgent::registered() const {
  absl::MutexLock lock(&mu_);
  return registered_ && !shutting_down_;
}

v1::NodeRef NodeAgent::NodeRefLocked() const {
  v1::NodeRef ref;
  ref.set_job_id(spec_.job_id);
  ref.set_node_index(node_.node_index());
  ref.set_daemon_incarnation(node_.daemon_incarnation());
  return ref;
}

absl::Status NodeAgent::FailureLocked() const {
  if (!failure_.empty()) return AbortedBy(failure_);
  if (shutting_down_) {
    return absl::UnavailableError(absl::StrCat(
        "the rankd daemon of node ", node_.node_index(), " is shutting down"));
  }
  return absl::OkStatus();
}

absl::Status NodeAgent::CheckMember(const v1::MemberRef& member) const {
  absl::MutexLock lock(&mu_);
  return CheckMemberLocked(member);
}

absl::Status NodeAgent::CheckMemberLocked(const v1::MemberRef& member) const {
  if (auto s = CheckJobId(member.job_id(), spec_.job_id, "daemon"); !s.ok()) {
    return s;
  }
  auto it = members_.find(member.rank());
  if (it == members_.end() || it->second.state == LocalState::kJoining) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", member.rank(), " has not joined through this daemon (node ",
        node_.node_index(), "); call Join first"));
  }
  const LocalMember& m = it->second;
  if (m.incarnation != member.incarnation()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d: incarnation %x is stale (the rank joined with another); a "
        "restarted process must not reuse its predecessor's membership",
        member.rank(), member.incarnation()));
  }
  if (m.state == LocalState::kLeft) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", member.rank(), " has left the job"));
  }
  if (auto s = FailureLocked(); !s.ok()) return s;
  if (m.state == LocalState::kLost) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", member.rank(), " was declared lost"));
  }
  // Behind only: a join into the new epoch may be answered before its
  // event reaches this daemon (the coordinator checks exactly).
  // With recovery by domain, the epoch of the rank's own domain.
  const uint64_t current = replica_.EpochOfRank(member.rank());
  if (m.epoch < current) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "rank ", member.rank(), " joined into epoch ", m.epoch,
            replica_.by_domain()
                ? absl::StrCat(" but its domain ",
                               replica_.domain_of(member.rank()),
                               " is at epoch ", current)
                : absl::StrCat(" but the job is at epoch ", current, " (",
                               v1::JobState_Name(replica_.job_state()), ")"),
            "; a process of an earlier epoch cannot act in a later one: join "
            "again with the same incarnation to enter epoch ",
            current)),
        ErrorReason::kEpochFenced);
  }
  return absl::OkStatus();
}

template <typename T>
Reply<T> NodeAgent::Relay(Reply<T> reply) {
  return [this, reply = std::move(reply)](absl::StatusOr<T> result) {
    if (result.ok()) return reply(std::move(result));
    // A forwarded call that finds the coordinator unreachable means the
    // coordinator is gone (the event stream breaks at the same moment).
    if (result.status().code() == absl::StatusCode::kUnavailable) {
      bool shutting_down;
      {
        absl::MutexLock lock(&mu_);
        shutting_down = shutting_down_;
      }
      if (!shutting_down)
        OnCoordinatorLost(std::string(result.status().message()));
    }
    std::string failure;
    {
      absl::MutexLock lock(&mu_);
      failure = failure_;
    }
    if (!failure.empty() &&
        result.status().code() != absl::StatusCode::kAborted) {
      return reply(AbortedBy(failure));
    }
    reply(std::move(result));
  };
}

uint32_t NodeAgent::JoinRankOf(const v1::JoinRequest& request) const {
  return request.has_rank()
             ? request.rank()
             : node_.node_index() * spec_.nproc_per_node + request.local_rank();
}

absl::Status NodeAgent::CheckCaller(uint32_t rank, const Caller& caller) const {
  if (caller.connection.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto it = members_.find(rank);
  // Only a live member is worth impersonating: a call for one that left,
  // was lost or whose job failed is refused by its own checks, with the
  // cause (which a restarted process should hear).
  if (it == members_.end() || !failure_.empty() || !it->second.live()) {
    return absl::OkStatus();
  }
  const Caller& bound = it->second.bound;
  if (bound.connection.empty() || bound.connection == caller.connection) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "rank ", rank, " joined through ", bound.Describe(),
      " and acts only through that connection; this call came from ",
      caller.Describe()));
}

void NodeAgent::Join(const v1::JoinRequest& request,
                     Reply<v1::JoinResponse> reply, Caller caller,
                     CancellationRef cancellation) {
  if (auto s = CheckJobId(request.job_id(), spec_.job_id, "daemon"); !s.ok()) {
    return reply(s);
  }
  if (request.world_size() != 0 && request.world_size() != spec_.world_size) {
    return reply(absl::InvalidArgumentError(absl::StrCat(
        "world_size ", request.world_size(), " does not match job '",
        spec_.job_id, "', which has ", spec_.world_size, " ranks")));
  }
  if (request.has_local_rank() &&
      request.local_rank() >= spec_.nproc_per_node) {
    return reply(absl::InvalidArgumentError(absl::StrCat(
        "local_rank ", request.local_rank(), " is outside [0, ",
        spec_.nproc_per_node, ") (the daemon's --nproc_per_node)")));
  }
  if (request.has_rank() && request.rank() >= spec_.world_size) {
    return reply(absl::InvalidArgumentError(
        absl::StrCat("rank ", request.rank(), " is outside the world of size ",
                     spec_.world_size)));
  }
  if (request.incarnation() == 0) {
    return reply(absl::InvalidArgumentError(
        "incarnation must be a random non-zero id chosen at process start"));
  }
  if (auto s = CheckOptionalTimeoutMs(request.wait_for_world_ms(),
                                      "wait_for_world_ms");
      !s.ok()) {
    return reply(s);
  }
  if (auto s = CheckDevice(request.device()); !s.ok()) return reply(s);
  const std::string& kind = request.device().kind();
  if (!kind.empty() && kind != "cpu" && kind != "cuda") {
    return reply(absl::InvalidArgumentError(absl::StrCat(
        "device kind '", kind, "' is not one of \"cpu\", \"cuda\"")));
  }
  const uint32_t rank = JoinRankOf(request);
  absl::Status early;
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    early = registration_.ok() ? FailureLocked() : registration_;
    if (early.ok() && !registered_) {
      until_registered_.push_back([this, request, rank, reply, caller,
                                   cancellation](absl::Status registered) {
        if (!registered.ok()) return reply(registered);
        ForwardJoin(request, rank, reply, caller, cancellation);
      });
      queued = true;
    }
  }
  if (!early.ok()) return reply(early);
  if (queued) return;
  ForwardJoin(request, rank, std::move(reply), std::move(caller),
              std::move(cancellation));
}

bool NodeAgent::SlotFreeForLocked(uint32_t local, uint32_t rank) const {
  auto held = rank_of_local_.find(local);
  if (held == rank_of_local_.end() || held->second == rank) return true;
  auto holder = members_.find(held->second);
  return holder == members_.end() || !holder->second.live();
}

absl::StatusOr<uint32_t> NodeAgent::LocalRankOfLocked(
    const v1::JoinRequest& request, uint32_t rank) const {
  if (request.has_local_rank() || !request.has_rank()) {
    return request.local_rank();
  }
  // A process that names only its rank: the slot its rank held here
  // before (a replacement takes its predecessor's) unless another rank
  // took it since, else the rank's default slot when this node's block
  // holds the rank and the slot is free, else the lowest free one.
  if (auto it = members_.find(rank);
      it != members_.end() && SlotFreeForLocked(it->second.local_rank, rank)) {
    return it->second.local_rank;
  }
  const uint32_t nproc = spec_.nproc_per_node;
  if (rank / nproc == node_.node_index() &&
      SlotFreeForLocked(rank % nproc, rank)) {
    return rank % nproc;
  }
  for (uint32_t local = 0; local < nproc; ++local) {
    if (SlotFreeForLocked(local, rank)) return local;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("rank ", rank, " names no local_rank and every one of node ",
                   node_.node_index(), "'s ", nproc,
                   " local ranks is held (--nproc_per_node)"));
}

void NodeAgent::ForwardJoin(const v1::JoinRequest& request, uint32_t rank,
                            Reply<v1::JoinResponse> reply, Caller caller,
                            CancellationRef cancellation) {
  v1::JoinRankRequest forward;
  uint32_t local_rank = 0;
  {
    absl::ReleasableMutexLock lock(&mu_);
    absl::StatusOr<uint32_t> slot = LocalRankOfLocked(request, rank);
    if (!slot.ok()) {
      lock.Release();
      return reply(slot.status());
    }
    local_rank = *slot;
    *forward.mutable_device() = DeviceOfSlot(request.device(), local_rank);
    auto local = rank_of_local_.find(local_rank);
    auto held_by = local == rank_of_local_.end() ? members_.end()
                                                 : members_.find(local->second);
    if (held_by != members_.end()) {
      const uint32_t held = held_by->first;
      const LocalMember& holder = held_by->second;
      const bool live = holder.live();
      if (live && holder.incarnation == request.incarnation() && held != rank) {
        lock.Release();
        return reply(absl::InvalidArgumentError(absl::StrCat(
            "local rank ", local_rank, " on node ", node_.node_index(),
            " already holds rank ", held,
            "; the same process cannot join rank ", rank, " with it")));
      }
      if (live && holder.incarnation != request.incarnation()) {
        const uint32_t pid = holder.pid;
        lock.Release();
        return reply(absl::AlreadyExistsError(absl::StrFormat(
            "local rank %d on node %d is already held by pid %d (rank %d); "
            "two processes claim it",
            local_rank, node_.node_index(), pid, held)));
      }
    }
    if (auto it = members_.find(rank); it != members_.end()) {
      const LocalMember& holder = it->second;
      if (holder.incarnation == request.incarnation() &&
          holder.local_rank != local_rank) {
        const uint32_t held = holder.local_rank;
        lock.Release();
        return reply(absl::InvalidArgumentError(
            absl::StrCat("rank ", rank, " joined as local rank ", held,
                         " on node ", node_.node_index(),
                         "; the same process cannot join it again as "
                         "local rank ",
                         local_rank)));
      }
      // Recovery off: refused here, as before epochs, with the record kept.
      const bool replaces_lost = spec_.recovery &&
                                 holder.incarnation != request.incarnation() &&
                                 holder.state == LocalState::kLost;
      if (replaces_lost) {
        // A replacement for a lost rank: the coordinator decides whether
        // the job recovers (it refuses unless RECOVERING). The slot binds
        // to the replacement's connection.
        timer_->Cancel(holder.lease_timer);
        if (auto l = rank_of_local_.find(holder.local_rank);
            l != rank_of_local_.end() && l->second == rank) {
          rank_of_local_.erase(l);
        }
        LocalMember& m = it->second;
        m = LocalMember();
        m.state = LocalState::kJoining;
        m.local_rank = local_rank;
        m.incarnation = request.incarnation();
        m.pid = request.pid();
        m.device = forward.device();
        m.bound = std::move(caller);
        rank_of_local_[local_rank] = rank;
      } else if (holder.incarnation != request.incarnation()) {
        const bool live = holder.live();
        lock.Release();
        if (live) {
          return reply(absl::AlreadyExistsError(absl::StrFormat(
              "rank %d is already held by pid %d on node %d; two processes "
              "claim it",
              rank, holder.pid, node_.node_index())));
        }
        return reply(absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank,
            " already ran in this job incarnation; a restarted process "
            "cannot rejoin: recreate the whole group")));
      }
    } else {
      LocalMember& m = members_[rank];
      m.state = LocalState::kJoining;
      m.local_rank = local_rank;
      m.incarnation = request.incarnation();
      m.pid = request.pid();
      m.device = forward.device();
      // The first join of a slot binds it: from now on only this
      // connection acts for the rank.
      m.bound = std::move(caller);
      rank_of_local_[local_rank] = rank;
    }
    LocalMember& joining = members_.at(rank);
    if (joining.joins_in_flight >= kMaxJoinsInFlightPerRank) {
      const uint32_t in_flight = joining.joins_in_flight;
      lock.Release();
      return reply(absl::ResourceExhaustedError(
          absl::StrCat("rank ", rank, " has ", in_flight,
                       " joins waiting for their answer already; the limit is ",
                       kMaxJoinsInFlightPerRank, " per process")));
    }
    ++joining.joins_in_flight;
    *forward.mutable_node() = NodeRefLocked();
  }
  forward.set_rank(rank);
  forward.set_local_rank(local_rank);
  forward.set_incarnation(request.incarnation());
  forward.set_pid(request.pid());
  forward.set_wait_for_world_ms(request.wait_for_world_ms());
  const uint64_t incarnation = request.incarnation();
  const bool waited = request.wait_for_world_ms() > 0;
  if (waited && cancellation != nullptr) {
    // Only a join still waiting is released (CancelJoin checks): a caller
    // that goes away once answered is a Watch's business.
    cancellation->OnCancel(
        [this, rank, incarnation] { CancelJoin(rank, incarnation); });
  }
  link_->JoinRank(
      forward,
      Relay<v1::JoinRankResponse>([this, rank, incarnation, local_rank, waited,
                                   reply](absl::StatusOr<v1::JoinRankResponse>
                                              result) {
        absl::ReleasableMutexLock lock(&mu_);
        auto it = members_.find(rank);
        if (it == members_.end() || it->second.incarnation != incarnation) {
          lock.Release();
          return reply(absl::AbortedError(
              absl::StrCat("rank ", rank, " changed while joining")));
        }
        LocalMember& m = it->second;
        if (m.joins_in_flight > 0) --m.joins_in_flight;
        // A join whose wait for the world timed out, or whose epoch
        // ended while it waited (another loss: marked kEpochEnded),
        // still holds its rank at the coordinator; keep it, leased, so
        // that a process that gives up is noticed (and its slot freed
        // for the next process of the rank).
        bool keep =
            result.ok() ||
            (waited &&
             (result.status().code() == absl::StatusCode::kDeadlineExceeded ||
              ReasonOf(result.status()) == ErrorReason::kEpochEnded));
        if (!keep) {
          if (m.state == LocalState::kJoining) {
            members_.erase(it);
            // Only this rank's own mapping.
            if (auto l = rank_of_local_.find(local_rank);
                l != rank_of_local_.end() && l->second == rank) {
              rank_of_local_.erase(l);
            }
          }
          lock.Release();
          return reply(result.status());
        }
        if (m.state == LocalState::kJoining) m.state = LocalState::kJoined;
        if (result.ok()) job_incarnation_ = result->job_incarnation();
        // The epoch it joined into (a coordinator that names none has
        // one; a join kept after its wait timed out is in this
        // daemon's view of it, which the coordinator checks exactly).
        const uint64_t joined_into =
            !result.ok()
                ? std::max<uint64_t>(m.epoch, replica_.EpochOfRank(rank))
            : result->epoch() != 0 ? result->epoch()
                                   : uint64_t{1};
        // Recovery by domain: the coordinator names the rank's next
        // world round (its domain's entry round; 0 until its domain is
        // whole, then DOMAIN_READY names it), and the node's rounds
        // are not restarted: other domains' ranks go on in them.
        const bool by_domain =
            replica_.by_domain() ||
            (result.ok() && (result->recovery_by_domain() ||
                             result->first_world_round() != 0));
        recovery_by_domain_ = recovery_by_domain_ || by_domain;
        recovers_in_place_ =
            recovers_in_place_ || (result.ok() && result->recovers_in_place());
        if (m.epoch == 0 || joined_into != m.epoch) {
          if (result.ok() && by_domain) {
            m.next_round = result->first_world_round();
            // Answered while its domain recovered, but its DOMAIN_READY
            // may have reached this daemon first.
            const JobReplica::Domain& d =
                replica_.domain(replica_.domain_of(rank));
            if (m.next_round == 0 && !d.recovering && d.epoch == joined_into) {
              m.next_round = d.first_world_round;
            }
          } else if (m.epoch != 0) {
            // A survivor's join again into a new epoch: its rounds are
            // numbered afresh.
            m.next_round = 1;
          }
        }
        m.epoch = joined_into;
        LeaseLocked(m, rank);
        if (!result.ok()) {
          lock.Release();
          return reply(result.status());
        }
        v1::JoinResponse response;
        *response.mutable_session() =
            BuildSessionDescriptor(spec_, groups_, job_incarnation_, rank,
                                   node_.node_index(), m.local_rank);
        response.mutable_session()->set_epoch(m.epoch);
        response.mutable_session()->set_recovers_in_place(recovers_in_place_);
        if (by_domain) {
          response.set_recovery_by_domain(true);
          response.mutable_session()->set_recovery_by_domain(true);
          response.set_first_world_round(m.next_round);
        }
        v1::MemberRef* member = response.mutable_member();
        member->set_job_id(spec_.job_id);
        member->set_rank(rank);
        member->set_incarnation(incarnation);
        const uint64_t epoch = m.epoch;
        lock.Release();
        if (by_domain) return reply(std::move(response));
        // A join into a new epoch may be answered before its
        // JOB_RECOVERING event reaches this daemon: the ended epoch's
        // rounds held here go first, so that none of them is taken for
        // a round of the new one (Restart counts once per epoch).
        rounds_.Restart(epoch,
                        absl::AbortedError(absl::StrCat(
                            "epoch ", epoch - 1, " ended; the job is at epoch ",
                            epoch, " (a loss; see the job's events)")));
        reply(std::move(response));
      }));
}

absl::StatusOr<v1::SessionDescriptor> NodeAgent::GetDescriptor(
    const v1::GetDescriptorRequest& request) {
  absl::MutexLock lock(&mu_);
  if (auto s = CheckMemberLocked(request.member()); !s.ok()) return s;
  const LocalMember& m = members_.at(request.member().rank());
  v1::SessionDescriptor session = BuildSessionDescriptor(
      spec_, groups_, job_incarnation_, request.member().rank(),
      node_.node_index(), m.local_rank);
  session.set_epoch(m.epoch);
  session.set_recovers_in_place(recovers_in_place_);
  session.set_recovery_by_domain(recovery_by_domain_);
  return session;
}

void NodeAgent::LeaseLocked(LocalMember& m, uint32_t rank) {
  if (m.open_watches > 0 || m.lease_timer != 0) return;
  m.lease_timer = timer_->Schedule(MonotonicNow() + spec_.heartbeat_timeout,
                                   [this, rank, incarnation = m.incarnation] {
                                     ExpireLease(rank, incarnation);
                                   });
}

void NodeAgent::ExpireLease(uint32_t rank, uint64_t incarnation) {
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(rank);
    if (it == members_.end() || it->second.incarnation != incarnation) return;
    it->second.lease_timer = 0;
    if (it->second.state != LocalState::kJoined ||
        it->second.open_watches > 0 || shutting_down_) {
      return;
    }
  }
  LoseRank(rank, incarnation,
           absl::StrCat("it had no Watch stream open for ",
                        absl::ToInt64Milliseconds(spec_.heartbeat_timeout),
                        " ms after joining or after its last one ended (a "
                        "joined process must stay connected to its daemon)"));
}

void NodeAgent::CancelJoin(uint32_t rank, uint64_t incarnation) {
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(rank);
    if (it == members_.end() || it->second.incarnation != incarnation ||
        it->second.state != LocalState::kJoining || shutting_down_) {
      return;
    }
    // The coordinator holds the rank (its join waits there): released as
    // a loss, as a joined process that went away is.
    it->second.state = LocalState::kJoined;
  }
  LoseRank(rank, incarnation,
           absl::StrCat("its process went away while its join waited for the "
                        "world (its connection to the rankd daemon on node ",
                        node_.node_index(), " closed)"));
}

void NodeAgent::LoseRank(uint32_t rank, uint64_t incarnation,
                         const std::string& reason) {
  v1::ReleaseRankRequest release;
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(rank);
    if (it == members_.end() || it->second.incarnation != incarnation ||
        it->second.state != LocalState::kJoined) {
      return;
    }
    it->second.state = LocalState::kLost;
    *release.mutable_node() = NodeRefLocked();
  }
  release.set_rank(rank);
  release.set_incarnation(incarnation);
  release.set_clean(false);
  release.set_reason(reason);
  link_->ReleaseRank(release,
                     Relay<v1::ReleaseRankResponse>(
                         [](absl::StatusOr<v1::ReleaseRankResponse>) {}));
}

void NodeAgent::AllGatherWords(const v1::AllGatherWordsRequest& request,
                               Reply<v1::AllGatherWordsResponse> reply,
                               const CancellationRef& cancellation) {
  const uint32_t rank = request.member().rank();
  if (request.round() == 0) {
    return reply(absl::InvalidArgumentError(
        "round 0 is not a round number: rounds are numbered 1, 2, 3... per "
        "rank"));
  }
  if (auto s = CheckFrameWords(request.words_size(), spec_.world_size);
      !s.ok()) {
    return reply(s);
  }
  if (auto s = CheckTimeoutMs(request.timeout_ms(), "timeout_ms"); !s.ok()) {
    return reply(s);
  }
  const size_t bytes = sizeof(uint32_t) * request.words_size();
  const uint64_t incarnation = request.member().incarnation();
  {
    absl::ReleasableMutexLock lock(&mu_);
    if (auto s = CheckMemberLocked(request.member()); !s.ok()) {
      lock.Release();
      return reply(s);
    }
    LocalMember& m = members_.at(rank);
    if (m.next_round == 0) {
      // Recovery by domain: joined into its domain's new epoch before the
      // domain was whole; the DOMAIN_READY event names its next round.
      const uint32_t domain = replica_.domain_of(rank);
      lock.Release();
      return reply(absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, "'s domain ", domain,
          " is recovering: its world rounds resume once the domain is whole "
          "(EVENT_KIND_DOMAIN_READY names the round; a join waiting for the "
          "world answers it as first_world_round)")));
    }
    if (request.round() != m.next_round) {
      uint64_t expected = m.next_round;
      lock.Release();
      return reply(absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, " sent all_gather_words round ",
                       request.round(), " but its next round is ", expected,
                       " (rounds are numbered 1, 2, 3... per rank)")));
    }
    // What one rank makes this daemon hold for its rounds is bounded, so
    // that no rank can exhaust its memory: a round waits here for the
    // node's other ranks (up to its deadline, an hour at most). A refused
    // round still takes its number: the rank sent it (its peers' round
    // then misses it, as any round the rank abandons), and its next rounds
    // are refused for the same reason, not for their numbers.
    ++m.next_round;
    if (m.rounds_in_flight >= WordRounds::kMaxOpenRounds) {
      const uint32_t held = m.rounds_in_flight;
      lock.Release();
      return reply(absl::ResourceExhaustedError(absl::StrCat(
          "rank ", rank, " has ", held,
          " all_gather_words rounds in flight on node ", node_.node_index(),
          "; the limit is ", WordRounds::kMaxOpenRounds, " per rank (round ",
          request.round(), " refused; wait for earlier rounds' answers)")));
    }
    const size_t max_bytes = spec_.limits.max_round_bytes_per_rank;
    if (m.round_bytes + bytes > max_bytes) {
      const size_t held = m.round_bytes;
      const uint32_t rounds = m.rounds_in_flight;
      lock.Release();
      return reply(absl::ResourceExhaustedError(absl::StrCat(
          "rank ", rank, "'s ", rounds,
          " all_gather_words rounds in flight hold ", held,
          " bytes of frames on node ", node_.node_index(), "; round ",
          request.round(), "'s ", bytes, " more would pass the limit of ",
          max_bytes, " bytes per rank (--max_round_bytes_per_rank)")));
    }
    m.waiting_round = request.round();
    ++m.rounds_in_flight;
    m.round_bytes += bytes;
  }
  // Answers the rank once, whichever comes first (the round's result or
  // the rank's cancellation), and gives back what the round held.
  auto answered = std::make_shared<std::atomic<bool>>(false);
  Reply<v1::AllGatherWordsResponse> finish =
      [this, rank, incarnation, bytes, answered, reply = std::move(reply)](
          absl::StatusOr<v1::AllGatherWordsResponse> result) {
        if (answered->exchange(true)) return;
        {
          absl::MutexLock lock(&mu_);
          auto it = members_.find(rank);
          if (it != members_.end() && it->second.incarnation == incarnation) {
            --it->second.rounds_in_flight;
            it->second.round_bytes -= bytes;
          }
        }
        reply(std::move(result));
      };
  const uint64_t number = request.round();
  v1::RankFrame frame;
  frame.set_rank(rank);
  *frame.mutable_words() = request.words();
  rounds_.Contribute(number, std::move(frame), {rank, finish},
                     absl::Milliseconds(request.timeout_ms()));
  // After the frame is in: a call cancelled already withdraws it at once,
  // instead of leaving it for its deadline with nothing counted against
  // the rank.
  if (cancellation != nullptr) {
    cancellation->OnCancel([this, number, rank, finish] {
      // A frame still waiting here for the node's other ranks is dropped
      // (the round then misses this rank, as if it never sent it); one
      // already with the coordinator stays there until the round ends.
      rounds_.Withdraw(number, rank);
      finish(absl::CancelledError(absl::StrCat(
          "rank ", rank, " cancelled all_gather_words round ", number)));
    });
  }
}

void NodeAgent::SendBatch(LocalRounds::Batch batch) {
  std::map<uint32_t, LocalRounds::Batch> by_domain;  // domain -> its part
  {
    absl::MutexLock lock(&mu_);
    if (recovery_by_domain_ || replica_.by_domain()) {
      // One waiter per frame, in the same order.
      for (size_t i = 0; i < batch.frames.size(); ++i) {
        const uint32_t rank = batch.frames[i].rank();
        auto [it, inserted] = by_domain.try_emplace(
            rank < replica_.world_size() ? replica_.domain_of(rank) : 0);
        LocalRounds::Batch& part = it->second;
        if (inserted) {
          part.round = batch.round;
          part.opened = batch.opened;
          part.deadline = batch.deadline;
        }
        part.frames.push_back(std::move(batch.frames[i]));
        part.waiters.push_back(std::move(batch.waiters[i]));
      }
    }
  }
  if (by_domain.empty()) return SendContribution(std::move(batch));
  for (auto& [domain, part] : by_domain) SendContribution(std::move(part));
}

void NodeAgent::SendContribution(LocalRounds::Batch batch) {
  const uint64_t number = batch.round;
  v1::ContributeWordsRequest request;
  {
    absl::MutexLock lock(&mu_);
    *request.mutable_node() = NodeRefLocked();
  }
  request.set_round(number);
  for (auto& f : batch.frames) *request.add_frames() = std::move(f);
  const absl::Time now = MonotonicNow();
  int64_t remaining_ms = absl::ToInt64Milliseconds(batch.deadline - now);
  request.set_timeout_ms(
      static_cast<uint32_t>(std::max<int64_t>(remaining_ms, 1)));
  request.set_waited_ms(static_cast<uint32_t>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(now - batch.opened), 0,
                          std::numeric_limits<uint32_t>::max())));
  auto shared_waiters = std::make_shared<std::vector<LocalRounds::Waiter>>(
      std::move(batch.waiters));
  link_->ContributeWords(
      request, Relay<v1::AllGatherWordsResponse>(
                   [this, number, shared_waiters](
                       absl::StatusOr<v1::AllGatherWordsResponse> result) {
                     {
                       absl::MutexLock lock(&mu_);
                       for (const LocalRounds::Waiter& w : *shared_waiters) {
                         auto it = members_.find(w.rank);
                         if (it != members_.end() &&
                             it->second.waiting_round == number) {
                           it->second.waiting_round = 0;
                         }
                       }
                       if (result.ok() && number > completed_rounds_) {
                         completed_rounds_ = number;
                       }
                     }
                     for (LocalRounds::Waiter& w : *shared_waiters) {
                       w.reply(result);
                     }
                   }));
}

absl::Status NodeAgent::AdmitKvCall(absl::Status arguments,
                                    const v1::MemberRef& member) const {
  if (!arguments.ok()) return arguments;
  absl::MutexLock lock(&mu_);
  return CheckMemberLocked(member);
}

void NodeAgent::KvSet(const v1::KvSetRequest& request,
                      Reply<v1::KvSetResponse> reply) {
  absl::Status arguments = KvStore::ValidateKey(request.key());
  if (arguments.ok()) arguments = KvStore::ValidateValue(request.value());
  if (arguments.ok() && request.has_expected()) {
    arguments = KvStore::ValidateValue(request.expected());
  }
  if (auto s = AdmitKvCall(arguments, request.member()); !s.ok()) {
    return reply(s);
  }
  link_->KvSet(request, Relay(std::move(reply)));
}

void NodeAgent::KvGet(const v1::KvGetRequest& request,
                      Reply<v1::KvGetResponse> reply,
                      const CancellationRef& cancellation) {
  absl::Status arguments = KvStore::ValidateKey(request.key());
  if (arguments.ok()) {
    arguments = CheckOptionalTimeoutMs(request.timeout_ms(), "timeout_ms");
  }
  if (auto s = AdmitKvCall(arguments, request.member()); !s.ok()) {
    return reply(s);
  }
  link_->KvGet(request, Relay(std::move(reply)), cancellation);
}

void NodeAgent::KvAdd(const v1::KvAddRequest& request,
                      Reply<v1::KvAddResponse> reply) {
  if (auto s =
          AdmitKvCall(KvStore::ValidateKey(request.key()), request.member());
      !s.ok()) {
    return reply(s);
  }
  link_->KvAdd(request, Relay(std::move(reply)));
}

void NodeAgent::KvDelete(const v1::KvDeleteRequest& request,
                         Reply<v1::KvDeleteResponse> reply) {
  absl::Status arguments = KvStore::ValidateKey(request.key());
  if (arguments.ok() && request.has_expected()) {
    arguments = KvStore::ValidateValue(request.expected());
  }
  if (auto s = AdmitKvCall(arguments, request.member()); !s.ok()) {
    return reply(s);
  }
  link_->KvDelete(request, Relay(std::move(reply)));
}

void NodeAgent::KvCount(const v1::KvCountRequest& request,
                        Reply<v1::KvCountResponse> reply) {
  absl::Status arguments;
  if (request.prefix().size() > KvStore::kMaxKeyBytes) {
    arguments = absl::InvalidArgumentError(
        absl::StrCat("prefix is ", request.prefix().size(),
                     " bytes; the limit is ", KvStore::kMaxKeyBytes));
  }
  if (auto s = AdmitKvCall(arguments, request.member()); !s.ok()) {
    return reply(s);
  }
  link_->KvCount(request, Relay(std::move(reply)));
}

void NodeAgent::Leave(const v1::LeaveRequest& request,
                      Reply<v1::LeaveResponse> reply) {
  const uint32_t rank = request.member().rank();
  v1::ReleaseRankRequest release;
  bool job_failed = false;
  {
    absl::ReleasableMutexLock lock(&mu_);
    absl::Status status = CheckMemberLocked(request.member());
    job_failed = !failure_.empty();
    auto it = members_.find(rank);
    bool known = it != members_.end() &&
                 it->second.incarnation == request.member().incarnation() &&
                 it->second.state != LocalState::kJoining;
    if (!status.ok() && !(job_failed && known)) {
      // Leaving twice is harmless.
      bool already_left = known && it->second.state == LocalState::kLeft;
      lock.Release();
      if (already_left) return reply(v1::LeaveResponse());
      return reply(status);
    }
    LocalMember& m = it->second;
    bool was_joined = m.state == LocalState::kJoined;
    m.state = LocalState::kLeft;
    timer_->Cancel(m.lease_timer);
    m.lease_timer = 0;
    if (!was_joined || job_failed) {
      lock.Release();
      return reply(v1::LeaveResponse());
    }
    *release.mutable_node() = NodeRefLocked();
  }
  release.set_rank(rank);
  release.set_incarnation(request.member().incarnation());
  release.set_clean(true);
  release.set_reason("left");
  link_->ReleaseRank(
      release, Relay<v1::ReleaseRankResponse>(
                   [reply](absl::StatusOr<v1::ReleaseRankResponse> result) {
                     if (!result.ok()) return reply(result.status());
                     reply(v1::LeaveResponse());
                   }));
}

absl::StatusOr<NodeAgent::WatchId> NodeAgent::Attach(
    const v1::WatchRequest& request, WatchSink sink) {
  WatchId id;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<WatchId> admitted = AdmitWatchLocked(request, sink);
    if (!admitted.ok()) return admitted.status();
    id = *admitted;
  }
  // The replay (up to the mirror's capacity of kept events, each copied
  // into the stream's queue) runs without the agent's lock, which every
  // rank request takes: a rank opening streams from sequence 0 must not
  // hold the others up. An event appended meanwhile is in the mirror by
  // then and is replayed, so none is missed.
  // A resume past what the mirror keeps is refused (OUT_OF_RANGE), not
  // answered with a gap; the admission is given back (and the rank leased
  // again, to open another stream in time).
  absl::StatusOr<EventLog::SubscriptionId> resumed =
      mirror_.Resume(request.after_sequence(), std::move(sink.on_event));
  if (!resumed.ok()) {
    Detach(id, /*broken=*/false, "its Watch was refused");
    return resumed.status();
  }
  const EventLog::SubscriptionId subscription = *resumed;
  absl::MutexLock lock(&mu_);
  // A Shutdown meanwhile closed the stream already: it gets no events
  // after its close (Detach, with this id, removes the rest).
  if (shutting_down_) {
    mirror_.Unsubscribe(subscription);
    return id;
  }
  // Only Detach removes a watch, and only with this id, which its stream
  // learns when this returns.
  watches_.at(id).subscription = subscription;
  return id;
}

absl::StatusOr<NodeAgent::WatchId> NodeAgent::AdmitWatchLocked(
    const v1::WatchRequest& request, WatchSink& sink) {
  const v1::MemberRef& member = request.member();
  if (auto s = CheckJobId(member.job_id(), spec_.job_id, "daemon"); !s.ok()) {
    return s;
  }
  auto it = members_.find(member.rank());
  if (it == members_.end() || it->second.state == LocalState::kJoining ||
      it->second.incarnation != member.incarnation()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d (incarnation %x) has not joined through this daemon (node "
        "%d)",
        member.rank(), member.incarnation(), node_.node_index()));
  }
  if (shutting_down_) return FailureLocked();
  LocalMember& m = it->second;
  // A rank that left has nothing to watch (its process may not hold new
  // streams on the daemon after it is done).
  if (m.state == LocalState::kLeft) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", member.rank(), " has left the job"));
  }
  if (m.open_watches >= spec_.limits.max_streams_per_caller) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rank ", member.rank(), " has ", m.open_watches,
        " Watch streams open already; the limit is ",
        spec_.limits.max_streams_per_caller, " (--max_streams_per_caller)"));
  }
  ++m.open_watches;
  timer_->Cancel(m.lease_timer);
  m.lease_timer = 0;
  WatchId id = next_watch_++;
  Watch& watch = watches_[id];
  watch.rank = member.rank();
  watch.incarnation = member.incarnation();
  watch.on_close = std::move(sink.on_close);
  watch.subscription = 0;  // none yet: Attach subscribes after this
  return id;
}

void NodeAgent::Detach(WatchId id, bool broken, const std::string& reason) {
  uint32_t rank = 0;
  uint64_t incarnation = 0;
  bool lose = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = watches_.find(id);
    if (it == watches_.end()) return;
    rank = it->second.rank;
    const uint64_t leased = it->second.incarnation;
    mirror_.Unsubscribe(it->second.subscription);
    watches_.erase(it);
    auto m = members_.find(rank);
    if (m == members_.end() || m->second.incarnation != leased) return;
    --m->second.open_watches;
    incarnation = m->second.incarnation;
    lose = broken && !shutting_down_ && m->second.open_watches == 0 &&
           m->second.state == LocalState::kJoined;
    // Its last Watch ended without the process going away (the daemon
    // closed it: a reader that fell too far behind): leased again, so
    // that the process opens another in time or is lost, and a process
    // that dies meanwhile is noticed.
    if (!lose && !shutting_down_ && m->second.state == LocalState::kJoined) {
      LeaseLocked(m->second, rank);
    }
  }
  if (lose) {
    LoseRank(rank, incarnation,
             absl::StrCat("its connection to the rankd daemon on node ",
                          node_.node_index(), " closed (", reason, ")"));
  }
}

void NodeAgent::OnEvent(const v1::JobEvent& event) {
  bool drained = false;
  {
    absl::MutexLock lock(&mu_);
    const v1::JobState before = replica_.job_state();
    replica_.Apply(event);
    drained = before != v1::JOB_STATE_DRAINING &&
              replica_.job_state() == v1::JOB_STATE_DRAINING;
  }
  mirror_.Mirror(event);
  if (drained && event.ranks_size() > 0) {
    // A rank left: no round can complete any more, so none waits here for
    // its deadline (the coordinator fails the rounds it holds likewise).
    // Not inline, as for a failure below.
    absl::Status left = absl::FailedPreconditionError(
        absl::StrCat("rank ", event.ranks(0),
                     " left the job; all_gather_words needs every rank"));
    timer_->Schedule(MonotonicNow(), [this, left] { rounds_.Close(left); });
  }
  if (event.kind() == v1::EVENT_KIND_JOB_RECOVERING) {
    // The epoch ended: what waits here for the node's other ranks fails
    // with the loss named, and rounds are numbered afresh. Not inline, as
    // for a failure below.
    absl::Status ended = absl::AbortedError(event.message());
    const uint64_t epoch = event.epoch();
    timer_->Schedule(MonotonicNow(),
                     [this, epoch, ended] { rounds_.Restart(epoch, ended); });
  }
  if (event.kind() == v1::EVENT_KIND_DOMAIN_RECOVERING ||
      event.kind() == v1::EVENT_KIND_DOMAIN_READY) {
    OnDomainEvent(event);
  }
  if (event.kind() == v1::EVENT_KIND_JOB_FAILED) {
    // Not inline: the coordinator may be calling with its lock held, and
    // failing waits can run callbacks that call back into it.
    std::string cause = event.message();
    timer_->Schedule(MonotonicNow(), [this, cause] { FailLocal(cause); });
  }
}

void NodeAgent::OnDomainEvent(const v1::JobEvent& event) {
  if (!event.has_domain() || event.domain() >= spec_.topology.data) return;
  std::set<uint32_t> ranks;  // this node's ranks of the domain
  {
    absl::MutexLock lock(&mu_);
    // Its slots on this node (a lost rank's member may be gone), and any
    // rank of it that joined here from elsewhere.
    const uint32_t size = DomainSizeOf(spec_.topology);
    for (uint32_t r = event.domain() * size; r < (event.domain() + 1) * size;
         ++r) {
      if (spec_.DefaultNodeOf(r) == node_.node_index()) ranks.insert(r);
    }
    for (auto& [rank, m] : members_) {
      if (!event.has_domain() || replica_.domain_of(rank) != event.domain()) {
        continue;
      }
      ranks.insert(rank);
      // Whole again: who joined into its epoch before that learns its
      // next world round.
      if (event.kind() == v1::EVENT_KIND_DOMAIN_READY &&
          m.epoch == event.epoch() && m.next_round == 0) {
        m.next_round = event.first_world_round();
      }
    }
  }
  if (ranks.empty()) return;
  // Not inline, as for a failure below; the timer runs these in the order
  // they were scheduled, so a domain's Drop always precedes its Resume.
  if (event.kind() == v1::EVENT_KIND_DOMAIN_READY) {
    // Whole again: its ranks take part from its entry round on.
    const uint64_t first = event.first_world_round();
    timer_->Schedule(MonotonicNow(),
                     [this, ranks, first] { rounds_.Resume(ranks, first); });
    return;
  }
  // The domain's epoch ended: its frames held here fail with the loss
  // named, and the node's other ranks go on in the same rounds without
  // waiting for its ranks.
  absl::Status ended = absl::AbortedError(event.message());
  timer_->Schedule(MonotonicNow(),
                   [this, ranks, ended] { rounds_.Drop(ranks, ended); });
}

void NodeAgent::OnCoordinatorLost(const std::string& reason) {
  FailJobLocally(absl::StrCat("coordinator lost: ", reason));
}

void NodeAgent::OnFenced(const std::string& reason) {
  if (!spec_.recovery) return OnCoordinatorLost(reason);
  {
    absl::MutexLock lock(&mu_);
    if (fenced_.empty()) fenced_ = reason;
  }
  FailJobLocally(absl::StrCat("this daemon may not serve node ",
                              node_.node_index(), " again and ends: ", reason));
}

std::string NodeAgent::fenced() const {
  absl::MutexLock lock(&mu_);
  return fenced_;
}

void NodeAgent::FailJobLocally(const std::string& cause) {
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_ || !failure_.empty() ||
        replica_.job_state() == v1::JOB_STATE_COMPLETED) {
      return;
    }
    replica_.MarkFailed();
  }
  v1::JobEvent failed;
  failed.set_kind(v1::EVENT_KIND_JOB_FAILED);
  failed.set_message(cause);
  {
    absl::MutexLock lock(&mu_);
    failed.set_epoch(replica_.epoch());
  }
  mirror_.Append(std::move(failed));
  FailLocal(cause);
}

void NodeAgent::FailLocal(const std::string& cause) {
  std::vector<std::function<void(absl::Status)>> queued;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!failure_.empty()) return;
    failure_ = cause;
    replica_.MarkFailed();
    queued.swap(until_registered_);
    status = AbortedBy(cause);
  }
  rounds_.Close(status);
  for (auto& q : queued) q(status);
}

void NodeAgent::Shutdown(const std::string& reason, absl::Duration grace) {
  std::vector<std::function<void(absl::Status)>> queued;
  std::vector<std::function<void(absl::Status)>> closers;
  bool registered;
  v1::LeaveNodeRequest leave;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    registered = registered_;
    queued.swap(until_registered_);
    for (auto& [id, watch] : watches_) closers.push_back(watch.on_close);
    for (auto& [rank, m] : members_) timer_->Cancel(m.lease_timer);
    *leave.mutable_node() = NodeRefLocked();
    leave.set_reason(reason);
  }
  absl::Status status = absl::UnavailableError(
      absl::StrCat("the rankd daemon of node ", node_.node_index(),
                   " is shutting down (", reason, ")"));
  rounds_.Close(status);
  for (auto& q : queued) q(status);
  if (registered) {
    auto done = std::make_shared<absl::Notification>();
    link_->LeaveNode(leave, [done](absl::StatusOr<v1::LeaveNodeResponse>) {
      done->Notify();
    });
    done->WaitForNotificationWithTimeout(grace);
  }
  link_->Stop();
  for (auto& close : closers) close(status);
}

v1::JobStatus NodeAgent::LocalJob() const {
  v1::JobStatus status;
  status.set_job_id(spec_.job_id);
  status.set_world_size(spec_.world_size);
  status.set_nnodes(spec_.nnodes);
  status.set_served_by_node(node_.node_index());
  status.set_coordinator_address(link_->coordinator_address());
  status.set_uptime_ms(absl::ToInt64Milliseconds(MonotonicNow() - started_));
  absl::MutexLock lock(&mu_);
  status.set_job_incarnation(job_incarnation_);
  status.set_state(replica_.job_state());
  status.set_epoch(replica_.epoch());
  if (replica_.by_domain()) {
    // As this daemon's events told it (no deadline: the coordinator's).
    uint32_t serving = 0;
    for (uint32_t d = 0; d < spec_.topology.data; ++d) {
      const JobReplica::Domain& domain = replica_.domain(d);
      v1::DomainStatus* out = status.add_domains();
      out->set_domain(d);
      out->set_state(domain.recovering ? v1::DOMAIN_STATE_RECOVERING
                                       : v1::DOMAIN_STATE_SERVING);
      out->set_epoch(domain.epoch);
      out->set_first_world_round(domain.first_world_round);
      if (!domain.recovering) ++serving;
    }
    status.set_serving_domains(serving);
  }
  status.set_failure(failure_);
  status.set_joined_ranks(replica_.joined_ranks());
  status.set_registered_nodes(replica_.registered_nodes());
  status.set_completed_rounds(completed_rounds_);
  status.set_open_local_rounds(static_cast<uint32_t>(rounds_.open()));
  return status;
}

v1::MemberList NodeAgent::LocalMembers() const {
  v1::MemberList list;
  absl::MutexLock lock(&mu_);
  for (uint32_t r = 0; r < replica_.world_size(); ++r) {
    const JobReplica::Member& replicated = replica_.member(r);
    v1::MemberStatus* out = list.add_members();
    out->set_rank(r);
    out->set_node_index(replicated.node_index);
    out->set_local_rank(r % spec_.nproc_per_node);
    out->set_state(replicated.state);
    out->set_round(completed_rounds_);
    if (replicated.state != v1::MEMBER_STATE_NOT_JOINED) {
      const v1::MemberDetails& d = replicated.details;
      out->set_local_rank(d.local_rank());
      out->set_incarnation(d.incarnation());
      out->set_pid(d.pid());
      *out->mutable_device() = d.device();
    }
    auto it = members_.find(r);
    if (it == members_.end()) continue;
    const LocalMember& m = it->second;
    out->set_local_rank(m.local_rank);
    out->set_incarnation(m.incarnation);
    out->set_pid(m.pid);
    *out->mutable_device() = m.device;
    if (m.state == LocalState::kJoined) out->set_epoch(m.epoch);
    if (m.waiting_round != 0 && replicated.state == v1::MEMBER_STATE_JOINED) {
      out->set_state(v1::MEMBER_STATE_IN_ROUND);
      out->set_round(m.waiting_round);
    }
  }
  for (uint32_t n = 0; n < replica_.nnodes(); ++n) {
    v1::NodeStatus* out = list.add_nodes();
    out->set_node_index(n);
    out->set_state(replica_.node_state(n));
    out->set_heartbeat_age_ms(-1);
    const v1::NodeInfo& info =
        n == node_.node_index() ? node_ : replica_.node_info(n);
    out->set_hostname(info.hostname());
    out->set_address(info.address());
  }
  return list;
}

v1::Topology NodeAgent::LocalTopology() const {
  v1::Topology topology = BuildTopology(spec_, groups_);
  absl::MutexLock lock(&mu_);
  for (uint32_t n = 0; n < spec_.nnodes; ++n) {
    v1::NodeInfo* info = topology.add_nodes();
    *info = n == node_.node_index() ? node_ : replica_.node_info(n);
    info->set_node_index(n);
  }
  return topology;
}

}  // namespace rankd
