// MismatchDiagnosis: says who submitted what when an operation failed
// natively (or missed its deadline) while the job is healthy. Shared by both
// backends.
//
// Operations whose members disagree (another dtype, shape, root, or another
// operation altogether) do not complete: on Gloo their tags differ
// (dataplane/gloo/internal/agreement_check.h) so they never pair; on NCCL their
// kernels wait for each other. Each member waits until op_timeout, or until a
// peer that timed out first aborts the transport. No peer was lost, so the
// control plane has nothing to say; this explains the failure instead. Each
// member whose operation failed publishes what it submitted under the
// operation's sequence number in the rankd key-value broker, then reads what
// the other members published (until they all did, the job fails, or `grace`
// passes). Nothing is exchanged while operations succeed: the fast path pays
// nothing.
//
// Used by the backends' executors and watchdogs. Thread-safe (const).
// Depends on dataplane/agreement.h (the fingerprint, re-exported for the
// backends), dataplane/control_plane.h, common/rank_list.h and absl.
#ifndef RANKD_DATAPLANE_MISMATCH_DIAGNOSIS_H_
#define RANKD_DATAPLANE_MISMATCH_DIAGNOSIS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/agreement.h"
#include "dataplane/control_plane.h"

namespace rankd::dataplane {

// One failed operation as this member submitted it.
struct SubmittedOperation {
  // Identifies the group or route in key names: "world", "g3", "r0-1g3".
  std::string scope_key;
  // For messages: "world", "group 3", "route 0->1 in group 3".
  std::string scope_name;
  // Its sequence number on the group or route (the same on every member
  // that submitted the same work).
  uint32_t sequence = 0;
  // What it was, in the canonical form the fingerprint is taken of.
  std::string canonical;
  // The world ranks that take part, including `self`.
  std::vector<uint32_t> members;
  uint32_t self = 0;
};

// What Explain concluded.
struct Explanation {
  // What the failed operation should report.
  absl::Status status;
  // True when members reported different operations: the cause is
  // established (there is no lost peer to wait for).
  bool members_disagree = false;
};

class MismatchDiagnosis {
 public:
  // `control_plane` must outlive this object. `key_prefix` namespaces the
  // keys (job incarnation and session instance), which live under job
  // epoch `epoch` (EpochKey in control_plane.h). `grace` bounds how long
  // Explain waits for the other members' reports.
  MismatchDiagnosis(ControlPlane* control_plane, std::string key_prefix,
                    absl::Duration grace, uint64_t epoch = 1);

  // Returns the status the failed operation should report instead of
  // `error` (members_disagree is true in the second case):
  //   - `error` unchanged when the job has failed (the communicator then
  //     names the lost rank) or when every member reported the same
  //     operation;
  //   - InvalidArgument naming which ranks submitted which operation when
  //     any member reported a different one (with `error` appended);
  //   - `error` with the ranks that did not report within `grace` appended
  //     (they are behind, stalled, or never submitted it), as
  //     DeadlineExceeded when `error` was DeadlineExceeded or Unavailable
  //     (this member's timeout, or a peer closing the connection after its
  //     own timeout), with `error`'s code otherwise.
  //   - `error` unchanged, right after publishing this member's report,
  //     after NoteLocalAbort(): this member tore its own transport down (a
  //     NativeCancel deadline, a job failure, session teardown), which is
  //     the cause; waiting for peers would stretch a bounded wait.
  // Blocks for at most about `grace` (plus one key-value write).
  Explanation Explain(const SubmittedOperation& op,
                      const absl::Status& error) const;

  // Records that this member aborted its own transport (Gloo contexts,
  // NCCL communicators; called before it does). Later and concurrent Explain
  // calls return at once.
  void NoteLocalAbort() const { locally_aborted_.store(true); }

 private:
  std::string KeyOf(const SubmittedOperation& op, uint32_t rank) const;

  ControlPlane* const control_plane_;
  const std::string key_prefix_;
  const uint64_t epoch_;
  const absl::Duration grace_;
  // Set once, never cleared (an aborted session stays poisoned).
  mutable std::atomic<bool> locally_aborted_{false};
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_MISMATCH_DIAGNOSIS_H_
