// incarnation.h: the random id that tells one life of something from the
// next: a job (the coordinator's job incarnation), a daemon process (its
// daemon incarnation) and a rank's join (the client's rank incarnation).
// A peer that remembers an incarnation fences off messages from an older
// life with it, so a restarted rank or daemon is never taken for the one
// that died.
//
// Depends only on the C++ standard library and Linux's getrandom(2).
#ifndef RANKD_COMMON_INCARNATION_H_
#define RANKD_COMMON_INCARNATION_H_

#include <cstdint>

namespace rankd {

// Returns a fresh incarnation: 64 random bits, never 0 (0 means "none" in
// the protocol).
//
// Where the randomness comes from: the kernel's random number generator
// (getrandom(2)), read anew on every call; where that is not ready or not
// there (only very early in boot, or in an odd sandbox),
// std::random_device. Nothing is seeded once and kept, so a forked child or
// a process started in the same nanosecond on another node draws
// independently of its parent or twin.
//
// Why that is unique enough: incarnations are only ever compared with
// others of the same rank, node or job, and two lives share one only if
// two independent 64-bit draws match: at most n^2 / 2^65 for n lives, under
// 1e-7 for a million restarts.
//
// Thread-safe; never blocks; never fails.
uint64_t NewIncarnation();

}  // namespace rankd

#endif  // RANKD_COMMON_INCARNATION_H_
