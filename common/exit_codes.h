// The exit statuses a rankd library ends a serving process with on its own,
// so that launchers (launcher/, rankrun) and orchestrators (Kubernetes) can
// tell them from the program's own statuses. docs/operations.md ("Exit
// statuses") says what each means and what to do. Depends on nothing.
#ifndef RANKD_COMMON_EXIT_CODES_H_
#define RANKD_COMMON_EXIT_CODES_H_

namespace rankd {

// A native abort did not return within its bound (NcclSessionOptions::
// abort_timeout): the device did not let the communicators go (a kernel
// that never ends, a stuck GPU). The process wrote which communicators,
// operation and peers were stuck to stderr and ended itself instead of
// hanging with no word. Replace the process; if it repeats on one node,
// the GPU needs a reset (drain the node).
inline constexpr int kExitNativeAbortHung = 86;

// A node daemon (rankd with --recovery=on) was fenced by its coordinator:
// the coordinator declared its node lost (heartbeats unanswered for the
// heartbeat timeout: a partition, a paused process) or registered a newer
// daemon for the node, so this daemon may never serve the node again. It
// failed its ranks with the reason and exited instead of running on as a
// daemon of nothing. Restart it (a new daemon incarnation re-registers the
// node and the job recovers); Kubernetes does so for a failed container.
inline constexpr int kExitDaemonFenced = 87;

}  // namespace rankd

#endif  // RANKD_COMMON_EXIT_CODES_H_
