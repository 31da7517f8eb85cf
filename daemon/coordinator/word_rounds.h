// WordRounds: the coordinator's bookkeeping for all_gather_words rounds.
//
// Each node forwards its ranks' frames for a round (normally one message per
// node per round). A round completes when every rank of the world has
// contributed; then every contributor receives the rank-major concatenation,
// or, if frame lengths disagree, an InvalidArgument naming the disagreeing
// ranks. A round that misses its deadline fails on every contributor with
// DeadlineExceeded naming the missing ranks and their nodes. Every
// contributor of a round shares one immutable Outcome, so the coordinator
// encodes a round's answer once however many nodes receive it. Thread-safe.
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
  // Rounds may run ahead of the oldest open round by at most this many.
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
  WordRounds(uint32_t world_size, NodeOfRank node_of, DeadlineTimer* timer,
             size_t max_bytes_per_rank = 0);

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
  // (see Restart), is refused with FailedPrecondition naming both.
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

  // Highest round R such that every round up to R has finished (completed,
  // failed or expired); 0 before the first. A round that finishes ahead of
  // an unfinished one (one opened far ahead, then expired) counts only once
  // the rounds before it have finished, so it never makes later rounds look
  // completed.
  uint64_t completed_rounds() const;

  // Ranks that contributed to an open round and wait for it: rank -> round.
  std::map<uint32_t, uint64_t> WaitingRanks() const;

 private:
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

  // The result of a round every rank contributed to.
  absl::StatusOr<v1::AllGatherWordsResponse> Assemble(uint64_t number,
                                                      const Round& round) const;
  // Answers every one of `contributors` with one shared outcome.
  static void Answer(std::vector<Contributor>& contributors, uint64_t number,
                     absl::StatusOr<v1::AllGatherWordsResponse> result);
  void Expire(uint64_t round, uint64_t epoch);
  // OK when `number` may receive contributions.
  absl::Status CheckAcceptsLocked(uint64_t number, uint64_t epoch) const
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
  mutable absl::Mutex mu_;
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
