// Coordinator: the authoritative state of one job incarnation, run by the
// coordinating daemon.
//
// It registers nodes, assigns and fences ranks, runs all_gather_words
// rounds, hosts the key-value broker, watches node heartbeats and event
// streams, and records every membership change in its EventLog. Once the
// job fails (a rank or node lost, a daemon restarted) every pending and
// later wait fails with an Aborted status naming the cause.
//
// Epochs (spec.recovery, docs/architecture.md "Epochs and recovery"): the
// job forms at epoch 1. With recovery on, a loss while READY or RECOVERING
// does not fail the job: it ends the current epoch (its open rounds and
// the key-value gets waiting from it fail with Aborted naming the loss),
// moves the job to RECOVERING at the next epoch and frees the lost slots,
// which replacement processes (a new incarnation of the same rank) and
// replacement daemons (a new daemon incarnation of the same node index)
// then take. Every loss, a second one during recovery included, starts a
// new epoch; the deadline (spec.recovery_deadline) runs from the first
// loss. A member acts only in the epoch it joined into: a survivor joins
// again (same incarnation) to enter the new one. The job is READY again
// once every slot is held and every member is in the new epoch (the
// replacements, and the survivors that joined again), or FAILED at the
// deadline naming what never came back: a lost slot not taken, or a
// survivor that never joined again.
//
// Recovery by domain (spec.recovery_by_domain with dp > 1; docs/contract.md
// "Data-parallel domains", docs/architecture.md "Recovery by data-parallel
// domain"): the same per data-parallel replica. A loss ends only the epochs
// of the domains it hits, each taking a new number of the job-wide epoch
// counter, and moves them to RECOVERING (EVENT_KIND_DOMAIN_RECOVERING);
// the other domains keep serving and the job stays READY while one does.
// World rounds span the serving domains and say so; a domain whole again
// serves from an entry round past every round admitted so far
// (EVENT_KIND_DOMAIN_READY). Each domain has its own deadline, whose expiry
// fails the job.
//
// Transport-agnostic: the Peer gRPC service and the coordinating daemon's
// own NodeAgent call it directly. Replies may be delivered on the calling
// thread or on the timer thread; they are never invoked with the
// coordinator's lock held. Thread-safe. Depends on the daemon's bookkeeping
// classes, common/topology, common/error_reason and the protos.
#ifndef RANKD_DAEMON_COORDINATOR_H_
#define RANKD_DAEMON_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
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
#include "common/incarnation.h"  // NewIncarnation, for the coordinator's users
#include "common/topology.h"
#include "daemon/call_cancellation.h"
#include "daemon/coordinator/event_log.h"
#include "daemon/coordinator/job_spec.h"
#include "daemon/coordinator/kv_store.h"
#include "daemon/coordinator/word_rounds.h"
#include "daemon/deadline_timer.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

// How the coordinator's refusal of a daemon that may never serve its node
// again starts (its node was declared lost, or a newer daemon registered
// for it): a node daemon that reads it in a refused heartbeat knows it is
// fenced and ends (common/exit_codes.h, kExitDaemonFenced).
inline constexpr char kDaemonFenced[] = "daemon fenced: ";

template <typename T>
using Reply = std::function<void(absl::StatusOr<T>)>;

class Coordinator {
 public:
  // Longest a MEMBER_JOINED event waits for more joins before it goes out
  // (see held_joins_); it goes out at once when it holds kMaxHeldJoins
  // ranks, and before any other event (the job ready included).
  static constexpr absl::Duration kJoinHold = absl::Milliseconds(20);
  static constexpr int kMaxHeldJoins = 1024;

  // `spec` must be valid (see ResolveConfig). `timer` must outlive this.
  // Generates a random job incarnation and starts the heartbeat monitor.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      JobSpec spec, DeadlineTimer* timer);
  // BeginShutdown must have run: it cancels the recovery deadline timer,
  // whose callback uses this object.
  ~Coordinator();

  uint64_t job_incarnation() const { return job_incarnation_; }
  // The job's current epoch (1 until the first recovery).
  uint64_t epoch() const;
  // OK when `node` names a node registered with this daemon incarnation and
  // serving (not lost, not left); otherwise FailedPrecondition saying why
  // (a stale incarnation's message is marked as a fence), InvalidArgument
  // for an index outside the job. What every Peer call of a node checks.
  absl::Status CheckNode(const v1::NodeRef& node) const;
  const JobSpec& spec() const { return spec_; }
  EventLog& events() { return events_; }

  // --- Peer service (calls from node daemons) ---

  // Registers a node. InvalidArgument when what it reports about itself
  // exceeds a limit (CheckNodeInfo); FailedPrecondition when its
  // configuration differs, the job failed, or its index is held by a live
  // daemon of another incarnation (which also fails the job: a restarted
  // daemon cannot silently rejoin). With recovery on and the job READY or
  // RECOVERING, a new daemon incarnation instead takes the index over: the
  // old daemon and its ranks are lost (the job recovers) and the new one is
  // registered; so it does for a node that left cleanly while the job
  // recovers (a pod replaced). A replaced daemon incarnation, or a lost
  // one's, is refused (FailedPrecondition). Idempotent for the same
  // incarnation.
  absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(
      const v1::RegisterNodeRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request);
  // Streams events after request.after_sequence to `sink` (EventLog rules).
  // `close` (may be empty) ends the stream when the coordinator shuts down.
  // ResourceExhausted when the node holds spec.limits.max_streams_per_caller
  // streams already; every successful call needs a matching EndSubscription.
  absl::StatusOr<EventLog::SubscriptionId> Subscribe(
      const v1::SubscribeRequest& request, EventLog::Subscriber sink,
      std::function<void(absl::Status)> close = nullptr);
  // Ends a subscription. With `connection_lost`, a node still registered
  // is declared lost (its daemon exited or the network broke).
  void EndSubscription(EventLog::SubscriptionId id, const v1::NodeRef& node,
                       bool connection_lost, const std::string& reason);
  absl::StatusOr<v1::LeaveNodeResponse> LeaveNode(
      const v1::LeaveNodeRequest& request);
  // Joins a rank into the current epoch. A joined member's join again
  // (same incarnation and node) moves it into the current epoch. While
  // RECOVERING, a lost rank's slot takes a new incarnation (its
  // replacement); the lost incarnation itself is refused. With
  // wait_for_world_ms, answers once the job is READY (FORMING or
  // RECOVERING until then: every survivor's join again counts towards it),
  // or Aborted when another loss ends the epoch.
  // With recovery by domain: a lost slot takes a replacement while its
  // domain recovers, a join waits for its own domain to serve, and the
  // answer carries the domain's epoch and first world round.
  void JoinRank(const v1::JoinRankRequest& request,
                Reply<v1::JoinRankResponse> reply);
  absl::StatusOr<v1::ReleaseRankResponse> ReleaseRank(
      const v1::ReleaseRankRequest& request);
  void ContributeWords(const v1::ContributeWordsRequest& request,
                       Reply<v1::AllGatherWordsResponse> reply);
  // The same, answering with the round's outcome shared by every node of the
  // round (the Rounds stream encodes it once for all of them).
  void ContributeWordsShared(const v1::ContributeWordsRequest& request,
                             WordRounds::SharedDone done);
  // KvSet and KvAdd count a new key against the calling rank; errors as for
  // KvStore::Set (ResourceExhausted naming the limit reached). Every
  // key-value call is refused (FailedPrecondition naming both epochs) when
  // the member joined into an earlier epoch than the job's, and a write to
  // a key under "epoch/<N>/" when N is not the job's epoch.
  absl::StatusOr<v1::KvSetResponse> KvSet(const v1::KvSetRequest& request);
  // Waits at most timeout_ms for the key; a cancelled `cancellation` (may
  // be null) releases the wait at once with Cancelled. ResourceExhausted
  // when the rank has spec.limits.max_waiting_gets_per_rank gets waiting
  // already. A loss that ends the epoch the get was admitted in (the
  // job's, or with recovery by domain its domain's) ends it with Aborted
  // in the words its rounds fail with ("epoch 1 ended: ...; recovering at
  // epoch 2 ..."), waiting or not yet answered: a get of an ended epoch is
  // never answered with a value, so it cannot read the next epoch's keys.
  void KvGet(const v1::KvGetRequest& request, Reply<v1::KvGetResponse> reply,
             const CancellationRef& cancellation = nullptr);
  absl::StatusOr<v1::KvAddResponse> KvAdd(const v1::KvAddRequest& request);
  absl::StatusOr<v1::KvDeleteResponse> KvDelete(
      const v1::KvDeleteRequest& request);
  // Errors as for KvStore::Count.
  absl::StatusOr<v1::KvCountResponse> KvCount(
      const v1::KvCountRequest& request);

  // --- Admin views ---
  v1::JobStatus GetJob() const;
  v1::Topology GetTopology() const;
  v1::MemberList ListMembers() const;
  std::optional<std::string> PeekKey(const std::string& key) const;
  // The node `rank` joined on, else the node it would default to; 0 for a
  // rank outside the world (whose requests fail on their own).
  uint32_t NodeOfRank(uint32_t rank) const;

  // Fails the job with `cause` (first cause wins) and releases every wait.
  void FailJob(const std::string& cause);
  // Stops treating closed streams as node loss (the coordinator itself is
  // shutting down), fails waits with Unavailable and ends the nodes' event
  // streams, so they learn at once that the coordinator is going away.
  void BeginShutdown();

 private:
  struct Node {
    v1::NodeState state = v1::NODE_STATE_NOT_REGISTERED;
    v1::NodeInfo info;
    absl::Time last_heartbeat;
    std::string detail;
    // Subscribe streams open (at most spec_.limits.max_streams_per_caller).
    uint32_t open_streams = 0;
    // Daemon incarnations a replacement took the index over from: refused
    // for good, so a retried registration of an old daemon cannot fence
    // the live one. The last kMaxRetiredIncarnations kept.
    std::deque<uint64_t> retired_incarnations;
  };
  struct Member {
    v1::MemberState state = v1::MEMBER_STATE_NOT_JOINED;
    uint32_t node_index = 0;
    uint32_t local_rank = 0;
    uint64_t incarnation = 0;
    uint32_t pid = 0;
    v1::DeviceInfo device;
    std::string detail;
    // The epoch this member joined into (0 before it joined).
    uint64_t epoch = 0;
    // Incarnations that held the rank and were replaced: refused for good,
    // so a partitioned process of an old epoch cannot come back once its
    // replacement is lost in turn. Bounded (kMaxRetiredIncarnations, the
    // most recent kept): memory stays fixed however often a rank is lost.
    std::deque<uint64_t> retired_incarnations;
  };
  static constexpr size_t kMaxRetiredIncarnations = 64;
  struct JoinWaiter {
    Reply<v1::JoinRankResponse> reply;
    absl::Time started;
    DeadlineTimer::TimerId timer = 0;
    uint32_t rank = 0;
    // What it is answered once released (JoinAnswerLocked).
    v1::JoinRankResponse answer;
  };
  // One data-parallel replica, with recovery by domain.
  struct Domain {
    bool recovering = false;
    // The epoch it serves (or recovers) at: 1, or the job-wide counter's
    // value at its latest loss.
    uint64_t epoch = 1;
    // The first world round it takes part in (0 while recovering).
    uint64_t first_world_round = 1;
    std::set<uint32_t> lost_ranks;      // slots not taken again yet
    std::set<uint32_t> replaced_ranks;  // for the DOMAIN_READY message
    // Epochs it left during this recovery, whose keys go once it serves.
    std::vector<uint64_t> ended_epochs;
    absl::Time recovering_since;
    std::string recovery_cause;  // its first loss of this recovery
    DeadlineTimer::TimerId recovery_timer = 0;
  };

  Coordinator(JobSpec spec, std::vector<GroupSpec> groups,
              DeadlineTimer* timer);

  absl::Status CheckNodeLocked(const v1::NodeRef& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckMemberLocked(const v1::MemberRef& member) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status JobFailedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status JoinRankLocked(const v1::JoinRankRequest& request,
                              std::vector<JoinWaiter>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks a REGISTERED node lost (its joined ranks with it) and fails the
  // job or recovers (LoseLocked); does nothing for a node in any other
  // state (not registered, already lost, left).
  void LoseNodeLocked(uint32_t node_index, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `ranks` (and `node`, if set) were lost, their LOST event appended: with
  // recovery on and the job READY or RECOVERING, frees their slots and
  // moves the job to RECOVERING at the next epoch (ReleaseEnded
  // then fails the ended epoch's rounds and the gets it took from the
  // store); otherwise fails the job.
  void LoseLocked(const std::string& cause, const std::vector<uint32_t>& ranks,
                  std::optional<uint32_t> node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a loss now ends the epoch (LoseLocked recovers) rather than
  // failing the job: its LOST event says so (JobEvent.ends_epoch).
  bool LossRecoversLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the MEMBER_LOST or NODE_LOST event of a loss.
  void AppendLossLocked(v1::EventKind kind, uint32_t node_index,
                        const std::vector<uint32_t>& ranks, std::string message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RECOVERING, every slot held again and every member (replacements and
  // survivors alike) joined into this epoch: READY at it; releases
  // the joins waiting for it into `released` and marks the ended epochs'
  // keys for DropEndedEpochKeys.
  void MaybeRecoveredLocked(std::vector<JoinWaiter>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Once READY again at epoch E: removes every key under "epoch/<K>/" for
  // K < E not removed yet (their sessions are gone; without this each
  // recovery would leave its epoch's keys, and their owners' quota charge,
  // behind for the job's life) and ends Gets waiting for them. Epoch 1's
  // unprefixed keys stay. Call without the lock.
  void DropEndedEpochKeys();
  // The recovery deadline timer: fails the job if still RECOVERING.
  void ExpireRecovery();
  // "rank 2 joined into epoch 1 but the job is at epoch 2 ..." when
  // `member_epoch` is behind (marked ErrorReason::kEpochFenced,
  // common/error_reason.h: the caller's stores wait for the loss notice),
  // else OK.
  absl::Status CheckEpochLocked(uint32_t rank, uint64_t member_epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A write to "epoch/<N>/..." with N not the current epoch is refused;
  // deleting an older epoch's key is allowed, so those keys (and their
  // owner's quota charge) need not outlive their epoch.
  // With recovery by domain, N must be the writer's (`rank`'s) domain's
  // epoch, and a delete may not touch a key of any domain's current epoch.
  // Unmarked: the writer passed CheckEpochLocked (a current member's
  // misuse, not a fence).
  absl::Status CheckKeyEpochLocked(const std::string& key, uint32_t rank,
                                   bool deleting = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lost ranks (by node), nodes still missing and survivors not yet
  // joined into this epoch, for messages.
  std::string StillLostLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJobLocked(const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases what a failed job or an ended epoch leaves waiting: after
  // FailJobLocked every wait; after LoseLocked moved the job to a new
  // epoch, the ended epoch's rounds, key-value gets and the joins waiting
  // for the world. Call without the lock.
  void ReleaseEnded();
  std::string MissingRanksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a join to the held MEMBER_JOINED event (see held_joins_), which
  // goes out kJoinHold after its first join, once it holds kMaxHeldJoins
  // ranks, or before any other event.
  void HoldJoinLocked(uint32_t node_index, uint32_t rank,
                      v1::MemberDetails details)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the held MEMBER_JOINED event, if any, to the log.
  void AppendHeldJoinsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends an event after the held joins, so the log keeps the order in
  // which things happened.
  void AppendEventLocked(v1::JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendEventLocked(v1::EventKind kind, std::optional<uint32_t> node_index,
                         const std::vector<uint32_t>& ranks,
                         std::string message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckHeartbeats();
  // --- Recovery by domain ---
  uint32_t DomainOfRank(uint32_t rank) const {
    return DomainOf(spec_.topology, rank);
  }
  // `rank`'s fence in the key-value store: its domain (with recovery by
  // domain, else 0) and the epoch it acts in. `rank` must be in the world.
  KvReader ReaderLocked(uint32_t rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The epoch `rank` acts in: its domain's with recovery by domain, else
  // the job's. `rank` must be in the world.
  uint64_t EpochOfRankLocked(uint32_t rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a lost slot of `rank` takes a replacement now.
  bool RankRecoveringLocked(uint32_t rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job, or any domain, is recovering.
  bool RecoveringLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer to `rank`'s join: the job incarnation, its epoch and, with
  // recovery by domain, its domain's first world round (0 while it
  // recovers).
  v1::JoinRankResponse JoinAnswerLocked(uint32_t rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LoseLocked with recovery by domain: every domain holding one of
  // `ranks` ends its epoch and recovers at a new one.
  void LoseDomainsLocked(const std::string& cause,
                         const std::vector<uint32_t>& ranks,
                         std::optional<uint32_t> node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every recovering domain whose slots are all held again, each by a
  // member of its epoch, serves from a new entry round; its waiting joins
  // are released into `released`.
  void MaybeDomainsRecoveredLocked(std::vector<JoinWaiter>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A domain's recovery deadline timer: fails the job if it still recovers.
  void ExpireDomainRecovery(uint32_t domain);
  // "rank 5 (node 1)" for a domain's slots still lost, then its survivors
  // not yet joined into its epoch.
  std::string StillLostInDomainLocked(uint32_t domain) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joined members (of `domain`, else of the world) whose epoch is behind
  // the one they act in: survivors of a loss that have not joined again.
  std::vector<uint32_t> NotRejoinedLocked(std::optional<uint32_t> domain) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "surviving ranks 0-2 to join again into epoch 2"; empty for no rank.
  static std::string RejoinText(const std::vector<uint32_t>& ranks,
                                uint64_t epoch);
  void ExpireJoinWaiter(uint64_t id);

  const JobSpec spec_;
  const std::vector<GroupSpec> groups_;
  const uint64_t job_incarnation_;
  const absl::Time started_;
  DeadlineTimer* const timer_;
  // spec_.recovery && spec_.recovery_by_domain && spec_.topology.data > 1.
  const bool by_domain_;
  // The node of each rank (members_[r].node_index), readable without mu_,
  // so that WordRounds may name nodes under its own lock while this
  // object calls it under mu_.
  std::vector<std::atomic<uint32_t>> rank_nodes_;
  EventLog events_;
  KvStore kv_;
  WordRounds rounds_;

  mutable absl::Mutex mu_;
  v1::JobState state_ ABSL_GUARDED_BY(mu_) = v1::JOB_STATE_FORMING;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  // Epochs and recovery (see the file comment).
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  // Slots freed by losses during this recovery, not yet taken again.
  std::set<uint32_t> lost_ranks_ ABSL_GUARDED_BY(mu_);
  std::set<uint32_t> lost_nodes_ ABSL_GUARDED_BY(mu_);
  // Ranks replaced during this recovery, for the JOB_READY message.
  std::set<uint32_t> replaced_ranks_ ABSL_GUARDED_BY(mu_);
  absl::Time recovering_since_ ABSL_GUARDED_BY(mu_);
  // The first loss of this recovery.
  std::string recovery_cause_ ABSL_GUARDED_BY(mu_);
  DeadlineTimer::TimerId recovery_timer_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by LoseLocked: the rounds of the epoch that ended are to be failed
  // with this status (ReleaseEnded).
  std::optional<absl::Status> epoch_ended_ ABSL_GUARDED_BY(mu_);
  // Set by MaybeRecoveredLocked: READY again at this epoch, whose earlier
  // epochs' keys DropEndedEpochKeys removes; the first epoch whose keys it
  // has not removed yet.
  std::optional<uint64_t> ready_again_ ABSL_GUARDED_BY(mu_);
  uint64_t keys_kept_from_epoch_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // Recovery by domain (see the file comment): one per data-parallel
  // replica; empty otherwise.
  std::vector<Domain> domains_ ABSL_GUARDED_BY(mu_);
  // The highest all_gather_words round number admitted: a recovered
  // domain enters world rounds one past it.
  uint64_t highest_round_admitted_ ABSL_GUARDED_BY(mu_) = 0;
  // What a loss owes, sent by ReleaseEnded without the lock: the answers of
  // the rounds a domain's loss failed, and the joins of the ended epoch
  // that waited for their domain or the world (with the loss), taken when
  // the epoch ended so that a join into the next one stays.
  std::vector<WordRounds::Answers> owed_round_answers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<JoinWaiter, absl::Status>> ended_joins_
      ABSL_GUARDED_BY(mu_);
  // The key-value gets an ended epoch took from the store (LoseLocked),
  // answered by ReleaseEnded without the lock.
  std::vector<KvStore::EndedGets> ended_gets_ ABSL_GUARDED_BY(mu_);
  // Ended domain epochs whose keys DropEndedEpochKeys removes.
  std::vector<uint64_t> epochs_to_drop_ ABSL_GUARDED_BY(mu_);
  std::vector<Node> nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  // Ranks that joined through each node in this incarnation, whatever their
  // state now (a member never returns to NOT_JOINED), so a join checks
  // --nproc_per_node without scanning every member.
  std::vector<uint32_t> joined_on_node_ ABSL_GUARDED_BY(mu_);
  uint32_t joined_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t left_ ABSL_GUARDED_BY(mu_) = 0;
  // The first rank that left, which made the job DRAINING.
  uint32_t drained_by_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, JoinWaiter> join_waiters_ ABSL_GUARDED_BY(mu_);
  // The MEMBER_JOINED event not yet in the log: the ranks that joined
  // within kJoinHold of its first, on any nodes, so that when thousands of
  // ranks join, every node's event stream carries a few large events, not
  // one per rank or per node (each event reaches every node: at 512 nodes x
  // 8 ranks, one event per rank made 2.1 million deliveries, one per node
  // 262 thousand; bench/RESULTS.md, "Reading the scale numbers").
  struct HeldJoins {
    v1::JobEvent event;  // ranks and members filled (node_index while they
                         // are all on one node); message and sequence are
                         // set when it is appended
    DeadlineTimer::TimerId timer = 0;
  };
  HeldJoins held_joins_ ABSL_GUARDED_BY(mu_);
  DeadlineTimer::TimerId heartbeat_timer_ ABSL_GUARDED_BY(mu_) = 0;
  // Blocking key-value gets waiting, by rank (at most
  // spec_.limits.max_waiting_gets_per_rank each). Own lock: released from the
  // store's callbacks.
  absl::Mutex kv_gets_mu_;
  std::map<uint32_t, uint32_t> kv_gets_waiting_ ABSL_GUARDED_BY(kv_gets_mu_);
  // Closers of the nodes' event streams, by subscription.
  std::map<EventLog::SubscriptionId, std::function<void(absl::Status)>>
      stream_closers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_COORDINATOR_H_
