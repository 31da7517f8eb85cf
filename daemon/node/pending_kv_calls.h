// PendingKvCalls: the key-value calls a node has forwarded over its round
// link (round_link_protocol.h) and not yet had answered, by id. Each waits
// with its reply until the coordinator's KvLinkReply with its id arrives,
// its deadline passes, or the link ends. At most a fixed number wait at
// once (kMaxKvCallsPerRoundLink on a daemon), so that what a node's ranks
// forward is bounded on both ends of the link. Thread-safe; replies run
// outside its lock. Depends on absl, the protos and
// pending_calls.h.
#ifndef RANKD_DAEMON_PENDING_KV_CALLS_H_
#define RANKD_DAEMON_PENDING_KV_CALLS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/node/pending_calls.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

class PendingKvCalls {
 public:
  // Gets the coordinator's reply (whose code may itself be an error), or
  // why none came.
  using KvReply = std::function<void(absl::StatusOr<v1::KvLinkReply>)>;

  // `link` names the link in messages ("round link to coordinator at
  // host:port"); at most `max_in_flight` calls wait at once.
  PendingKvCalls(std::string link, size_t max_in_flight)
      : link_(std::move(link)), max_in_flight_(max_in_flight) {}

  // Takes `reply` for a call to be answered by `deadline` and returns its id
  // (never 0). Returns 0 and leaves `reply` untouched once Abandon has run.
  // ResourceExhausted naming the limit, `reply` untouched, when
  // `max_in_flight` calls wait already.
  absl::StatusOr<uint64_t> Add(absl::Time deadline, KvReply& reply);

  // Runs the reply of the call `reply` answers (by id). False when no call
  // has that id (one this side gave up on, or an id it never sent).
  bool Answer(v1::KvLinkReply reply);

  // True while call `id` waits for its reply.
  bool Waiting(uint64_t id);

  // Fails every call whose deadline is at or before `now` with
  // DeadlineExceeded naming the link; returns their ids (the coordinator
  // still holds them until told: RoundLink cancels them there).
  std::vector<uint64_t> ExpireOverdue(absl::Time now);

  // Fails every waiting call with `why` and refuses later Adds.
  void Abandon(const absl::Status& why);

  // Calls waiting now (for tests).
  size_t size();

 private:
  struct Pending {
    absl::Time deadline;
    KvReply reply;
  };

  const std::string link_;
  const size_t max_in_flight_;
  PendingCalls<Pending> pending_;  // by id
};

}  // namespace rankd

#endif  // RANKD_DAEMON_PENDING_KV_CALLS_H_
