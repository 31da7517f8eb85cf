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
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/channel.h"
#include "client/client.h"
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

  // Records the job's first failure (later ones are ignored), breaks the
  // rounds waiting on the round slots with it, and tells the failure
  // callback.
  void Fail(absl::Status failure) ABSL_LOCKS_EXCLUDED(mu);

  // Marks the round sequence unusable after `round` failed with `cause`:
  // every later round is refused (FailedPrecondition), because round
  // numbers can no longer be matched with the other ranks'.
  void PoisonRounds(uint64_t round, const absl::Status& cause)
      ABSL_LOCKS_EXCLUDED(mu);

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
  // Written once by Join, under mu, before state becomes kJoined.
  v1::SessionDescriptor descriptor;
  v1::MemberRef member ABSL_GUARDED_BY(mu);
  uint64_t last_round ABSL_GUARDED_BY(mu) = 0;
  // Set by Join when the daemon's round slots are mapped; then fixed.
  std::shared_ptr<RoundSlotClient> round_slots ABSL_GUARDED_BY(mu);
  std::string round_path ABSL_GUARDED_BY(mu) = "grpc (not joined)";
  // gRPC rounds not finished: a slot round must not overtake them.
  std::atomic<int> grpc_rounds_in_flight{0};
  absl::Status rounds_failed ABSL_GUARDED_BY(mu);
  absl::Status health ABSL_GUARDED_BY(mu);
  bool leaving ABSL_GUARDED_BY(mu) = false;
  std::shared_ptr<const Client::EventCallback> event_callback
      ABSL_GUARDED_BY(mu);
  std::shared_ptr<const Client::FailureCallback> failure_callback
      ABSL_GUARDED_BY(mu);
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

}  // namespace rankd::internal

#endif  // RANKD_CLIENT_INTERNAL_RANK_CONNECTION_H_
