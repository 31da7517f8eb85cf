// OperationLedger: the operations a session has outstanding, each with its
// per-operation deadline and what it is (for the mismatch diagnosis), so
// that one watchdog can hold every operation to its deadline and one abort
// can fail every operation it kills. Backend-independent: it knows
// operations (dataplane/operation.h), not native work. Times are on
// MonotonicNow's clock (common/monotonic_clock.h).
//
//   OperationLedger ledger;
//   auto sequence = ledger.Add(op, MonotonicNow() + op_timeout, what);
//   ...                              // native layer: sequence->store(n)
//   if (auto late = ledger.FirstExpired(MonotonicNow())) { ... abort ... }
//   ledger.FailAll(cause);           // before native work is aborted
//
// The abort race is closed here: FailAll latches its cause, and an
// operation added afterwards is failed with it at once, so work the native
// layer accepts after an abort started never reports success.
//
// Both backends keep one per session, each operation due op_timeout after
// its submission and held to it by the session's watchdog
// (dataplane/watchdog.h): on NCCL at the deadline itself, with the
// diagnosis once the sequence number is recorded; on Gloo as the backstop
// behind Gloo's own timeouts.
//
// Thread-safe. Depends on dataplane/operation.h, mismatch_diagnosis.h and
// absl.
#ifndef RANKD_DATAPLANE_OPERATION_LEDGER_H_
#define RANKD_DATAPLANE_OPERATION_LEDGER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/mismatch_diagnosis.h"
#include "dataplane/operation.h"

namespace rankd::dataplane {

class OperationLedger {
 public:
  // Where the native layer records the operation's sequence number once it
  // ordered the work (the number diagnosis reports meet under); -1 until
  // then.
  using SequenceCell = std::shared_ptr<std::atomic<int64_t>>;

  // An outstanding operation past its deadline.
  struct Expired {
    std::shared_ptr<Operation> op;
    // What it is; `what.sequence` is the recorded sequence number (0 when
    // none was recorded).
    SubmittedOperation what;
    // Whether the native layer ordered it (recorded a sequence number): work
    // that was never ordered has nothing to compare across members.
    bool ordered = false;
  };

  // Add drops destroyed operations once it holds `prune_at` entries (without
  // asking any operation whether it finished: that is Prune's, off the
  // submitting thread).
  explicit OperationLedger(size_t prune_at = 256) : prune_at_(prune_at) {}

  OperationLedger(const OperationLedger&) = delete;
  OperationLedger& operator=(const OperationLedger&) = delete;

  // Registers `op`, due by `deadline`, before its native work is queued.
  // The ledger holds it weakly (its completion owns it). When FailAll was
  // called before, `op` is failed with that cause at once. Returns the cell
  // for its sequence number, or null without `records_sequence` (a backend
  // that never records one, Gloo's: no cell is made, and the operation
  // counts as never ordered).
  SequenceCell Add(const std::shared_ptr<Operation>& op, absl::Time deadline,
                   SubmittedOperation what, bool records_sequence = true);

  // The first registered operation that is unfinished at `now` and past its
  // deadline, or nullopt.
  std::optional<Expired> FirstExpired(absl::Time now);

  // The unfinished operations, oldest first, at most `most` of them, for
  // a message: "#3 on world: all_reduce_sum f32[4], ..." (and "and N more"),
  // or "no operation outstanding".
  std::string DescribeUnfinished(size_t most) const;

  // Fails every unfinished operation with `cause` (Operation::FailIfRunning)
  // and every operation added later. The first cause wins.
  void FailAll(const absl::Status& cause);
  // The cause FailAll latched (OK when it was never called).
  absl::Status failed() const;

  // Drops finished and destroyed operations.
  void Prune();
  // Operations registered now (finished ones included until pruned).
  size_t size() const;

 private:
  struct Entry {
    std::weak_ptr<Operation> op;
    absl::Time deadline;
    SubmittedOperation what;
    SequenceCell sequence;  // null: never recorded
    // The recorded sequence number, -1 when none was.
    int64_t recorded() const { return sequence ? sequence->load() : -1; }
  };
  void PruneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t prune_at_;
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_OPERATION_LEDGER_H_
