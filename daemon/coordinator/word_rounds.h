// WordRounds: the coordinator's bookkeeping for all_gather_words rounds.
//
// Each node forwards its ranks' frames for a round (normally one message per
// node per round). A round completes when every rank of the world has
// contributed; then every contributor receives the rank-major concatenation,
// or, if frame lengths disagree, an InvalidArgument naming the disagreeing
// ranks. A round that misses its deadline fails on every contributor with
// DeadlineExceeded naming the missing ranks and their nodes. Every
// contributor of a round shares one immutable Outcome, so the coordinator
// encodes a round's answer once however many nodes receive it.
//
// Recovery by domain (docs/contract.md, "Data-parallel domains"; given a
// domain size): a round spans the ranks of the domains serving in it, and
// its result says which (AllGatherWordsResponse.partial, .domains).
// LoseDomain fails every open round and stops counting the domain;
// AdmitDomain counts it again from an entry round past every round opened
// so far, so a round's membership never changes while it is open.
// Thread-safe.
// Depends on DeadlineTimer, common/limits.h, the rankd.v1 protos and absl.
#ifndef RANKD_DAEMON_WORD_ROUNDS_H_
#define RANKD_DAEMON_WORD_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "daemon/deadline_timer.h"
#include "rankd/v1/peer.pb.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {

class WordRounds {
 public:
  // Largest frame one rank may send in one round (smaller in worlds too
  // large for that: common/limits.h MaxFrameWords).
  static constexpr uint32_t kMaxWordsPerRank = kMaxFrameWords;
  // Rounds may run ahead of the oldest open round by at most this many; a
  // domain's ranks, after it re-entered (AdmitDomain), as many ahead of its
  // entry round, when that is later. So at most this many rounds are open
  // per domain re-entered since the last loss, and one more window.
  static constexpr uint64_t kMaxOpenRounds = 64;

  // What one contribution came to: the round's result, or an error (the
  // round's, or this contribution's own refusal). Immutable once made;
  // shared by every contributor the round answers at once.
  class Outcome {
   public:
    Outcome(uint64_t round, absl::StatusOr<v1::AllGatherWordsResponse> result)
        : round_(round), result_(std::move(result)) {}
    uint64_t round() const { return round_; }
    const absl::StatusOr<v1::AllGatherWordsResponse>& result() const {
      return result_;
    }
    // The v1::RoundOutcome wire encoding of this outcome, made on first use
    // and then reused (thread-safe); valid as long as the Outcome.
    const std::string& Encoded() const;
    // The same for the round link, with the words as RoundOutcome.words_le
    // (4 bytes each, copied by the node rather than decoded) when that is
    // smaller than their varints (words of 2^28 and up), else Encoded().
    // Made on first use, then reused.
    const std::string& LinkEncoded() const;
    // What follows Encoded() to address it to one contribution: the
    // RoundOutcome `tag` field alone (protobuf merges concatenated
    // encodings, so Encoded() + TagSuffix(t) parses as the outcome with
    // tag t).
    static std::string TagSuffix(uint64_t tag);

   private:
    const uint64_t round_;
    const absl::StatusOr<v1::AllGatherWordsResponse> result_;
    mutable absl::once_flag encode_once_;
    mutable std::string encoded_;
    mutable absl::once_flag link_encode_once_;
    mutable std::string link_encoded_;  // when it differs from encoded_
    mutable const std::string* link_ = nullptr;  // encoded_ or link_encoded_
  };
  using SharedDone = std::function<void(std::shared_ptr<const Outcome>)>;
  using Done = std::function<void(absl::StatusOr<v1::AllGatherWordsResponse>)>;
  // Names a rank's node for timeout messages.
  using NodeOfRank = std::function<uint32_t(uint32_t rank)>;

  // `timer` must outlive this object. A rank's frames in open rounds hold
  // at most `max_bytes_per_rank` bytes (0: no limit but the round window);
  // a contribution past it is refused with ResourceExhausted naming the
  // rank (--max_round_bytes_per_rank).
  //
  // `domain_size` > 0 turns on recovery by domain: ranks [d * domain_size,
  // (d + 1) * domain_size) are domain d (it must divide world_size; 0, or
  // an invalid size, keeps one domain and results without a view).
  WordRounds(uint32_t world_size, NodeOfRank node_of, DeadlineTimer* timer,
             size_t max_bytes_per_rank = 0, uint32_t domain_size = 0);

  // Adds `frames` (ranks already validated by the caller: < world size and
  // members of the calling node) to `round`. `done` runs exactly once: with
  // the result when the round completes, or with an error. Errors:
  // InvalidArgument for round 0, a frame over MaxFrameWords(world size)
  // (common/limits.h), a rank that already contributed to this round, or
  // mismatched frame lengths;
  // FailedPrecondition for a round already completed or too far ahead;
  // DeadlineExceeded at `deadline`; the cause passed to Fail. `done` may run
  // on the calling thread; it never runs with this object's lock held.
  // `waited` is how long the round had been open where `frames` come from
  // (a node's first local frame; a partial batch leaves just before the
  // deadline): the timeout message counts from the earliest contribution.
  void Contribute(uint64_t round, std::vector<v1::RankFrame> frames,
                  absl::Time deadline, Done done,
                  absl::Duration waited = absl::ZeroDuration());
  // The same, answering with the round's shared Outcome (no copy of the
  // result per contributor).
  // `epoch` (0: any) is the job epoch the caller admitted the frames in: a
  // contribution of any other epoch than the current one, earlier or later
  // (see Restart), is refused with FailedPrecondition naming both. With
  // recovery by domain, `epoch` is the job's epoch counter at admission: a
  // contribution admitted before a loss (LoseDomain) counts as in flight at
  // it, so its round fails on every contributor with the loss's cause; and
  // a frame of a domain not serving in `round` is refused
  // (FailedPrecondition naming the domain and its entry round or state).
  void ContributeShared(uint64_t round, std::vector<v1::RankFrame> frames,
                        absl::Time deadline, SharedDone done,
                        absl::Duration waited = absl::ZeroDuration(),
                        uint64_t epoch = 0);

  // Fails every open round and every later contribution with `cause`.
  void Fail(absl::Status cause);

  // The job moved to `epoch` (a recovery): fails every open round with
  // `cause` and numbers rounds afresh from 1 (completed_rounds() restarts
  // at 0). Contributions naming any other epoch are refused from now on.
  // No effect after Fail, nor for an `epoch` not above the current one
  // (restarts racing on different threads may arrive out of order).
  void Restart(uint64_t epoch, absl::Status cause);

  // Answers owed to contributors, made under a caller's lock and sent once
  // it holds none (Send; the destructor sends what was not sent):
  // contributors' callbacks must never run under the coordinator's lock.
  // Move-only.
  class Answers {
   public:
    Answers() = default;
    Answers(Answers&&) = default;
    Answers& operator=(Answers&&) = delete;
    ~Answers() { Send(); }
    void Send() {
      std::vector<std::function<void()>> sends;
      sends.swap(sends_);
      for (auto& send : sends) send();
    }

   private:
    friend class WordRounds;
    std::vector<std::function<void()>> sends_;
  };

  // Recovery by domain only (else FailedPrecondition; InvalidArgument for
  // a domain outside the job). The job's epoch counter moved to `epoch`
  // by a loss in `domain`: every open round fails with `cause` on every
  // contributor (no round completes with a membership changed while it was
  // open; the answers are returned, for the caller to send without its
  // locks); the domain serves in no round until AdmitDomain. Numbering
  // goes on. Also for a domain already lost (a second loss). An `epoch`
  // not above the current counter only fails the open rounds. Never calls
  // NodeOfRank, so the caller may hold the lock that one takes.
  absl::StatusOr<Answers> LoseDomain(uint32_t domain, uint64_t epoch,
                                     absl::Status cause);

  // Recovery by domain only: `domain` is whole again at `domain_epoch` and
  // serves in every round from `entry_round` on, which must be past every
  // round opened, failed or finished so far (the caller, which admits
  // every contribution first, picks one past the highest round it
  // admitted), so every round below it is decided without the domain and
  // none changes membership while open. Errors as for LoseDomain;
  // FailedPrecondition for a domain serving, an epoch older than the
  // domain's, or an entry round not past every round seen.
  absl::Status AdmitDomain(uint32_t domain, uint64_t domain_epoch,
                           uint64_t entry_round);

  // Highest round R such that every round up to R has finished (completed,
  // failed or expired); 0 before the first. A round that finishes ahead of
  // an unfinished one (one opened far ahead, then expired) counts only once
  // the rounds before it have finished, so it never makes later rounds look
  // completed.
  uint64_t completed_rounds() const;

  // Ranks that contributed to an open round and wait for it: rank -> round.
  std::map<uint32_t, uint64_t> WaitingRanks() const;

  // The highest round number a contribution of `frames` may be accepted
  // for now: a full window (kMaxOpenRounds) past the oldest open round, or
  // past the last finished one, or past the latest entry round (less one)
  // of the frames' domains, whichever is latest; UINT64_MAX where that
  // would pass it. A later round is refused as too far ahead. Never calls
  // NodeOfRank: a caller admitting contributions under its own lock counts
  // only rounds at most this (so that a refused one does not move where a
  // domain re-enters).
  uint64_t HighestAcceptable(
      const google::protobuf::RepeatedPtrField<v1::RankFrame>& frames) const;

 private:
  // HighestAcceptable for any container of RankFrames.
  template <typename Frames>
  uint64_t HighestAcceptableLocked(const Frames& frames) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Contributor {
    std::vector<uint32_t> ranks;
    SharedDone done;
  };
  struct Round {
    // The earliest contribution's start (its arrival less its `waited`).
    absl::Time opened;
    absl::Time deadline = absl::InfiniteFuture();
    DeadlineTimer::TimerId timer = 0;
    uint32_t contributed = 0;
    std::vector<std::vector<uint32_t>> frames;  // by rank
    std::vector<bool> present;                  // by rank
    std::vector<Contributor> contributors;
  };

  // One domain's part in rounds (recovery by domain).
  struct Domain {
    bool serving = true;
    uint64_t epoch = 1;        // the epoch it serves (or recovers) at
    uint64_t entry_round = 1;  // the first round it serves in
  };

  // The result of a round every rank of its domains contributed to.
  absl::StatusOr<v1::AllGatherWordsResponse> Assemble(uint64_t number,
                                                      const Round& round) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every one of `contributors` with one shared outcome.
  static void Answer(std::vector<Contributor>& contributors, uint64_t number,
                     absl::StatusOr<v1::AllGatherWordsResponse> result);
  void Expire(uint64_t round, uint64_t epoch);
  // Whether `domain` takes part in round `number` (always, without
  // recovery by domain).
  bool ServesInLocked(uint32_t domain, uint64_t number) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many ranks round `number` needs.
  uint32_t ExpectedLocked(uint64_t number) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t DomainOfRank(uint32_t rank) const { return rank / domain_size_; }
  // Fails every open round with `cause`; their contributors into `failed`.
  void FailOpenLocked(const absl::Status& cause,
                      std::map<uint64_t, std::vector<Contributor>>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `number` may receive contributions from ranks whose domains
  // entered world rounds at `entry_round` at the latest (0 or 1: never left).
  absl::Status CheckAcceptsLocked(uint64_t number, uint64_t epoch,
                                  uint64_t entry_round) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberFailureLocked(uint64_t number, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Round `number` finished: advances completed_ over every finished round.
  void FinishLocked(uint64_t number) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives back what `round`'s frames held against their ranks.
  void ReleaseLocked(const Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t world_size_;
  const NodeOfRank node_of_;
  DeadlineTimer* const timer_;
  const size_t max_bytes_per_rank_;
  // Ranks per domain (world_size_ without recovery by domain).
  const uint32_t domain_size_;
  const bool by_domain_;
  mutable absl::Mutex mu_;
  std::vector<Domain> domains_ ABSL_GUARDED_BY(mu_);
  // Highest round number opened, failed or finished (AdmitDomain checks
  // its entry round against it).
  uint64_t highest_round_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of each rank's frames in open rounds.
  std::vector<size_t> bytes_of_rank_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // The current job epoch (Restart) and why the previous one ended.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status restart_cause_ ABSL_GUARDED_BY(mu_);
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  // Rounds above completed_ + 1 that finished already (at most
  // kMaxOpenRounds: rounds open only within that window).
  std::set<uint64_t> finished_ahead_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Round> open_ ABSL_GUARDED_BY(mu_);
  // Rounds that failed, so late contributors get the same error.
  std::map<uint64_t, absl::Status> failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_WORD_ROUNDS_H_
