// client/internal/round_call.h: one all_gather_words round of a joined
// rank, in flight over gRPC or the round slots (private to client/).
//
// SubmitRound numbers, validates and starts a round; both forms of
// Client::AllGatherWords (blocking, and PendingWords) wait on the
// RoundCall it returns. Depends on internal/rank_connection.h.
#ifndef RANKD_CLIENT_INTERNAL_ROUND_CALL_H_
#define RANKD_CLIENT_INTERNAL_ROUND_CALL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/internal/rank_connection.h"
#include "client/internal/round_slot_client.h"
#include "common/monotonic_clock.h"
#include "grpcpp/client_context.h"
#include "rankd/v1/rank.grpc.pb.h"

namespace rankd::internal {

// One all_gather_words round in flight, over gRPC or the round slots. Over
// gRPC it owns everything the call touches and is kept alive by the
// completion callback until the call is finished; over the slots its
// waiters read the answer out of the shared file themselves.
class RoundCall {
 public:
  // `generation` is the join (RankConnection::generation) the round was
  // numbered in.
  RoundCall(std::shared_ptr<RankConnection> core, uint64_t generation,
            uint64_t round, size_t frame_words)
      : core_(std::move(core)),
        generation_(generation),
        round_(round),
        frame_words_(frame_words) {}

  // Starts the RPC. `self` must own this object.
  static void Start(const std::shared_ptr<RoundCall>& self,
                    absl::Duration rpc_timeout);

  // Adopts request `sequence` of `slots`, which carries this round; its
  // answer is due within `answer_timeout`.
  void StartOnSlots(std::shared_ptr<RoundSlotClient> slots, uint64_t sequence,
                    absl::Duration answer_timeout);

  v1::AllGatherWordsRequest& request() { return request_; }
  uint64_t round() const { return round_; }
  uint64_t generation() const { return generation_; }
  bool IsDone() {
    if (slots_ != nullptr) return AwaitSlots(absl::InfinitePast());
    return done_.HasBeenNotified();
  }
  bool WaitFor(absl::Duration timeout) {
    if (slots_ != nullptr) return AwaitSlots(MonotonicNow() + timeout);
    return done_.WaitForNotificationWithTimeout(timeout);
  }
  void WaitDone() {
    if (slots_ != nullptr) {
      AwaitSlots(absl::InfiniteFuture());
      return;
    }
    done_.WaitForNotification();
  }

  // Valid once done.
  const absl::StatusOr<std::vector<uint32_t>>& result() const {
    return result_;
  }
  absl::StatusOr<std::vector<uint32_t>> TakeResult() {
    return std::move(result_);
  }

  // Recovery by domain: ranks per domain (0: off), set before Start; a
  // result then may span fewer ranks than the world (partial()).
  void set_domain_size(uint32_t size) { domain_size_ = size; }
  // Valid once done with a result: whether the round spanned fewer than
  // every data-parallel replica, and the replicas it spans (empty without
  // recovery by domain).
  bool partial() const { return partial_; }
  const std::vector<Client::DomainEpoch>& domains() const { return domains_; }

  // Ends the round with Cancelled unless it is done; waits until it is.
  void Cancel();

  // `status` with this round's context in front of its message.
  absl::Status InContext(const absl::Status& status) const {
    return absl::Status(status.code(),
                        absl::StrCat(Context(), ": ", status.message()));
  }

  std::string Context() const {
    return absl::StrCat(core_->conn->Context("AllGatherWords"), " round ",
                        round_);
  }

 private:
  void OnDone(const grpc::Status& status);

  // Waits for the slot answer until `deadline` (InfinitePast: just looks)
  // and finishes the round with it; true once the round is done. The
  // answer is claimed and the round finished under mu_, so a concurrent
  // waiter either claims it or finds the round done.
  bool AwaitSlots(absl::Time deadline);

  void FinishLocked(absl::StatusOr<std::vector<uint32_t>> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<std::vector<uint32_t>> CheckResult(
      uint64_t round, uint32_t words_per_rank,
      std::vector<uint32_t> words) const;

  const std::shared_ptr<RankConnection> core_;
  const uint64_t generation_;
  const uint64_t round_;
  const size_t frame_words_;
  uint32_t domain_size_ = 0;
  bool partial_ = false;
  std::vector<Client::DomainEpoch> domains_;
  absl::Duration rpc_timeout_;
  grpc::ClientContext context_;
  v1::AllGatherWordsRequest request_;
  v1::AllGatherWordsResponse response_;
  // Over the slots (set before the round is shared, then fixed).
  std::shared_ptr<RoundSlotClient> slots_;
  uint64_t sequence_ = 0;
  absl::Duration answer_timeout_;
  absl::Time answer_deadline_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Written by OnDone or FinishLocked before done_ is notified; read-only
  // afterwards.
  absl::StatusOr<std::vector<uint32_t>> result_;
  absl::Notification done_;
};

// Numbers the next round of `core` and starts it with this rank's `words`
// and the round's `timeout`, on the round slots when they can carry it,
// else over gRPC, keeping rounds in number order either way.
// InvalidArgument for a zero or unrepresentable timeout or a frame longer
// than kMaxFrameWords; FailedPrecondition when not joined, after Leave or
// after an earlier round failed; the job's failure once it failed. A
// started round's own outcome is its RoundCall's result.
absl::StatusOr<std::shared_ptr<RoundCall>> SubmitRound(
    const std::shared_ptr<RankConnection>& core,
    absl::Span<const uint32_t> words, absl::Duration timeout);

}  // namespace rankd::internal

#endif  // RANKD_CLIENT_INTERNAL_ROUND_CALL_H_
