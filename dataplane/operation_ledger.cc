#include "dataplane/operation_ledger.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

OperationLedger::SequenceCell OperationLedger::Add(
    const std::shared_ptr<Operation>& op, absl::Time deadline,
    SubmittedOperation what, bool records_sequence) {
  SequenceCell sequence =
      records_sequence ? std::make_shared<std::atomic<int64_t>>(-1) : nullptr;
  absl::MutexLock lock(&mu_);
  if (entries_.size() >= prune_at_) {
    // Cheap here, on the submitting thread: only destroyed operations (no
    // device queries); Prune() drops finished ones.
    entries_.erase(
        std::remove_if(entries_.begin(), entries_.end(),
                       [](const Entry& e) { return e.op.expired(); }),
        entries_.end());
  }
  entries_.push_back({op, deadline, std::move(what), sequence});
  // Under the same lock as FailAll's walk: an abort either saw this entry
  // or is seen here.
  if (!failed_.ok()) op->FailIfRunning(failed_);
  return sequence;
}

std::optional<OperationLedger::Expired> OperationLedger::FirstExpired(
    absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (const Entry& e : entries_) {
    if (now < e.deadline) continue;
    std::shared_ptr<Operation> op = e.op.lock();
    if (op == nullptr || op->Done()) continue;
    Expired expired{std::move(op), e.what, false};
    const int64_t sequence = e.recorded();
    expired.ordered = sequence >= 0;
    expired.what.sequence =
        static_cast<uint32_t>(std::max<int64_t>(sequence, 0));
    return expired;
  }
  return std::nullopt;
}

std::string OperationLedger::DescribeUnfinished(size_t most) const {
  absl::MutexLock lock(&mu_);
  std::string described;
  size_t unfinished = 0;
  for (const Entry& e : entries_) {
    std::shared_ptr<Operation> op = e.op.lock();
    if (op == nullptr || op->Done()) continue;
    if (++unfinished > most) continue;
    const int64_t sequence = e.recorded();
    absl::StrAppend(&described, described.empty() ? "" : ", ",
                    sequence >= 0 ? absl::StrCat("#", sequence, " ") : "",
                    "on ", e.what.scope_name, ": ", e.what.canonical);
  }
  if (unfinished == 0) return "no operation outstanding";
  if (unfinished > most) {
    absl::StrAppend(&described, " and ", unfinished - most, " more");
  }
  return described;
}

void OperationLedger::FailAll(const absl::Status& cause) {
  absl::MutexLock lock(&mu_);
  if (failed_.ok()) failed_ = cause;
  for (const Entry& e : entries_) {
    if (std::shared_ptr<Operation> op = e.op.lock()) {
      op->FailIfRunning(failed_);
    }
  }
}

absl::Status OperationLedger::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void OperationLedger::Prune() {
  absl::MutexLock lock(&mu_);
  PruneLocked();
}

void OperationLedger::PruneLocked() {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [](const Entry& e) {
                                  std::shared_ptr<Operation> op = e.op.lock();
                                  return op == nullptr || op->Done();
                                }),
                 entries_.end());
}

size_t OperationLedger::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace rankd::dataplane
