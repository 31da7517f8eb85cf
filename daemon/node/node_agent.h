// NodeAgent: one daemon's side of the job. It serves the ranks of its node:
// validates their requests, assigns ranks, hands their all_gather_words
// frames to its LocalRounds (local_rounds.h: one message per round to the
// coordinator), forwards key-value operations, fans job events out to their
// Watch streams, and turns a broken Watch stream into a lost rank.
//
// It also keeps a JobReplica (job_replica.h) of the job's membership built
// from the coordinator's events, so any daemon can answer admin queries
// even when the coordinator is gone. After the job fails (event from the
// coordinator or coordinator lost), every pending and later wait fails at
// once with an Aborted status naming the cause. When the job moves to a
// new epoch (JOB_RECOVERING, coordinator.h), the rounds held here fail
// with the loss named, and each local rank acts again only once it joined
// into the new epoch (a Join with its own incarnation); a lost rank's slot
// takes its replacement (a new incarnation) through any connection.
//
// Transport-agnostic (the Rank gRPC service calls it). Replies never run
// with the agent's lock held. Thread-safe. Depends on CoordinatorLink, the
// daemon core, common/error_reason and the protos.
#ifndef RANKD_DAEMON_NODE_AGENT_H_
#define RANKD_DAEMON_NODE_AGENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/topology.h"
#include "daemon/coordinator/event_log.h"
#include "daemon/coordinator/job_spec.h"
#include "daemon/deadline_timer.h"
#include "daemon/node/coordinator_link.h"
#include "daemon/node/job_replica.h"
#include "daemon/node/local_rounds.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {

// Who sent a Rank call, as far as the daemon can tell: the connection it
// came on and, on the Unix socket, the process behind it. A rank is bound
// to the connection it joined on: a process that learned or stole
// another rank's identity still cannot act for it (docs/operations.md,
// "Credentials").
struct RankCaller {
  // Unique among the daemon's connections while they are open:
  // "unix#<n>" for the Unix socket's n-th connection, the TCP peer
  // ("ipv4:10.0.0.5:41234") otherwise. Empty for an in-process caller
  // (the round-slot watcher, tests): such a caller is bound to nothing
  // and binds nothing.
  std::string connection;
  // Unix socket: the connecting process (0: not visible from here).
  int32_t pid = 0;
  std::optional<uint32_t> uid;
  // "pid 42 (uid 1000) on the Unix socket", "ipv4:10.0.0.5:41234".
  std::string Describe() const;
};

class NodeAgent : public CoordinatorLink::Listener {
 public:
  // Joins of one rank's process that may wait at the coordinator at once:
  // each holds a waiter there and a call on the node's connection to it,
  // which the node's other ranks share.
  static constexpr uint32_t kMaxJoinsInFlightPerRank = 4;

  // This daemon's incarnation (NodeInfo.daemon_incarnation), fixed at
  // start: in its registration log line, for operators and tests.
  uint64_t daemon_incarnation() const { return node_.daemon_incarnation(); }

  using Caller = RankCaller;

  // A Watch stream's sink: `on_event` gets events in order; `on_close` ends
  // the stream (daemon shutdown, or the rank left). Neither may block or
  // call back into the agent.
  struct WatchSink {
    EventLog::Subscriber on_event;
    std::function<void(absl::Status)> on_close;
  };
  using WatchId = uint64_t;

  // `link` and `timer` must outlive the agent. `node` describes this node
  // (index, hostname, address, boot id, daemon incarnation).
  static absl::StatusOr<std::unique_ptr<NodeAgent>> Create(
      JobSpec spec, v1::NodeInfo node, CoordinatorLink* link,
      DeadlineTimer* timer);
  ~NodeAgent() override;

  // Registers with the coordinator (retrying until `register_deadline`).
  // `done` runs once with the outcome.
  void Start(absl::Time register_deadline,
             std::function<void(absl::Status)> done);
  // True once registered and until shutdown.
  bool registered() const;

  // --- Rank service ---
  // A join binds the rank to `caller`'s connection (see Caller).
  //
  // `cancellation` (may be null) is the call's: a join that waits for the
  // world and whose caller goes away meanwhile (its process died) releases
  // its rank as lost at once, rather than holding the slot at the
  // coordinator until its wait ends (up to an hour).
  void Join(const v1::JoinRequest& request, Reply<v1::JoinResponse> reply,
            Caller caller = {}, CancellationRef cancellation = nullptr);
  // The rank `request` joins as: its explicit rank, else node_index *
  // nproc_per_node + local_rank.
  uint32_t JoinRankOf(const v1::JoinRequest& request) const;
  // OK unless `rank` is a live member (joining or joined, the job not
  // failed) that joined through another connection than `caller`'s
  // (PermissionDenied naming both). OK otherwise: the call's own checks
  // refuse it with the cause. OK for in-process callers.
  absl::Status CheckCaller(uint32_t rank, const Caller& caller) const;
  absl::StatusOr<v1::SessionDescriptor> GetDescriptor(
      const v1::GetDescriptorRequest& request);
  // A rank holds at most WordRounds::kMaxOpenRounds rounds in flight and
  // spec.limits.max_round_bytes_per_rank bytes of frames in them
  // (ResourceExhausted beyond, naming the rank and the limit). A cancelled
  // `cancellation` (may be null) answers the round Cancelled at once and
  // releases what it held; a frame that has not left for the coordinator
  // yet is withdrawn.
  void AllGatherWords(const v1::AllGatherWordsRequest& request,
                      Reply<v1::AllGatherWordsResponse> reply,
                      const CancellationRef& cancellation = nullptr);
  // OK when `member` is a joined rank of this node with that incarnation
  // and the job has not failed: the check every rank request passes.
  absl::Status CheckMember(const v1::MemberRef& member) const;
  uint32_t world_size() const { return spec_.world_size; }
  void KvSet(const v1::KvSetRequest& request, Reply<v1::KvSetResponse> reply);
  // `cancellation` (may be null) releases the wait when the rank cancels.
  void KvGet(const v1::KvGetRequest& request, Reply<v1::KvGetResponse> reply,
             const CancellationRef& cancellation = nullptr);
  void KvAdd(const v1::KvAddRequest& request, Reply<v1::KvAddResponse> reply);
  void KvDelete(const v1::KvDeleteRequest& request,
                Reply<v1::KvDeleteResponse> reply);
  void KvCount(const v1::KvCountRequest& request,
               Reply<v1::KvCountResponse> reply);
  void Leave(const v1::LeaveRequest& request, Reply<v1::LeaveResponse> reply);
  // Opens a rank's Watch stream (its liveness lease). ResourceExhausted when
  // the rank holds spec.limits.max_streams_per_caller streams already;
  // FailedPrecondition once the rank left.
  absl::StatusOr<WatchId> Attach(const v1::WatchRequest& request,
                                 WatchSink sink);
  // The stream ended. When `broken` (the client went away) and the rank
  // has neither left nor another open stream, the rank is lost.
  void Detach(WatchId id, bool broken, const std::string& reason);

  // --- Admin views (this daemon's replica) ---
  v1::JobStatus LocalJob() const;
  v1::MemberList LocalMembers() const;
  // The job's layout and groups; nodes carry only what this daemon knows.
  v1::Topology LocalTopology() const;
  EventLog& events() { return mirror_; }

  // Leaves the job: tells the coordinator (bounded by `grace`), fails every
  // pending wait with Unavailable and closes every Watch stream.
  void Shutdown(const std::string& reason, absl::Duration grace);

  // Why the coordinator fenced this daemon (CoordinatorLink::Listener::
  // OnFenced) when the job recovers from losses (JobSpec::recovery); empty
  // otherwise. Once set, never changes: this daemon's ranks failed with the
  // reason and it may never serve the node again (the daemon ends:
  // common/exit_codes.h, kExitDaemonFenced).
  std::string fenced() const;

  // --- CoordinatorLink::Listener ---
  void OnEvent(const v1::JobEvent& event) override;
  void OnCoordinatorLost(const std::string& reason) override;
  // Without recovery, as OnCoordinatorLost (the job has failed; the daemon
  // stays to answer queries about it).
  void OnFenced(const std::string& reason) override;

 private:
  // Fails the job locally with `cause`: a JOB_FAILED event in the mirror and
  // every local wait failed (FailLocal).
  void FailJobLocally(const std::string& cause);
  enum class LocalState { kJoining, kJoined, kLeft, kLost };
  // Recovery by domain: a DOMAIN_RECOVERING drops the domain's frames held
  // here and the node's rounds stop waiting for its ranks; a DOMAIN_READY
  // gives its members their next round and brings its ranks back into the
  // node's rounds from the domain's entry round.
  void OnDomainEvent(const v1::JobEvent& event);
  struct LocalMember {
    LocalState state = LocalState::kJoining;
    uint32_t local_rank = 0;
    uint64_t incarnation = 0;
    uint32_t pid = 0;
    v1::DeviceInfo device;
    // The job epoch it joined into (0 while joining); rounds are numbered
    // from 1 in each epoch.
    uint64_t epoch = 0;
    uint64_t next_round = 1;
    uint64_t waiting_round = 0;  // 0 = not in a round
    uint32_t open_watches = 0;
    DeadlineTimer::TimerId lease_timer = 0;
    // The connection it joined on (see Caller).
    Caller bound;
    // all_gather_words rounds answered to nobody yet, and the bytes of
    // their frames (bounded, see AllGatherWords).
    uint32_t rounds_in_flight = 0;
    size_t round_bytes = 0;
    // Joins of this process forwarded to the coordinator and not answered
    // yet (a retry while one waits for the world adds one; bounded by
    // kMaxJoinsInFlightPerRank).
    uint32_t joins_in_flight = 0;
    // Joining or joined: the process holds its rank and slot.
    bool live() const {
      return state == LocalState::kJoining || state == LocalState::kJoined;
    }
  };

  NodeAgent(JobSpec spec, std::vector<GroupSpec> groups, v1::NodeInfo node,
            CoordinatorLink* link, DeadlineTimer* timer);

  v1::NodeRef NodeRefLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `member` is a joined rank of this node with that incarnation
  // and the job has not failed.
  absl::Status CheckMemberLocked(const v1::MemberRef& member) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A key-value call's admission: `arguments` (the request's own checks),
  // then, if they passed, CheckMemberLocked(member).
  absl::Status AdmitKvCall(absl::Status arguments,
                           const v1::MemberRef& member) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status FailureLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForwardJoin(const v1::JoinRequest& request, uint32_t rank,
                   Reply<v1::JoinResponse> reply, Caller caller,
                   CancellationRef cancellation);
  // The caller of a join of `rank` (`incarnation`) that still waits went
  // away: the rank is lost (Join).
  void CancelJoin(uint32_t rank, uint64_t incarnation);
  // The local rank (slot on this node) `request` joins `rank` into: its
  // own, else as JoinRequest.local_rank's comment says. ResourceExhausted
  // when it names none and every slot is held.
  absl::StatusOr<uint32_t> LocalRankOfLocked(const v1::JoinRequest& request,
                                             uint32_t rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether slot `local` is free for `rank`: no live member holds it, or
  // `rank` does.
  bool SlotFreeForLocked(uint32_t local, uint32_t rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLease(uint32_t rank, uint64_t incarnation);
  // Starts `m`'s (rank `rank`) lease unless it holds a Watch or a lease
  // already: ExpireLease at the heartbeat timeout.
  void LeaseLocked(LocalMember& m, uint32_t rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseRank(uint32_t rank, uint64_t incarnation, const std::string& reason);
  // Attach's checks and bookkeeping: a watch for the request's rank, with
  // sink.on_close taken and no subscription yet; returns its id.
  absl::StatusOr<WatchId> AdmitWatchLocked(const v1::WatchRequest& request,
                                           WatchSink& sink)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends one round's frames to the coordinator (LocalRounds' Send). With
  // recovery by domain, each data-parallel replica's frames in a
  // contribution of their own (SendContribution each): the coordinator
  // answers a contribution as one, so a frame of a replica whose epoch
  // moved on (sent before this daemon saw the loss) would otherwise get
  // the serving replica's frames refused with it.
  void SendBatch(LocalRounds::Batch batch);
  void SendContribution(LocalRounds::Batch batch);
  // Wraps a forwarded reply: a transport failure means the coordinator is
  // gone; a failure after the job failed reports the job's cause.
  template <typename T>
  Reply<T> Relay(Reply<T> reply);
  void FailLocal(const std::string& cause);

  const JobSpec spec_;
  const std::vector<GroupSpec> groups_;
  const v1::NodeInfo node_;
  const absl::Time started_;
  CoordinatorLink* const link_;
  DeadlineTimer* const timer_;
  EventLog mirror_;

  mutable absl::Mutex mu_;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t job_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  std::string fenced_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, LocalMember> members_ ABSL_GUARDED_BY(mu_);  // by rank
  std::map<uint32_t, uint32_t> rank_of_local_ ABSL_GUARDED_BY(mu_);
  uint64_t completed_rounds_ ABSL_GUARDED_BY(mu_) = 0;
  JobReplica replica_ ABSL_GUARDED_BY(mu_);
  WatchId next_watch_ ABSL_GUARDED_BY(mu_) = 1;
  struct Watch {
    uint32_t rank;
    // The process it leases for: a replacement's watches are its own.
    uint64_t incarnation;
    // 0 until Attach subscribed (EventLog never hands out 0).
    EventLog::SubscriptionId subscription = 0;
    std::function<void(absl::Status)> on_close;
  };
  std::map<WatchId, Watch> watches_ ABSL_GUARDED_BY(mu_);
  // Work waiting for registration; runs with its outcome.
  std::vector<std::function<void(absl::Status)>> until_registered_
      ABSL_GUARDED_BY(mu_);
  absl::Status registration_ ABSL_GUARDED_BY(mu_);  // error once it failed
  // The job recovers by data-parallel domain: a join answer said so (before
  // any loss, when the replica has seen no domain event yet), or the
  // replica did.
  bool recovery_by_domain_ ABSL_GUARDED_BY(mu_) = false;
  // The job recovers in place (a join answer said so): descriptors say it.
  bool recovers_in_place_ ABSL_GUARDED_BY(mu_) = false;
  // Last: destroyed first (it calls SendBatch, which uses the members
  // above).
  LocalRounds rounds_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_NODE_AGENT_H_
