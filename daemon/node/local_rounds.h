// LocalRounds: how one daemon batches its local ranks' all_gather_words
// frames into one message per round to the coordinator.
//
// A round opens with its first local frame; its deadline is that frame's
// timeout from then. Once every local rank contributed, the round's frames
// go out together in one batch. At the deadline minus FlushMargin the
// frames held so far go out (a partial batch), so that the coordinator can
// still name exactly which ranks are missing before the deadline; later
// frames of that round then go out one by one, and at the deadline the
// round is retired, so a local rank that never contributes does not keep
// it open forever. A frame for a round this node already retired goes out
// on its own: the coordinator answers for it.
//
// NodeAgent owns one (it checks membership and round numbers first); the
// coordinator link is behind `send`. Thread-safe; `send` and replies never
// run with this object's lock held. Depends on DeadlineTimer, the Reply
// type (coordinator.h), the protos and absl.
#ifndef RANKD_DAEMON_LOCAL_ROUNDS_H_
#define RANKD_DAEMON_LOCAL_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/deadline_timer.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {

class LocalRounds {
 public:
  // One local rank's contribution, answered with the round's result.
  struct Waiter {
    uint32_t rank = 0;
    Reply<v1::AllGatherWordsResponse> reply;
  };
  // What goes to the coordinator in one message: frames of one round, and
  // who waits for the answer (one waiter per frame).
  struct Batch {
    uint64_t round = 0;
    // When the round's first local frame arrived (MonotonicNow), so the
    // coordinator can say how long a round waited, not how long since a
    // partial batch left.
    absl::Time opened;
    absl::Time deadline;
    std::vector<v1::RankFrame> frames;
    std::vector<Waiter> waiters;
  };
  using Send = std::function<void(Batch)>;

  // How long before a round's deadline a partial batch goes out.
  static absl::Duration FlushMargin(absl::Duration timeout);

  // `local_ranks` is how many ranks contribute to each round through this
  // daemon. `timer` must outlive this object and must be stopped before it
  // is destroyed (its callbacks reach this object).
  LocalRounds(uint32_t local_ranks, DeadlineTimer* timer, Send send);
  ~LocalRounds();

  LocalRounds(const LocalRounds&) = delete;
  LocalRounds& operator=(const LocalRounds&) = delete;

  // Adds `frame` of round `round` (waiter.rank's; at most one per rank and
  // round, which the caller checks). `timeout` sets the deadline when the
  // frame opens the round. Calls `send` when the batch is complete, when
  // the round was already flushed or retired (this frame alone), or later
  // from the timer (a partial batch). After Close, replies the close
  // status at once instead.
  void Contribute(uint64_t round, v1::RankFrame frame, Waiter waiter,
                  absl::Duration timeout);

  // Drops `rank`'s frame of `round` if it is still held here (it has not
  // gone out to the coordinator), with its waiter, unanswered: the caller
  // answers it. A round left with no frame is forgotten. Returns whether a
  // frame was dropped.
  bool Withdraw(uint64_t round, uint32_t rank);

  // Recovery by domain: `ranks` (this node's ranks of a domain whose epoch
  // ended) lost their place in every round held here: their frames that
  // have not gone out are dropped and answered `status`, and until Resume
  // no round waits for them (a round they held back goes out now with the
  // other ranks' frames; a round left with no frame is forgotten). Rounds
  // keep their numbers. Returns how many frames were dropped.
  size_t Drop(const std::set<uint32_t>& ranks, const absl::Status& status);

  // Recovery by domain: `ranks` take part again in every round from
  // `first_round` on (their domain's entry round); earlier rounds go on
  // without waiting for them.
  void Resume(const std::set<uint32_t>& ranks, uint64_t first_round);

  // Forgets every open round and replies `status` to every frame that has
  // not gone out yet; later contributions get `status` at once. Only the
  // first call counts.
  void Close(const absl::Status& status);

  // The job moved to `epoch`: replies `status` to every frame that has not
  // gone out yet and forgets every round, so that rounds are numbered
  // afresh from 1; unlike Close, later contributions are taken. Frames
  // already with the coordinator are answered by it. Only the first call
  // for an epoch counts (a daemon learns of a new epoch both from the
  // event and from a rank's join into it, in either order); no effect
  // after Close.
  void Restart(uint64_t epoch, const absl::Status& status);

  // How many rounds are open (GetJob's open_local_rounds).
  size_t open() const;

 private:
  struct Round {
    absl::Time opened;
    absl::Time deadline;
    std::vector<v1::RankFrame> pending;  // not yet sent
    std::vector<Waiter> waiters;         // for the pending frames
    DeadlineTimer::TimerId flush_timer = 0;
    DeadlineTimer::TimerId retire_timer = 0;
    bool flushed = false;  // a partial batch went out at the flush time
    uint32_t contributed = 0;
  };

  // Sends the pending frames of `round` (the flush timer).
  void Flush(uint64_t round, uint64_t generation);
  // Erases a flushed round once its deadline passed (the retire timer).
  void Retire(uint64_t round, uint64_t generation);
  // How many local ranks round `round` waits for: every local rank but
  // those Drop took out and Resume has not brought back by `round`.
  uint32_t ExpectedLocked(uint64_t round) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelTimersLocked(Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t local_ranks_;
  DeadlineTimer* const timer_;
  const Send send_;

  mutable absl::Mutex mu_;
  std::map<uint64_t, Round> rounds_ ABSL_GUARDED_BY(mu_);
  // Highest round erased (complete, or flushed and past its deadline). A
  // frame for a round at or below it that is no longer held is late.
  uint64_t retired_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
  // +1 at each Restart, so that a timer of a forgotten round never touches
  // a new round of the same number.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The epoch of the rounds held (Restart).
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  // Recovery by domain: ranks that take part only from this round on
  // (UINT64_MAX while their domain recovers); absent ranks always do.
  std::map<uint32_t, uint64_t> serves_from_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_LOCAL_ROUNDS_H_
