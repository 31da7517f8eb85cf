// common/round_slots.h: the shared-memory file through which a rank and its
// node's daemon exchange all_gather_words rounds without a gRPC call per
// round (docs/architecture.md, "Local fast path").
//
// The daemon creates the file in its Unix socket's folder when a joined rank
// asks (Rank.OpenRoundSlots), the rank maps it, and from then on:
//   rank:   writes its s-th request (s = 0, 1, 2, ...) into slot s % slots,
//           publishes `posted` = s + 1, rings the request bell and wakes the
//           daemon if it sleeps;
//   daemon: takes requests in order (advancing `consumed`); when a round
//           finishes it writes the answer into the same slot, publishes the
//           slot's answer sequence s + 1, rings the answer bell and, when
//           the rank says it has threads asleep on it, wakes them (a rank
//           still polling sees the bell without a system call).
// A rank reuses slot s % slots only after it has read answer s - slots, so
// at most `slots` requests are outstanding; the daemon treats more as a
// protocol violation. Either side may close the file (the daemon when the
// rank goes away or it shuts down; the rank when it detaches): waiters on
// both sides wake and see `closed`.
//
// Both ends are separate processes that do not trust each other's writes:
// every length read from the file is checked before use, and a request is
// copied out before it is validated, so a rank that scribbles on its file
// can hurt only its own rounds. Counters are 64-bit and never wrap in
// practice; the bells are the 32-bit futex words.
//
// Depends on common/mapping_guard, absl and Linux (mmap, futex).
#ifndef RANKD_COMMON_ROUND_SLOTS_H_
#define RANKD_COMMON_ROUND_SLOTS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace rankd {

// Requests a rank may have outstanding in its file.
inline constexpr uint32_t kRoundSlots = 8;
// Largest file the daemon makes for one rank: frames are shortened for
// large worlds so that the results fit (32 words per rank at 4096 ranks).
inline constexpr size_t kMaxRoundSlotsFileBytes = size_t{4} << 20;
// Largest frame (words) a slot carries; longer frames go over gRPC.
inline constexpr uint32_t kRoundSlotFrameWords = 256;
// Longest error message an answer carries; longer ones are cut, marked
// "...".
inline constexpr size_t kRoundSlotMessageBytes = 4096;

// Sizes of one file. All slots are alike.
struct RoundSlotsGeometry {
  uint32_t slots = 0;
  uint32_t frame_words = 0;   // largest frame of a request
  uint32_t result_words = 0;  // largest result of an answer

  // The geometry a daemon offers a job of `world_size` ranks (>= 1):
  // kRoundSlots slots of min(kRoundSlotFrameWords, MaxFrameWords) words per
  // frame, fewer where needed to keep the file within
  // kMaxRoundSlotsFileBytes, and results of that many words per rank.
  static RoundSlotsGeometry ForWorld(uint32_t world_size);

  size_t SlotBytes() const;
  size_t FileBytes() const;
  bool operator==(const RoundSlotsGeometry&) const = default;
};

// One request as the daemon copied it out of a slot (not yet validated
// beyond its length).
struct SlotRequest {
  uint64_t round = 0;
  uint32_t timeout_ms = 0;
  std::vector<uint32_t> words;
};

// One answer as the rank read it: the round's status and, when OK, the
// rank-major result.
struct SlotAnswer {
  uint64_t round = 0;
  absl::Status status;
  uint32_t words_per_rank = 0;
  std::vector<uint32_t> words;
};

// How long either end of a node's round slots polls (yielding the CPU)
// before it sleeps on a futex: 30 us when this process may run on at least
// as many CPUs as the node has `local_ranks` (each rank has a core, as on a
// GPU node), else zero, since polling would then take CPU from the ranks
// and daemon that finish the round. Waking a sleeping thread costs tens of
// microseconds on a VM, more than a whole round among local ranks.
absl::Duration DefaultRoundSpin(uint32_t local_ranks);

// A mapped round-slots file. Either end holds one; the mapping (and, on the
// daemon, nothing else) is released by the destructor. Thread-safe in the
// sense the protocol allows: one thread posts requests at a time (the rank
// serializes its submissions), one thread at a time takes them (the
// daemon's watcher, or its poller while the rank is busy), and answers for
// distinct sequences may be written concurrently.
class RoundSlots {
 public:
  // Daemon: creates `path` (which must not exist) with permission bits
  // `mode`, sized, allocated (so a full tmpfs is an error here, not a
  // fault later) and headed for `geometry`, its mapping guarded
  // (common/mapping_guard.h: if the rank truncates the file, the daemon's
  // next access reads zeros instead of faulting, and broken() turns true).
  // Errors name the path (AlreadyExists, PermissionDenied,
  // ResourceExhausted for no space or too many guarded mappings, ...).
  static absl::StatusOr<std::unique_ptr<RoundSlots>> Create(
      const std::string& path, mode_t mode, RoundSlotsGeometry geometry);

  // Rank: maps the file at `path` and checks that its header describes
  // `expected` (what Rank.OpenRoundSlots answered). Errors name the path:
  // the open/mmap failure, or FailedPrecondition for a file that is not a
  // round-slots file of that geometry.
  static absl::StatusOr<std::unique_ptr<RoundSlots>> Open(
      const std::string& path, RoundSlotsGeometry expected);

  ~RoundSlots();
  RoundSlots(const RoundSlots&) = delete;
  RoundSlots& operator=(const RoundSlots&) = delete;

  const RoundSlotsGeometry& geometry() const { return geometry_; }

  // --- rank side ---

  // Writes request `sequence` (which must be posted() exactly, with its
  // slot's previous answer already read) and wakes the daemon. `words`
  // must fit geometry().frame_words.
  void Post(uint64_t sequence, uint64_t round, uint32_t timeout_ms,
            absl::Span<const uint32_t> words);
  // Answer `sequence` if the daemon has published it; nullopt otherwise.
  // A malformed answer comes back as an Internal status.
  std::optional<SlotAnswer> ReadAnswer(uint64_t sequence) const;
  // The answer bell's value; pass it to WaitForAnswers after checking.
  uint32_t AnswerBell() const;
  // Blocks until the answer bell moves from `seen`, the file is closed, or
  // `deadline` (on MonotonicNow's clock, common/monotonic_clock.h) passes,
  // first polling (and yielding the CPU) for up to `spin` before sleeping
  // on the futex: waking a sleeping thread costs tens of microseconds, far
  // more than a round among local ranks when each has a core. Spurious
  // returns are allowed; re-check and call again.
  void WaitForAnswers(uint32_t seen, absl::Time deadline,
                      absl::Duration spin = absl::ZeroDuration()) const;
  // Marks the rank's end as mapped (the daemon then unlinks the file).
  void Attach();

  // --- daemon side ---

  // Requests the rank has published so far (untrusted).
  uint64_t posted() const;
  // Requests the daemon has taken so far.
  uint64_t consumed() const;
  // Copies request `sequence` out. InvalidArgument when its frame is longer
  // than the slot holds.
  absl::StatusOr<SlotRequest> Take(uint64_t sequence);
  // Publishes consumed() = sequence + 1: request `sequence` and every one
  // before it reached the daemon's round bookkeeping, so a round the rank
  // sends another way cannot overtake them. Call after handing it on.
  void MarkTaken(uint64_t sequence);
  // Writes answer `sequence`: `result` is the rank-major result (at most
  // geometry().result_words words) or the round's error. Wakes the rank's
  // threads sleeping in WaitForAnswers (a polling one sees the bell).
  void Answer(uint64_t sequence, uint64_t round, uint32_t words_per_rank,
              absl::Span<const uint32_t> result, const absl::Status& status);
  // Blocks until the request bell moves from `seen` (read with
  // RequestBell() before checking posted()), the file is closed, or
  // `deadline` (on MonotonicNow's clock) passes; the rank rings only while
  // the daemon says it sleeps, which this call does.
  uint32_t RequestBell() const;
  void WaitForRequests(uint32_t seen, absl::Time deadline);
  // True once the rank called Attach.
  bool attached() const;
  // True once an access found the file truncated (by the rank): the
  // mapping now holds zeros; close and drop it.
  bool broken() const;

  // --- both ---

  // Marks the file closed and wakes every waiter on both ends.
  void Close();
  bool closed() const;

 private:
  RoundSlots(void* base, size_t bytes, RoundSlotsGeometry geometry);
  char* SlotBase(uint64_t sequence) const;

  void* const base_;
  const size_t bytes_;
  const RoundSlotsGeometry geometry_;
  int guard_ = -1;  // MappingGuard handle (daemon side), -1 when unguarded
};

}  // namespace rankd

#endif  // RANKD_COMMON_ROUND_SLOTS_H_
