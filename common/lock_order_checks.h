// Abseil's lock-order (deadlock) checker, off in optimized builds.
//
// Debian's abseil is built without NDEBUG, so its checker is on in every
// process that links it: each absl::Mutex gets a node in one process-wide
// graph on its first lock and every acquisition is recorded there under a
// global lock. rankd creates mutexes per operation (an operation, its
// completion), so that costs a data-plane operation about 1.5 us of the
// layer's 8-9 us on the benchmark machine, and a busy coordinator about 4%
// of its CPU (bench/RESULTS.md). An abseil built with NDEBUG leaves the
// checker off; this restores that in rankd's optimized builds. Builds
// without NDEBUG (the tests, sanitizers) keep it on.
//
// Depends only on abseil.
#ifndef RANKD_COMMON_LOCK_ORDER_CHECKS_H_
#define RANKD_COMMON_LOCK_ORDER_CHECKS_H_

namespace rankd {

// In a build with NDEBUG, turns abseil's lock-order checker off for the
// whole process (absl::SetMutexDeadlockDetectionMode(kIgnore)); otherwise
// does nothing. Idempotent and thread-safe. Called by the daemon at start
// and by Client::Connect, so that every rank process (C++, C, Python, Rust)
// gets it before its first operation. A program that wants the checker in
// an optimized build can turn it back on after connecting.
void UseReleaseLockOrderChecks();

}  // namespace rankd

#endif  // RANKD_COMMON_LOCK_ORDER_CHECKS_H_
