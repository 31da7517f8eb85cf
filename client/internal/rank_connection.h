// client/internal/rank_connection.h: what a joined rank's Client shares
// with its watch thread and its rounds in flight (private to client/).
//
// A Client owns a shared RankConnection: the daemon connection and stub,
// the join state, the job's health, the callbacks, the watch thread. The
// watch thread and every in-flight all_gather_words round
// (internal/round_call.h) hold their own reference, so none of them
// depends on the Client object staying alive.
//
// Depends on client.h, client/channel.h, internal/round_slot_client.h and
// the generated rankd.v1 API.
#ifndef RANKD_CLIENT_INTERNAL_RANK_CONNECTION_H_
#define RANKD_CLIENT_INTERNAL_RANK_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/channel.h"
#include "client/client.h"
#include "client/internal/kv_channel.h"
#include "client/internal/round_slot_client.h"
#include "grpcpp/client_context.h"
#include "rankd/v1/rank.grpc.pb.h"

namespace rankd::internal {

// The state a joined rank shares between its Client, its watch thread and
// every all_gather_words round in flight (RoundCall): the daemon
// connection and stub, the join state, the job's health, the callbacks.
// Each holder keeps its own reference, so none depends on the Client
// object staying alive. Its fields are the Client's to read and write
// under `mu` as annotated; it has no invariants beyond those.
class RankConnection {
 public:
  enum class State { kNotJoined, kJoining, kJoined, kLeft };

  // Takes a fresh incarnation (random, nonzero) for this process's join.
  explicit RankConnection(std::shared_ptr<const Connection> connection);

  // The member identity for a call of `method`, or why the call must not
  // reach the daemon: FailedPrecondition when not joined or after Leave,
  // the job's failure (its code, with the method in front) once it failed.
  absl::StatusOr<v1::MemberRef> CheckJoined(absl::string_view method)
      ABSL_LOCKS_EXCLUDED(mu);
  absl::StatusOr<v1::MemberRef> CheckJoinedLocked(absl::string_view method)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Records a failure. With `loss_epoch` nullopt it is terminal (the job
  // FAILED, or the watch stream broke) and no Rejoin undoes it; otherwise
  // it is the loss of a rank or node that ended epoch `loss_epoch`, which
  // counts only while this client is in that epoch or an earlier one (0:
  // a daemon that names no epoch, always counts) and is undone by Rejoin
  // into a later epoch. The first failure that counts in the current
  // epoch becomes the health (later ones are ignored), breaks the rounds
  // waiting on the round slots and tells the failure callback.
  void Fail(absl::Status failure, std::optional<uint64_t> loss_epoch)
      ABSL_LOCKS_EXCLUDED(mu);

  // Marks the round sequence of join `generation` unusable after `round`
  // failed with `cause`: every later round of that join is refused
  // (FailedPrecondition), because round numbers can no longer be matched
  // with the other ranks'. A round of an earlier join (before a Rejoin)
  // poisons nothing.
  void PoisonRounds(uint64_t generation, uint64_t round,
                    const absl::Status& cause) ABSL_LOCKS_EXCLUDED(mu);

  // The descriptor of the current join: an empty one before Join. The
  // object never changes and lives as long as this RankConnection; a
  // Rejoin installs a new one.
  const v1::SessionDescriptor& current_descriptor() const {
    return *descriptor.load(std::memory_order_acquire);
  }
  // Makes `session` the current descriptor (kept until destruction, so
  // references handed out earlier stay valid).
  void InstallDescriptor(v1::SessionDescriptor session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The health a client that just joined epoch `epoch` has: the terminal
  // failure if any, else the loss that ended `epoch` or a later epoch if
  // one was seen, else OK.
  absl::Status HealthForEpochLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Body of the watch thread: reads job events until the stream ends,
  // failing the job on a failure event or when the stream ends before the
  // job completed and before Leave.
  void WatchLoop(grpc::ClientContext* context, v1::WatchRequest request);

  const std::shared_ptr<const Connection> conn;
  const std::unique_ptr<v1::Rank::Stub> stub;  // Thread-safe.
  const uint64_t incarnation;

  // Held across numbering and starting a round; taken before mu.
  absl::Mutex submit_mu ABSL_ACQUIRED_BEFORE(mu);
  absl::Mutex mu;
  State state ABSL_GUARDED_BY(mu) = State::kNotJoined;
  // Set across a whole Rejoin, so concurrent ones run one after another
  // (the second then finds the new epoch and returns at once); a waiting
  // one still ends at its own deadline (a flag awaited with a timeout, not
  // a mutex held across the first one's wait).
  bool rejoining ABSL_GUARDED_BY(mu) = false;
  // Every descriptor this client joined with, oldest first; the last is
  // current. Only appended to, so `descriptor` never dangles.
  std::vector<std::unique_ptr<const v1::SessionDescriptor>> descriptors
      ABSL_GUARDED_BY(mu);
  std::atomic<const v1::SessionDescriptor*> descriptor;
  // What the first Join asked for; Rejoin asks again.
  JoinOptions join_options ABSL_GUARDED_BY(mu);
  // The epoch this client joined into (SessionDescriptor.epoch; 0 before
  // Join), and the newest epoch any job event named.
  uint64_t epoch ABSL_GUARDED_BY(mu) = 0;
  uint64_t job_epoch ABSL_GUARDED_BY(mu) = 0;
  // +1 at every successful Join or Rejoin: a round remembers the one it
  // was numbered in.
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  // A failure no Rejoin undoes (JOB_FAILED, the watch stream lost).
  absl::Status terminal ABSL_GUARDED_BY(mu);
  // The loss event of the newest epoch seen, and that epoch.
  absl::Status newest_loss ABSL_GUARDED_BY(mu);
  uint64_t newest_loss_epoch ABSL_GUARDED_BY(mu) = 0;
  v1::MemberRef member ABSL_GUARDED_BY(mu);
  uint64_t last_round ABSL_GUARDED_BY(mu) = 0;
  // Recovery by domain (docs/contract.md, "Data-parallel domains"), known
  // from the Join answer (first_world_round set): this rank's domain and
  // the domain size. Only its own domain's DOMAIN_RECOVERING is its
  // failure; other domains' losses are not.
  bool by_domain ABSL_GUARDED_BY(mu) = false;
  uint32_t domain ABSL_GUARDED_BY(mu) = 0;
  uint32_t domain_size ABSL_GUARDED_BY(mu) = 0;
  // Joined while its domain recovered: the next round's number comes with
  // the domain's DOMAIN_READY event; rounds are refused until then.
  bool awaiting_first_round ABSL_GUARDED_BY(mu) = false;
  // Sets the four above and last_round from a Join answer.
  void InstallDomainLocked(const v1::SessionDescriptor& session,
                           bool recovery_by_domain, uint64_t first_world_round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Set by Join (and again by Rejoin) when the daemon's round slots are
  // mapped.
  std::shared_ptr<RoundSlotClient> round_slots ABSL_GUARDED_BY(mu);
  std::string round_path ABSL_GUARDED_BY(mu) = "grpc (not joined)";
  // Set by Join when the daemon's key-value channel is open; dropped
  // (kv_path says why) once it breaks.
  std::shared_ptr<KvChannel> kv_channel ABSL_GUARDED_BY(mu);
  std::string kv_path ABSL_GUARDED_BY(mu) = "grpc (not joined)";
  // gRPC rounds not finished: a slot round must not overtake them.
  std::atomic<int> grpc_rounds_in_flight{0};
  // Why the current join's round sequence is unusable (OK while usable).
  absl::Status rounds_failed ABSL_GUARDED_BY(mu);
  // What JobHealth() returns: the failure that counts in `epoch`.
  absl::Status health ABSL_GUARDED_BY(mu);
  bool leaving ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<const Client::EventCallback> event_callback
      ABSL_GUARDED_BY(mu);
  // Failure callbacks by id: 0 is SetFailureCallback's, the others
  // AddFailureCallback's.
  std::map<uint64_t, std::shared_ptr<const Client::FailureCallback>>
      failure_callbacks ABSL_GUARDED_BY(mu);
  uint64_t next_failure_callback ABSL_GUARDED_BY(mu) = 1;
  // Every failure callback, to call outside the lock.
  std::vector<std::shared_ptr<const Client::FailureCallback>>
  FailureCallbacksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The watch stream's context; created by Join, cancelled by Leave.
  std::unique_ptr<grpc::ClientContext> watch_context ABSL_GUARDED_BY(mu);
  std::thread watch_thread ABSL_GUARDED_BY(mu);
};

// Asks the daemon for this rank's round slots (docs/architecture.md, the
// round-slots file) and maps them. Returns the slots, or null when rounds
// stay on gRPC, and the path rounds take: "shared-memory", or "grpc (<why>)".
// Never fails: any problem leaves the rounds on gRPC, saying why.
std::pair<std::shared_ptr<RoundSlotClient>, std::string> OpenRoundSlots(
    const Connection& conn, v1::Rank::Stub& stub, const v1::MemberRef& member,
    const v1::SessionDescriptor& session);

// The key-value channel a key-value call should use: null for gRPC. Drops
// a broken channel (saying why in kv_path).
std::shared_ptr<KvChannel> KvChannelForCall(RankConnection& core)
    ABSL_LOCKS_EXCLUDED(core.mu);

// Asks the daemon for this rank's key-value channel
// (daemon/transport/kv_socket.h) and connects it. Returns the channel, or
// null when key-value calls stay on gRPC, and the path they take:
// "kv-channel", or "grpc (<why>)". Never fails.
std::pair<std::shared_ptr<KvChannel>, std::string> OpenKvChannel(
    const Connection& conn, v1::Rank::Stub& stub, const v1::MemberRef& member);

}  // namespace rankd::internal

#endif  // RANKD_CLIENT_INTERNAL_RANK_CONNECTION_H_
