// common/round_slots.cc: see round_slots.h.
//
// File layout (native byte order; both ends are on one host):
//   header, 256 bytes: magic, version, geometry, file size, then on their
//     own cache lines the rank's words (posted, request bell, daemon
//     sleeping, rank sleepers) and the daemon's words (consumed, answer
//     bell, closed, attached);
//   `slots` slots, each a request (round, timeout, length, frame) followed
//     by an answer (sequence, round, code, lengths, message, result).
#include "common/round_slots.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/mapping_guard.h"
#include "common/monotonic_clock.h"

namespace rankd {
namespace {

constexpr uint64_t kMagic = 0x31534c4f53444e52;  // "RNDSOLS1"
// 2: the rank says when it sleeps (kRankSleepersAt), and the daemon wakes
// it only then; a version-1 rank would never be woken, so it is refused.
constexpr uint32_t kVersion = 2;

// Header offsets.
constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 8;
constexpr size_t kSlotsAt = 12;
constexpr size_t kFrameWordsAt = 16;
constexpr size_t kResultWordsAt = 20;
constexpr size_t kFileBytesAt = 24;
constexpr size_t kPostedAt = 64;
constexpr size_t kRequestBellAt = 72;
constexpr size_t kDaemonSleepingAt = 76;
// How many of the rank's threads are in (or about to enter) a futex wait
// on the answer bell; Answer skips the wake-up syscall while it is 0.
constexpr size_t kRankSleepersAt = 80;
constexpr size_t kConsumedAt = 128;
constexpr size_t kAnswerBellAt = 192;
constexpr size_t kClosedAt = 196;
constexpr size_t kAttachedAt = 200;
constexpr size_t kHeaderBytes = 256;

// Request offsets within a slot.
constexpr size_t kRequestRoundAt = 0;
constexpr size_t kRequestTimeoutAt = 8;
constexpr size_t kRequestWordsAt = 12;
constexpr size_t kRequestDataAt = 16;

// Answer offsets within the answer part of a slot.
constexpr size_t kAnswerSequenceAt = 0;
constexpr size_t kAnswerRoundAt = 8;
constexpr size_t kAnswerCodeAt = 16;
constexpr size_t kAnswerWordsPerRankAt = 20;
constexpr size_t kAnswerWordsAt = 24;
constexpr size_t kAnswerMessageBytesAt = 28;
constexpr size_t kAnswerMessageAt = 32;
constexpr size_t kAnswerDataAt = kAnswerMessageAt + kRoundSlotMessageBytes;

constexpr size_t Align64(size_t n) { return (n + 63) & ~size_t{63}; }

size_t RequestBytes(const RoundSlotsGeometry& g) {
  return Align64(kRequestDataAt + size_t{4} * g.frame_words);
}

template <typename T>
std::atomic_ref<T> Word(const void* base, size_t offset) {
  return std::atomic_ref<T>(*reinterpret_cast<T*>(
      const_cast<char*>(static_cast<const char*>(base)) + offset));
}

// Plain fields are copied with memcpy: the other process may be writing
// them, so each is read exactly once into a local before it is checked.
template <typename T>
T Load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}
template <typename T>
void Store(char* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

uint32_t* Address32(const void* base, size_t offset) {
  return reinterpret_cast<uint32_t*>(
      const_cast<char*>(static_cast<const char*>(base)) + offset);
}

void FutexWait(uint32_t* word, uint32_t seen, absl::Time deadline) {
  struct timespec relative;
  struct timespec* timeout = nullptr;
  if (deadline != absl::InfiniteFuture()) {
    absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) return;
    relative = absl::ToTimespec(left);
    timeout = &relative;
  }
  // Not FUTEX_PRIVATE: the word is shared with another process.
  syscall(SYS_futex, word, FUTEX_WAIT, seen, timeout, nullptr, 0);
}

void FutexWake(uint32_t* word, int waiters) {
  syscall(SYS_futex, word, FUTEX_WAKE, waiters, nullptr, nullptr, 0);
}

absl::Status ErrnoStatus(absl::string_view what, const std::string& path,
                         int error) {
  std::string message =
      absl::StrCat(what, " round-slots file ", path, ": ", strerror(error));
  switch (error) {
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

RoundSlotsGeometry RoundSlotsGeometry::ForWorld(uint32_t world_size) {
  RoundSlotsGeometry g;
  g.slots = kRoundSlots;
  g.frame_words = std::min(kRoundSlotFrameWords, MaxFrameWords(world_size));
  const uint32_t world = std::max<uint32_t>(world_size, 1);
  g.result_words = g.frame_words * world;
  while (g.frame_words > 1 && g.FileBytes() > kMaxRoundSlotsFileBytes) {
    g.frame_words /= 2;
    g.result_words = g.frame_words * world;
  }
  return g;
}

size_t RoundSlotsGeometry::SlotBytes() const {
  return RequestBytes(*this) +
         Align64(kAnswerDataAt + size_t{4} * result_words);
}

size_t RoundSlotsGeometry::FileBytes() const {
  return kHeaderBytes + size_t{slots} * SlotBytes();
}

RoundSlots::RoundSlots(void* base, size_t bytes, RoundSlotsGeometry geometry)
    : base_(base), bytes_(bytes), geometry_(geometry) {}

RoundSlots::~RoundSlots() {
  MappingGuard::Release(guard_);
  munmap(base_, bytes_);
}

bool RoundSlots::broken() const { return MappingGuard::Broken(guard_); }

absl::StatusOr<std::unique_ptr<RoundSlots>> RoundSlots::Create(
    const std::string& path, mode_t mode, RoundSlotsGeometry geometry) {
  if (geometry.slots == 0 || geometry.result_words < geometry.frame_words) {
    return absl::InvalidArgumentError(
        absl::StrCat("round-slots file ", path, ": bad geometry"));
  }
  const size_t bytes = geometry.FileBytes();
  int fd = ::open(path.c_str(),
                  O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus("cannot create", path, errno);
  // fchmod, not open's mode: the umask must not narrow who may map it.
  void* base = MAP_FAILED;
  int error = 0;
  if (::fchmod(fd, mode & 0666) != 0 ||
      ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    error = errno;
  } else if (int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
             e != 0) {
    error = e;
  } else {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = errno;
  }
  ::close(fd);
  if (base == MAP_FAILED) {
    ::unlink(path.c_str());
    return ErrnoStatus("cannot size and map", path, error);
  }
  char* h = static_cast<char*>(base);
  Store<uint32_t>(h + kVersionAt, kVersion);
  Store<uint32_t>(h + kSlotsAt, geometry.slots);
  Store<uint32_t>(h + kFrameWordsAt, geometry.frame_words);
  Store<uint32_t>(h + kResultWordsAt, geometry.result_words);
  Store<uint64_t>(h + kFileBytesAt, bytes);
  Word<uint64_t>(h, kMagicAt).store(kMagic, std::memory_order_release);
  std::unique_ptr<RoundSlots> slots(new RoundSlots(base, bytes, geometry));
  // The rank may truncate the file; the daemon must survive its next touch.
  slots->guard_ = MappingGuard::Guard(base, bytes);
  if (slots->guard_ < 0) {
    ::unlink(path.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(
        "round-slots file ", path, ": ", MappingGuard::kMaxGuardedMappings,
        " mappings are guarded already"));
  }
  return slots;
}

absl::StatusOr<std::unique_ptr<RoundSlots>> RoundSlots::Open(
    const std::string& path, RoundSlotsGeometry expected) {
  const size_t bytes = expected.FileBytes();
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int error = errno;
    ::close(fd);
    return ErrnoStatus("cannot stat", path, error);
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("round-slots file ", path, " is ", st.st_size,
                     " bytes, expected ", bytes, " for ", expected.slots,
                     " slots of ", expected.frame_words, " words"));
  }
  void* base =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int error = errno;
  ::close(fd);
  if (base == MAP_FAILED) return ErrnoStatus("cannot map", path, error);
  std::unique_ptr<RoundSlots> slots(new RoundSlots(base, bytes, expected));
  const char* h = static_cast<const char*>(base);
  RoundSlotsGeometry found;
  found.slots = Load<uint32_t>(h + kSlotsAt);
  found.frame_words = Load<uint32_t>(h + kFrameWordsAt);
  found.result_words = Load<uint32_t>(h + kResultWordsAt);
  if (Word<uint64_t>(h, kMagicAt).load(std::memory_order_acquire) != kMagic ||
      Load<uint32_t>(h + kVersionAt) != kVersion || !(found == expected) ||
      Load<uint64_t>(h + kFileBytesAt) != bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a version ", kVersion,
                     " round-slots file of the geometry the daemon named"));
  }
  return slots;
}

absl::Duration DefaultRoundSpin(uint32_t local_ranks) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int usable = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                         ? CPU_COUNT(&cpus)
                         : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return usable >= static_cast<int>(local_ranks) ? absl::Microseconds(30)
                                                 : absl::ZeroDuration();
}

char* RoundSlots::SlotBase(uint64_t sequence) const {
  return static_cast<char*>(base_) + kHeaderBytes +
         (sequence % geometry_.slots) * geometry_.SlotBytes();
}

// --- rank side ---

void RoundSlots::Post(uint64_t sequence, uint64_t round, uint32_t timeout_ms,
                      absl::Span<const uint32_t> words) {
  char* slot = SlotBase(sequence);
  const uint32_t n = static_cast<uint32_t>(
      std::min<size_t>(words.size(), geometry_.frame_words));
  Store<uint64_t>(slot + kRequestRoundAt, round);
  Store<uint32_t>(slot + kRequestTimeoutAt, timeout_ms);
  Store<uint32_t>(slot + kRequestWordsAt, n);
  if (n > 0) std::memcpy(slot + kRequestDataAt, words.data(), size_t{4} * n);
  Word<uint64_t>(base_, kPostedAt)
      .store(sequence + 1, std::memory_order_release);
  Word<uint32_t>(base_, kRequestBellAt).fetch_add(1);
  if (Word<uint32_t>(base_, kDaemonSleepingAt).load() != 0) {
    FutexWake(Address32(base_, kRequestBellAt), 1);
  }
}

std::optional<SlotAnswer> RoundSlots::ReadAnswer(uint64_t sequence) const {
  const char* answer = SlotBase(sequence) + RequestBytes(geometry_);
  if (Word<uint64_t>(answer, kAnswerSequenceAt)
          .load(std::memory_order_acquire) != sequence + 1) {
    return std::nullopt;
  }
  SlotAnswer out;
  out.round = Load<uint64_t>(answer + kAnswerRoundAt);
  const int32_t code = Load<int32_t>(answer + kAnswerCodeAt);
  const uint32_t words = Load<uint32_t>(answer + kAnswerWordsAt);
  const uint32_t message_bytes = Load<uint32_t>(answer + kAnswerMessageBytesAt);
  if (code < 0 || code > 16 || words > geometry_.result_words ||
      message_bytes > kRoundSlotMessageBytes) {
    out.status = absl::InternalError(
        absl::StrCat("malformed answer in round slot ",
                     sequence % geometry_.slots, " (code ", code, ", ", words,
                     " words, ", message_bytes, " message bytes)"));
    return out;
  }
  if (code != 0) {
    out.status = absl::Status(
        static_cast<absl::StatusCode>(code),
        absl::string_view(answer + kAnswerMessageAt, message_bytes));
    return out;
  }
  out.words_per_rank = Load<uint32_t>(answer + kAnswerWordsPerRankAt);
  out.words.resize(words);
  if (words > 0) {
    std::memcpy(out.words.data(), answer + kAnswerDataAt, size_t{4} * words);
  }
  return out;
}

uint32_t RoundSlots::AnswerBell() const {
  return Word<uint32_t>(base_, kAnswerBellAt).load();
}

void RoundSlots::WaitForAnswers(uint32_t seen, absl::Time deadline,
                                absl::Duration spin) const {
  if (closed()) return;
  // Yielding, not pausing: on a busy node the daemon thread that will ring
  // the bell may need this CPU.
  const absl::Time spin_until = std::min(deadline, MonotonicNow() + spin);
  while (MonotonicNow() < spin_until) {
    if (AnswerBell() != seen) return;
    sched_yield();
  }
  // Dekker with Answer, as WaitForRequests with Post: the daemon rings the
  // bell, then wakes only when it sees a sleeper, so the bell is re-checked
  // after counting this thread in. A count, not a flag: several threads of
  // one rank may wait at once.
  std::atomic_ref<uint32_t> sleepers = Word<uint32_t>(base_, kRankSleepersAt);
  sleepers.fetch_add(1);
  if (AnswerBell() == seen && !closed()) {
    FutexWait(Address32(base_, kAnswerBellAt), seen, deadline);
  }
  sleepers.fetch_sub(1);
}

void RoundSlots::Attach() {
  Word<uint32_t>(base_, kAttachedAt).store(1);
  Word<uint32_t>(base_, kRequestBellAt).fetch_add(1);
  FutexWake(Address32(base_, kRequestBellAt), 1);
}

// --- daemon side ---

uint64_t RoundSlots::posted() const {
  return Word<uint64_t>(base_, kPostedAt).load(std::memory_order_acquire);
}

uint64_t RoundSlots::consumed() const {
  return Word<uint64_t>(base_, kConsumedAt).load(std::memory_order_acquire);
}

absl::StatusOr<SlotRequest> RoundSlots::Take(uint64_t sequence) {
  const char* slot = SlotBase(sequence);
  SlotRequest request;
  request.round = Load<uint64_t>(slot + kRequestRoundAt);
  request.timeout_ms = Load<uint32_t>(slot + kRequestTimeoutAt);
  const uint32_t n = Load<uint32_t>(slot + kRequestWordsAt);
  if (n > geometry_.frame_words) {
    return absl::InvalidArgumentError(absl::StrCat(
        "round slot ", sequence % geometry_.slots, " holds a ", n,
        "-word frame; slots carry at most ", geometry_.frame_words));
  }
  request.words.resize(n);
  if (n > 0) {
    std::memcpy(request.words.data(), slot + kRequestDataAt, size_t{4} * n);
  }
  return request;
}

void RoundSlots::MarkTaken(uint64_t sequence) {
  Word<uint64_t>(base_, kConsumedAt)
      .store(sequence + 1, std::memory_order_release);
}

void RoundSlots::Answer(uint64_t sequence, uint64_t round,
                        uint32_t words_per_rank,
                        absl::Span<const uint32_t> result,
                        const absl::Status& status) {
  char* answer = SlotBase(sequence) + RequestBytes(geometry_);
  absl::Status written = status;
  if (written.ok() && result.size() > geometry_.result_words) {
    written = absl::InternalError(absl::StrCat(
        "round ", round, "'s result of ", result.size(),
        " words does not fit a round slot (", geometry_.result_words, ")"));
  }
  Store<uint64_t>(answer + kAnswerRoundAt, round);
  Store<int32_t>(answer + kAnswerCodeAt, static_cast<int32_t>(written.code()));
  if (written.ok()) {
    Store<uint32_t>(answer + kAnswerWordsPerRankAt, words_per_rank);
    Store<uint32_t>(answer + kAnswerWordsAt,
                    static_cast<uint32_t>(result.size()));
    Store<uint32_t>(answer + kAnswerMessageBytesAt, 0);
    if (!result.empty()) {
      std::memcpy(answer + kAnswerDataAt, result.data(), 4 * result.size());
    }
  } else {
    std::string message(written.message());
    if (message.size() > kRoundSlotMessageBytes) {
      message.resize(kRoundSlotMessageBytes - 3);
      message += "...";
    }
    Store<uint32_t>(answer + kAnswerWordsPerRankAt, 0);
    Store<uint32_t>(answer + kAnswerWordsAt, 0);
    Store<uint32_t>(answer + kAnswerMessageBytesAt,
                    static_cast<uint32_t>(message.size()));
    std::memcpy(answer + kAnswerMessageAt, message.data(), message.size());
  }
  Word<uint64_t>(answer, kAnswerSequenceAt)
      .store(sequence + 1, std::memory_order_release);
  Word<uint32_t>(base_, kAnswerBellAt).fetch_add(1);
  // A rank still polling sees the bell without a system call (which costs
  // more than the rest of a local round on a VM).
  if (Word<uint32_t>(base_, kRankSleepersAt).load() != 0) {
    FutexWake(Address32(base_, kAnswerBellAt), INT_MAX);
  }
}

uint32_t RoundSlots::RequestBell() const {
  return Word<uint32_t>(base_, kRequestBellAt).load();
}

void RoundSlots::WaitForRequests(uint32_t seen, absl::Time deadline) {
  // Dekker with Post: the rank rings after publishing and wakes only when
  // it sees this flag, so the bell is re-checked after raising it.
  Word<uint32_t>(base_, kDaemonSleepingAt).store(1);
  if (RequestBell() == seen && !closed()) {
    FutexWait(Address32(base_, kRequestBellAt), seen, deadline);
  }
  Word<uint32_t>(base_, kDaemonSleepingAt).store(0);
}

bool RoundSlots::attached() const {
  return Word<uint32_t>(base_, kAttachedAt).load() != 0;
}

// --- both ---

void RoundSlots::Close() {
  Word<uint32_t>(base_, kClosedAt).store(1);
  Word<uint32_t>(base_, kRequestBellAt).fetch_add(1);
  Word<uint32_t>(base_, kAnswerBellAt).fetch_add(1);
  FutexWake(Address32(base_, kRequestBellAt), INT_MAX);
  FutexWake(Address32(base_, kAnswerBellAt), INT_MAX);
}

bool RoundSlots::closed() const {
  return Word<uint32_t>(base_, kClosedAt).load() != 0;
}

}  // namespace rankd
