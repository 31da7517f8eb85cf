// RoundSlotServer: the daemon's end of the local fast path for
// all_gather_words (common/round_slots.h; docs/architecture.md, "Local
// fast path").
//
// For each joined local rank that asks (Rank.OpenRoundSlots), it creates a
// round-slots file in the Unix socket's folder and runs one watcher thread
// that takes the rank's requests in order and hands each to
// NodeAgent::AllGatherWords exactly as the Rank service hands a gRPC
// request; the round's answer is written back into the rank's slot. A file
// belongs to one member (rank and incarnation) and every request is made in
// that member's name, so the agent's checks (joined, incarnation, round
// order, frame length, deadline, job health) apply unchanged.
//
// Bounds: one file and one thread per local rank (opening again closes the
// rank's previous file), so never more than the node's ranks, plus one
// poller thread where the server polls (see the constructor), and at most
// `slots` rounds held per rank. A file is closed when its member stops
// being one (its watcher checks each second), when the rank breaks the
// protocol (posts more than the slots hold, reuses a slot before its
// answer, moves the count backwards, rings without posting), and at Stop.
// The file's name is random, in a folder the group cannot list, and it is
// unlinked once the rank has mapped it (or after kAttachTimeout), so no
// other process can map it later. A rank that truncates the file it
// mapped does not crash the daemon: the mapping is guarded
// (common/mapping_guard.h), and the watcher closes a file found truncated.
//
// Thread-safe. Depends on NodeAgent, common/round_slots and the protos.
#ifndef RANKD_DAEMON_ROUND_SLOT_SERVER_H_
#define RANKD_DAEMON_ROUND_SLOT_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/node_agent.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {

class RoundSlotServer {
 public:
  // How long a new file waits in the folder for its rank to map it.
  static constexpr absl::Duration kAttachTimeout = absl::Seconds(10);
  // Requests this close together make the rank's file polled for the next
  // one.
  static constexpr absl::Duration kBackToBack = absl::Milliseconds(1);

  // Told of every round answered through the slots (its status code and
  // how long it took from the request being taken); for metrics.
  using RoundObserver = std::function<void(absl::StatusCode, absl::Duration)>;

  // Files are made in `folder` with permission bits `mode` (those of the
  // socket, so exactly who may call the daemon may map them). `agent` must
  // outlive the server; `observe` (may be empty) must stay callable until
  // the agent has answered every round (NodeAgent::Shutdown). With a
  // nonzero `spin`, one poller thread polls the file of every rank whose
  // rounds come back to back (the last two requests less than kBackToBack
  // apart) until that rank has posted nothing for `spin`; its watcher
  // sleeps meanwhile. A rank of a serving engine that sends one round per
  // step costs no polling; ranks that send rounds in a burst get them
  // without a futex wake-up each, from one polling thread however many
  // they are (common/round_slots.h, DefaultRoundSpin). The daemon polls
  // only in single-node jobs.
  RoundSlotServer(NodeAgent* agent, std::string folder, mode_t mode,
                  RoundObserver observe = nullptr,
                  absl::Duration spin = absl::ZeroDuration());
  // Stops.
  ~RoundSlotServer();

  RoundSlotServer(const RoundSlotServer&) = delete;
  RoundSlotServer& operator=(const RoundSlotServer&) = delete;

  // Makes `request.member()`'s file and starts its watcher. Errors: the
  // agent's (not a joined member, stale incarnation, job failed), the
  // file's (named), Unavailable after Stop.
  absl::StatusOr<v1::OpenRoundSlotsResponse> Open(
      const v1::OpenRoundSlotsRequest& request);

  // Closes every file (waking its rank's waiters), joins every watcher and
  // unlinks what is still linked. Later Opens fail. Idempotent.
  void Stop();

  // Files open now.
  size_t open() const;

 private:
  class Channel;
  class Poller;

  NodeAgent* const agent_;
  const std::string folder_;
  const mode_t mode_;
  // Shared with every pending round's reply.
  const std::shared_ptr<const RoundObserver> observe_;
  // Polls busy channels; null when the server does not poll.
  std::unique_ptr<Poller> poller_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint32_t, std::shared_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_ROUND_SLOT_SERVER_H_
