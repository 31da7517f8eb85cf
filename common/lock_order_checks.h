// Abseil's lock-order (deadlock) checker, off in optimized builds.
//
// Debian's abseil is built without NDEBUG, so its checker is on in every
// process that links it: each absl::Mutex gets a node in one process-wide
// graph on its first lock and every acquisition is recorded there under a
// global lock. rankd creates mutexes per operation (an operation, its
// completion), so that cost a Gloo collective about 1.5 us of its 9-10 us
// of host time on the benchmark machine, and a busy coordinator about 4% of
// its CPU (bench/RESULTS.md). An abseil built with NDEBUG leaves the checker
// off; this does the same in rankd's optimized builds. Builds without
// NDEBUG (the tests, the sanitizers) keep it on.
//
// Depends only on abseil.
#ifndef RANKD_COMMON_LOCK_ORDER_CHECKS_H_
#define RANKD_COMMON_LOCK_ORDER_CHECKS_H_

namespace rankd {

// Set to "keep" to leave abseil's setting alone (a debug build of a
// program that wants the checker while it links an optimized rankd).
inline constexpr char kLockOrderChecksEnvVar[] = "RANKD_LOCK_ORDER_CHECKS";

// The first call in a build with NDEBUG turns abseil's lock-order checker
// off for the whole process (absl::SetMutexDeadlockDetectionMode(kIgnore)),
// unless $RANKD_LOCK_ORDER_CHECKS is "keep"; later calls, and every call in
// a build without NDEBUG, do nothing. Thread-safe. Called by the daemon at
// start and by Client::Connect, so that every rank process (C++, C, Python,
// Rust) gets it before its first operation. Once off, the checker must
// stay off: abseil's bookkeeping would then find locks released that it
// never saw taken.
void UseReleaseLockOrderChecks();

}  // namespace rankd

#endif  // RANKD_COMMON_LOCK_ORDER_CHECKS_H_
