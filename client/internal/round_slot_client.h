// client/internal/round_slot_client.h: a rank's end of its shared-memory
// round slots (common/round_slots.h), as the Client uses it: which slot the
// next round takes, answers read out of order, and the end's health.
//
// Not part of the public API. The Client serializes posting (its submit
// lock); claiming answers and waiting may happen on any thread. Depends on
// common/round_slots and absl.
#ifndef RANKD_CLIENT_INTERNAL_ROUND_SLOT_CLIENT_H_
#define RANKD_CLIENT_INTERNAL_ROUND_SLOT_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/round_slots.h"

namespace rankd {
namespace internal {

class RoundSlotClient {
 public:
  // Maps the daemon's file at `path` (of `geometry`) and attaches to it.
  // Errors name the path.
  // Waiters poll for `spin` before sleeping (RoundSlots::WaitForAnswers).
  static absl::StatusOr<std::unique_ptr<RoundSlotClient>> Open(
      const std::string& path, RoundSlotsGeometry geometry,
      absl::Duration spin);
  // Closes the file (the daemon's watcher ends) and unmaps it.
  ~RoundSlotClient();

  // True when a frame of `words` words fits a slot.
  bool Fits(size_t words) const;

  // Posts a request in the next slot and returns its sequence, or nullopt
  // when every slot holds an answer not yet come (the caller then uses
  // gRPC). An answer that came but was not claimed yet is kept aside for
  // its claimer first.
  std::optional<uint64_t> TryPost(uint64_t round, uint32_t timeout_ms,
                                  absl::Span<const uint32_t> words)
      ABSL_LOCKS_EXCLUDED(mu_);

  // True once the daemon took every request posted so far, so a round sent
  // by another path cannot overtake them.
  bool AllTaken() const;

  // Answer `sequence` if it came (each answer is handed out once).
  std::optional<SlotAnswer> Claim(uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);
  // Nobody will claim `sequence` (its round was cancelled).
  void Abandon(uint64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);

  // Pass Bell() (read before Claim) to Wait, which returns when an answer
  // may have come, the slots broke or closed, or `deadline` passes.
  uint32_t Bell() const;
  void Wait(uint32_t seen, absl::Time deadline) const;

  // OK while answers can still come. Otherwise why not: the failure given
  // to Break, or Unavailable when the daemon closed the file.
  absl::Status health() const ABSL_LOCKS_EXCLUDED(mu_);
  // Stops using the slots because of `cause` (the job failed or the daemon
  // was lost); every waiter wakes and sees health() == cause.
  void Break(const absl::Status& cause) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  RoundSlotClient(std::unique_ptr<RoundSlots> slots, absl::Duration spin);

  const std::unique_ptr<RoundSlots> slots_;
  const absl::Duration spin_;
  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;  // the next sequence to post
  // Posted sequences whose answer nobody claimed yet: true while a claimer
  // still wants it.
  std::map<uint64_t, bool> unclaimed_ ABSL_GUARDED_BY(mu_);
  // Answers read out so their slot could be reused, awaiting their claimer.
  std::map<uint64_t, SlotAnswer> kept_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace rankd

#endif  // RANKD_CLIENT_INTERNAL_ROUND_SLOT_CLIENT_H_
