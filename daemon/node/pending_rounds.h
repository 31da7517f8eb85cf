// PendingRounds: a node's contributions sent to the coordinator over a
// stream (the Rounds stream or the round link) and not yet answered, by tag.
// Each waits with its reply until the coordinator's RoundOutcome with its
// tag arrives, its deadline passes, or the stream ends. Thread-safe.
// Depends on absl, the protos and pending_calls.h only (the scale
// benchmark's simulated nodes use it through round_link.h, next to the
// client library).
#ifndef RANKD_DAEMON_PENDING_ROUNDS_H_
#define RANKD_DAEMON_PENDING_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/node/pending_calls.h"
#include "rankd/v1/peer.pb.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {

// The result an OK `outcome` carries, its words taken from words_le when the
// coordinator sent them that way (the round link) or from result.words (the
// Rounds stream). Internal when words_le is not whole 4-byte words or both
// forms are present. Moves out of `outcome`.
absl::StatusOr<v1::AllGatherWordsResponse> TakeOutcomeWords(
    v1::RoundOutcome& outcome);

class PendingRounds {
 public:
  // The same type as Reply<v1::AllGatherWordsResponse> (coordinator.h).
  using RoundReply =
      std::function<void(absl::StatusOr<v1::AllGatherWordsResponse>)>;

  // `coordinator` names the coordinator in timeout messages.
  explicit PendingRounds(std::string coordinator)
      : coordinator_(std::move(coordinator)) {}

  // Takes `reply` for a contribution to `round` answered by `deadline` and
  // returns its tag (never 0). Returns 0 and leaves `reply` untouched once
  // Abandon has run.
  uint64_t Add(uint64_t round, absl::Time deadline, RoundReply& reply);

  // Runs the reply of the contribution `outcome` answers (by its tag) with
  // its result (TakeOutcomeWords) or error. False when no contribution has that
  // tag (one this side gave up on, or a tag it never sent).
  bool Answer(v1::RoundOutcome& outcome);

  // Fails every contribution whose deadline is at or before `now` with
  // DeadlineExceeded naming the coordinator and the round.
  void ExpireOverdue(absl::Time now);

  // Fails every waiting contribution with `why` and refuses later Adds.
  void Abandon(const absl::Status& why);

 private:
  struct Pending {
    uint64_t round = 0;
    absl::Time deadline;
    RoundReply reply;
  };

  const std::string coordinator_;
  PendingCalls<Pending> pending_;  // by tag
};

}  // namespace rankd

#endif  // RANKD_DAEMON_PENDING_ROUNDS_H_
