// NcclSessionOptions: what an NCCL session is opened with (device, tag,
// timeouts, agreement checking, unique-id brokering), the counterpart of
// gloo_options.h's GlooSessionOptions. Every rank of a job must use the same
// values where a field says so. Depends on nccl_unique_id.h,
// dataplane/capabilities.h and absl.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_OPTIONS_H_
#define RANKD_DATAPLANE_NCCL_NCCL_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "dataplane/capabilities.h"
#include "dataplane/nccl/nccl_unique_id.h"

namespace rankd::dataplane::nccl {

inline constexpr char kBackendName[] = "nccl";
inline constexpr uint32_t kMaxNcclExecutors = 8;

struct NcclSessionOptions {
  // CUDA device of this rank (an ordinal among the devices this process
  // sees). -1, the default, lets the visible device count decide, as
  // torchrun users expect (DefaultDevice in default_device.h; docs/nccl.md,
  // "The default device"): the rank's index on its node (descriptor
  // local_rank) when the process sees at least as many GPUs as the node
  // runs ranks; device 0 when it sees exactly one (a launcher or
  // container gave each rank process its own GPU); otherwise Open fails
  // with FailedPrecondition before any communicator exists.
  int device = -1;
  // Names this session's keys in the job's key-value broker (unique ids,
  // diagnosis reports). Unset, the default, a session numbers itself: the
  // n-th session a rank opens is tagged "s<n-1>", counted per rank in the
  // job's key-value store, so sessions opened one after another never read
  // each other's keys as long as every rank opens them in the same order
  // (as GlooSessionOptions::instance). Two sessions of one job incarnation
  // with the same explicit tag would.
  std::optional<std::string> tag;
  // Unique-id brokering plus communicator init, all communicators together.
  absl::Duration init_timeout = absl::Seconds(120);
  // How long one NCCL call may stay ncclInProgress (waiting for peers to
  // connect) before the session is poisoned and aborted.
  absl::Duration enqueue_timeout = absl::Seconds(120);
  // Bounds every operation from submission to completion (as
  // GlooSessionOptions::op_timeout does): when it passes, the watchdog
  // publishes what this rank submitted, reads what the other members published
  // (for up to failure_attribution_grace; dataplane/mismatch_diagnosis.h), then
  // aborts every communicator and poisons the session. The operation fails
  // DeadlineExceeded naming it and the members that did not report it, or
  // FailedPrecondition naming who submitted what when members disagree.
  absl::Duration op_timeout = absl::Seconds(60);
  // Members that submit different work never report success: every
  // operation's agreement record (internal/operation_agreement.h) travels
  // in its payload's NCCL group and is compared when the work finished; a
  // disagreement fails the operation (FailedPrecondition naming who
  // submitted what: a poisoned session never answers InvalidArgument) and
  // poisons the session, and what NCCL cannot pair hangs until
  // op_timeout. verify_agreement checks first instead, as
  // GlooSessionOptions::verify_agreement does: the records travel alone,
  // Submit waits until every member's arrived (it returns once all members
  // submitted the operation and what was queued before it on the stream
  // ran), and a disagreeing operation is refused before
  // any of its payload is queued on any member: its completion fails with
  // that InvalidArgument and the session stays usable (in a batch, only the
  // disagreeing transfers are left out). It costs one more small NCCL
  // launch and a host wait for it per operation, and Submit no longer runs
  // ahead of the stream: worth it while developing, off by default.
  // all_to_all_v and uneven all_gather check their counts first whatever
  // the setting. Every rank must use the same setting.
  bool verify_agreement = false;
  // How long a missed deadline waits for the other members' reports.
  absl::Duration failure_attribution_grace = absl::Seconds(2);
  // Deadline of AllGatherWords rounds.
  absl::Duration words_timeout = absl::Seconds(60);
  // Watchdog period (job health, async errors, quarantine).
  absl::Duration watchdog_interval = absl::Milliseconds(50);
  // After ncclCommAbort, how long a NativeCancel wait lets aborted work
  // leave before quarantining it.
  absl::Duration abort_grace = absl::Seconds(10);
  // How long aborting the communicators (ncclCommAbort, which waits for
  // the device) may take. Past it the process writes which communicators,
  // operations and peers are stuck to stderr and ends itself with exit
  // status 86 (common/exit_codes.h, docs/operations.md "Exit statuses")
  // rather than hang with no word; absl::InfiniteDuration() never ends it.
  absl::Duration abort_timeout = absl::Seconds(60);
  // Finalize bound per communicator, and quarantine drain bound, at
  // destruction.
  absl::Duration destroy_timeout = absl::Seconds(10);
  // Ranks per ncclUniqueId for ncclCommInitRankScalable.
  uint32_t ranks_per_unique_id = kDefaultRanksPerUniqueId;
  // Replaces ncclGetUniqueId (tests).
  UniqueIdGenerator unique_id_generator;
  // When set, the session advertises (and serves) only what this allows:
  // the intersection with what it can do, as
  // GlooSessionOptions::restrict_capabilities. Everything else fails closed
  // (Unimplemented naming the capability); without exact_completion,
  // completions do not offer QuarantineUntilComplete.
  std::optional<DistributedCapabilities> restrict_capabilities;
  // Executor lanes (NcclExecutor::lane), as GlooSessionOptions::executors:
  // operations pair by lane, and each lane is its own ordering domain (its
  // own communicators: docs/nccl.md, "Communicators and order"), so work on
  // different lanes never waits for work on another. Lane 0 is the
  // session's and the default executor's. Lanes above 0 are split from
  // each group's communicator the first time the group is used on one of
  // them (needs ncclCommSplit, NCCL 2.18). 1 to kMaxNcclExecutors; every
  // rank must use the same value.
  uint32_t executors = 1;
};

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_OPTIONS_H_
