// GlooSessionOptions: how the Gloo backend connects and how long it waits.
// Shared by the communicator, the backend and the session factory. Depends on
// dataplane/capabilities.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_OPTIONS_H_
#define RANKD_DATAPLANE_GLOO_GLOO_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "dataplane/capabilities.h"

namespace rankd::dataplane::gloo {

inline constexpr uint32_t kMaxGlooExecutors = 8;
// GlooSessionOptions::all_reduce_bcube_max_bytes and
// all_reduce_ring_segment_bytes by default.
inline constexpr size_t kDefaultAllReduceBcubeMaxBytes = size_t{1} << 20;
inline constexpr size_t kDefaultAllReduceRingSegmentBytes = size_t{8} << 20;

struct GlooSessionOptions {
  // Address the TCP transport listens on: an IP or hostname of this rank
  // that its peers can reach (the pod IP in Kubernetes).
  std::string hostname = "127.0.0.1";
  // A network interface name (e.g. "eth0"); when set it overrides hostname.
  std::string interface;
  // Bounds rendezvous (key-value waits) and connecting each group.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Bounds every operation from submission to completion, as
  // NcclSessionOptions::op_timeout does. Each Gloo call carries it as its
  // own timeout, after which the operation fails with DeadlineExceeded
  // naming who did not take part (or InvalidArgument naming who submitted
  // what) and the session is poisoned. The session's watchdog
  // (dataplane/watchdog.h) is the backstop for what Gloo's timeouts cannot
  // reach (time spent queued, operations of several Gloo calls): it aborts
  // every context once an operation is op_timeout + 2 x
  // failure_attribution_grace + 1 s past its submission (room for Gloo's
  // own failure path and its diagnosis first); its error names the late
  // operation only.
  absl::Duration op_timeout = absl::Seconds(60);
  // Watchdog period: how often the session looks at the job's health
  // (besides the control plane's failure notice) and at deadlines.
  absl::Duration watchdog_interval = absl::Milliseconds(50);
  // Deadline of AllGatherWords rounds (the bounded variant takes its own).
  absl::Duration words_timeout = absl::Seconds(60);
  // After a transport failure, how long to wait for the control plane to
  // report the job failure (which names the lost rank or node) so the error
  // can name it instead of a socket address.
  absl::Duration failure_attribution_grace = absl::Seconds(2);
  // Members that submit different operations (another dtype, shape, root,
  // counts or kind) never exchange data either way: each operation's Gloo
  // tag carries a fingerprint of it, so theirs do not pair; they fail at
  // op_timeout with InvalidArgument naming who submitted what
  // (dataplane/mismatch_diagnosis.h), and the session is poisoned.
  // verify_agreement adds an explicit check before each collective (one
  // small allgather of the fingerprints; for send/receive, one exchange) so
  // that a disagreement fails at once on every member, before any payload
  // moves, and leaves the session usable. It costs about one extra small
  // collective per operation: worth it while developing, off by default.
  // variable_all_to_all checks its count matrix this way whatever the
  // setting. Every rank must use the same setting.
  bool verify_agreement = false;
  // all_reduce_sum payloads of at most this many bytes use Gloo's bcube
  // algorithm (recursive halving/doubling: 2 log2(n) exchanges for a power
  // of two), larger ones its ring (2 (n - 1) exchanges of pipelined
  // segments). With 4
  // ranks on one node bcube took about 0.7x the ring's time from 1 KiB to
  // 1 MiB and the ring won from 4 MiB (bench/RESULTS.md). 0: always the
  // ring.
  size_t all_reduce_bcube_max_bytes = kDefaultAllReduceBcubeMaxBytes;
  // The ring's largest segment. Gloo's own default is 1 MiB; with 4 ranks
  // on one node 8 MiB took about 0.9x its time at 16 and 64 MiB
  // (bench/RESULTS.md): fewer, larger socket writes and wake-ups. Gloo
  // keeps at least two segments per member in any case. At least 1.
  // Both choices are part of each operation's Gloo tag, so members whose
  // values differ never pair (they time out): every rank must use the same
  // values. So do ranks of builds from before these options and ranks with
  // the defaults (the old builds ran the ring with 1 MiB segments): a job
  // must not mix builds.
  size_t all_reduce_ring_segment_bytes = kDefaultAllReduceRingSegmentBytes;
  // Executors (GlooBackend::executor(lane)): independent in-order queues,
  // each with its own thread and its own Gloo context per group, so
  // tensor-parallel and pipeline traffic on different executors overlap.
  // Each one connects every group again (connections and connect time
  // grow with it). Operations pair by executor: an operation a member
  // submits on executor e pairs with the others' on executor e. 1 to
  // kMaxGlooExecutors; every rank must use the same value.
  uint32_t executors = 1;
  // Distinguishes several sessions of one job incarnation in the rendezvous
  // key space, so that a session never reads another one's addresses.
  // Unset (the default): the n-th session this rank opens in the job
  // incarnation is instance n - 1, counted in the job's key-value store, so
  // every rank must open its sessions in the same order (as they must join
  // their groups). Set: every rank must give the same value for the same
  // session, and no two live sessions may share one.
  std::optional<uint32_t> instance;
  // When set, the backend advertises (and serves) only what this allows:
  // the intersection with what Gloo can do. Everything else fails closed.
  std::optional<DistributedCapabilities> restrict_capabilities;
};

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_OPTIONS_H_
