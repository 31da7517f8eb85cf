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
// being one (checked each second, by its watcher or by the poller while
// the rank is busy), when the rank breaks the protocol (posts more than
// the slots hold, reuses a slot before its answer, moves the count
// backwards, rings without posting), and at Stop.
// The file's name is random, in a folder the group cannot list, and it is
// unlinked once the rank has mapped it (or after kAttachTimeout), so no
// other process can map it later. A rank that truncates the file it
// mapped does not crash the daemon: the mapping is guarded
// (common/mapping_guard.h), and a file found truncated is closed.
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
#include "daemon/node/node_agent.h"
#include "rankd/v1/rank.pb.h"

namespace rankd {

class RoundSlotServer {
 public:
  // How long a new file waits in the folder for its rank to map it.
  static constexpr absl::Duration kAttachTimeout = absl::Seconds(10);

  // How the files are watched. The defaults are the daemon's; tests
  // lengthen the intervals to make timing-dependent paths certain.
  struct Options {
    // Nonzero: one poller thread polls the file of every busy rank until
    // no busy rank has posted for `spin`; their watchers sleep meanwhile
    // (see the constructor). Zero: no poller.
    absl::Duration spin = absl::ZeroDuration();
    // A rank whose last two requests came less than this apart is busy.
    absl::Duration back_to_back = absl::Milliseconds(1);
    // How often each file's rank is checked to still be a member; a
    // sleeping watcher wakes this often.
    absl::Duration member_check = absl::Seconds(1);
  };

  // Told of every round answered through the slots (its status code and
  // how long it took from the request being taken); for metrics.
  using RoundObserver = std::function<void(absl::StatusCode, absl::Duration)>;

  // Files are made in `folder` with permission bits `mode` (those of the
  // socket, so exactly who may call the daemon may map them). `agent` must
  // outlive the server; `observe` (may be empty) must stay callable until
  // the agent has answered every round (NodeAgent::Shutdown). With a
  // nonzero `options.spin`, one poller thread polls the file of every rank
  // whose rounds come back to back (busy, see Options) until no busy rank
  // has posted for `spin`, then hands all of them back; their watchers
  // sleep meanwhile. A rank of a serving engine that sends one round per
  // step costs no polling; ranks that send rounds in a burst get them
  // without a futex wake-up each, from one polling thread however many
  // they are (common/round_slots.h, DefaultRoundSpin). The daemon polls
  // only in single-node jobs.
  RoundSlotServer(NodeAgent* agent, std::string folder, mode_t mode,
                  RoundObserver observe, Options options);
  // Stops.
  ~RoundSlotServer();

  RoundSlotServer(const RoundSlotServer&) = delete;
  RoundSlotServer& operator=(const RoundSlotServer&) = delete;

  // Makes `request.member()`'s file and starts its watcher. Errors: the
  // agent's (not a joined member, stale incarnation, job failed), the
  // file's (named), Unavailable after Stop.
  absl::StatusOr<v1::OpenRoundSlotsResponse> Open(
      const v1::OpenRoundSlotsRequest& request);

  // Closes every file (waking its rank's waiters), stops the poller, joins
  // every watcher and unlinks what is still linked. Later Opens fail. A
  // file that an Open running meanwhile replaces is closed and joined by
  // that Open. Idempotent.
  void Stop();

  // Removes the round-slots files in `folder` last modified more than
  // `older_than` ago, of this user: a daemon unlinks its own once its rank
  // mapped them or kAttachTimeout after making them, so an older one is
  // what a daemon killed meanwhile (SIGKILL, a crash) left, which nobody
  // else would remove. Daemons sharing the folder lose nothing: their files
  // are younger (the age is read on the wall clock: a step of it forward by
  // more than `older_than` while another daemon's file waits to be mapped
  // would make that file look stale). Returns how many it removed; a folder
  // it cannot read removes none.
  static size_t RemoveStaleFiles(const std::string& folder,
                                 absl::Duration older_than = 6 *
                                                             kAttachTimeout);

  // Files open now.
  size_t open() const;
  // Requests the poller has taken so far (for tests).
  uint64_t polled_requests() const;

 private:
  class Channel;
  class Poller;

  NodeAgent* const agent_;
  const std::string folder_;
  const mode_t mode_;
  // Shared with every pending round's reply.
  const std::shared_ptr<const RoundObserver> observe_;
  const Options options_;
  // Polls busy channels; null when the server does not poll. Shared with
  // the channels (one that an Open retires may outlive Stop briefly).
  const std::shared_ptr<Poller> poller_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint32_t, std::shared_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_ROUND_SLOT_SERVER_H_
