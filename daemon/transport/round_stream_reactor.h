// RoundStreamReactor: the coordinator's side of one node's Peer.Rounds
// stream (proto/rankd/v1/peer.proto): it reads the node's round
// contributions one at a time, hands each to the coordinator, and writes
// every outcome back in the order rounds finish.
//
// Why raw bytes: when a round completes, every node gets the same answer.
// The reactor writes the round's one encoding (WordRounds::Outcome::
// Encoded) by reference, followed by a few bytes of its own carrying the
// contribution's tag (protobuf merges concatenated encodings), so the
// coordinator's cost per node per round is a queue push and a write, not an
// encoding of the whole world's words.
//
// Lifetime: gRPC owns the reactor and deletes it once the call is over
// (OnDone); outcomes that arrive later (a round finishing after the node
// went away) reach it through a link OnDone cuts first, and are dropped.
//
// Bounds: at most kMaxQueuedOutcomes outcomes wait for a node that does not
// read; one more ends the stream with RESOURCE_EXHAUSTED. A message that is
// not a ContributeWordsRequest, or one refused by `authorize` (a node acting
// as another), ends the stream with that error.
//
// Depends on gRPC, WordRounds (for the shared outcome), daemon/security and
// the protos.
#ifndef RANKD_DAEMON_ROUND_STREAM_REACTOR_H_
#define RANKD_DAEMON_ROUND_STREAM_REACTOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/word_rounds.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

class RoundStreamReactor
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // A node runs at most WordRounds::kMaxOpenRounds rounds at once, each
  // answered once per contribution; this leaves room for many late frames.
  static constexpr size_t kMaxQueuedOutcomes = 4096;

  // OK when the stream's caller may send `request` (it names its own node).
  using Authorize =
      std::function<absl::Status(const v1::ContributeWordsRequest& request)>;
  // Hands a contribution to the coordinator; `done` runs exactly once, on
  // any thread, never inside the reactor's lock.
  using Contribute = std::function<void(const v1::ContributeWordsRequest&,
                                        WordRounds::SharedDone done)>;

  // Creates the reactor and starts reading; gRPC owns it and it deletes
  // itself in OnDone. `precheck` (authentication) is OK or ends the call at
  // once.
  static RoundStreamReactor* Start(absl::Status precheck, Authorize authorize,
                                   Contribute contribute);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // What pending outcomes reach: the reactor until OnDone cuts the link.
  struct Link {
    absl::Mutex mu;
    RoundStreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  RoundStreamReactor(Authorize authorize, Contribute contribute);
  // Queues `outcome` for the contribution tagged `tag`.
  void Deliver(std::shared_ptr<const WordRounds::Outcome> outcome,
               uint64_t tag);
  // Ends the call with `status` once nothing is being written.
  void CloseLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishWhenIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<Link> link_ = std::make_shared<Link>();
  const Authorize authorize_;
  const Contribute contribute_;
  grpc::ByteBuffer incoming_;  // only the reading side touches it

  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // The node stopped sending (half-close): finish once every contribution
  // has its answer written.
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t unanswered_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status close_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_ROUND_STREAM_REACTOR_H_
