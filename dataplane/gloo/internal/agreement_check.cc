#include "dataplane/gloo/internal/agreement_check.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "dataplane/agreement.h"

namespace rankd::dataplane::gloo::internal {
namespace {

// Gathers `words` (the same count on every member) from every member.
// Every check of every operation gathers under one tag, so it pairs
// whatever the members are about to do; each posts for the words it sends,
// so under that tag every member gathers one word (its fingerprint) only: a
// longer message than a peer posted for ends the process on Gloo's I/O
// thread. What is longer goes under a tag of its own (`check`), once the
// fingerprints agreed.
absl::Status GatherWords(GlooGroup& group, const std::string& operation,
                         const std::vector<uint64_t>& words,
                         std::vector<uint64_t>* all, Milliseconds timeout,
                         absl::string_view check = "agreement check") {
  const size_t n = group.size();
  all->assign(n * words.size(), 0);
  std::vector<size_t> bytes(n, words.size() * sizeof(uint64_t));
  const uint32_t tag =
      OperationTag(group.NextSequence(), OperationFingerprint(check));
  return CatchNative(absl::StrCat("gloo ", operation, " (agreement check)"),
                     [&] {
                       NativeAllGatherV(group.context(), words.data(),
                                        all->data(), bytes, tag, timeout);
                     });
}

// A verdict as the executor reports it: a disagreement fails the operation
// before any payload moved, leaving the session usable.
TaskResult FromVerdict(absl::Status verdict) {
  if (verdict.ok()) return TaskResult::Ok();
  return TaskResult::Agreed(std::move(verdict));
}

std::string Where(const std::string& operation) {
  return absl::StrCat("gloo ", operation);
}

}  // namespace

TaskResult ExchangeRouteFingerprints(GlooGroup& group,
                                     const std::string& operation,
                                     uint32_t sequence, uint32_t source,
                                     uint32_t destination,
                                     const std::string& canonical,
                                     Milliseconds timeout) {
  const bool is_source = group.local_rank() == source;
  const bool ascending = source < destination;
  const int peer = static_cast<int>(is_source ? destination : source);
  // The check's slots must pair whatever the bundles are.
  const uint32_t check_tag =
      OperationTag(sequence, OperationFingerprint("agreement check"));
  const uint64_t mine = OperationFingerprint(canonical);
  uint64_t theirs = 0;
  absl::Status s =
      CatchNative(absl::StrCat("gloo ", operation, " (agreement check)"), [&] {
        NativeExchange(group.context(), peer,
                       RouteSlot(ascending, check_tag, is_source ? 0 : 1),
                       &mine, sizeof(mine),
                       RouteSlot(ascending, check_tag, is_source ? 1 : 0),
                       &theirs, sizeof(theirs), timeout);
      });
  if (!s.ok()) return TaskResult::Native(s);
  const TransferRecord record{static_cast<size_t>(peer),
                              group.members()[peer],
                              is_source,
                              canonical,
                              mine,
                              theirs};
  return FromVerdict(TransfersVerdict(Where(operation), {record},
                                      VerdictPoint::kBeforePayload));
}

uint32_t OperationTag(uint32_t sequence, uint64_t fingerprint) {
  // An odd multiplier makes sequence -> tag a bijection modulo 2^32; the
  // folded fingerprint shifts the whole sequence space per operation kind.
  const uint32_t folded =
      static_cast<uint32_t>(fingerprint ^ (fingerprint >> 32));
  return sequence * 0x9e3779b1u + folded;
}

TaskResult VerifyAgreement(GlooGroup& group, const std::string& operation,
                           const std::string& canonical, Milliseconds timeout) {
  std::vector<uint64_t> all;
  absl::Status s = GatherWords(
      group, operation, {OperationFingerprint(canonical)}, &all, timeout);
  if (!s.ok()) return TaskResult::Native(s);
  return FromVerdict(CollectiveVerdict(Where(operation), canonical,
                                       group.members(), group.local_rank(), all,
                                       VerdictPoint::kBeforePayload));
}

TaskResult VerifyAllToAllCounts(GlooGroup& group, const std::string& operation,
                                const std::string& canonical,
                                const std::vector<size_t>& send,
                                const std::vector<size_t>& receive,
                                Milliseconds timeout) {
  // First the fingerprints, as every check: a member at another operation
  // (or refusing this one) pairs with it and is told.
  TaskResult agreed = VerifyAgreement(group, operation, canonical, timeout);
  if (!agreed.status.ok()) return agreed;
  // Every member is at this all_to_all_v now: n send and n receive counts
  // each, the same length on all.
  const size_t n = group.size();
  std::vector<uint64_t> words;
  words.reserve(2 * n);
  for (size_t c : send) words.push_back(c);
  for (size_t c : receive) words.push_back(c);
  std::vector<uint64_t> all;
  absl::Status s = GatherWords(group, operation, words, &all, timeout,
                               "all_to_all_v counts check");
  if (!s.ok()) return TaskResult::Native(s);
  // Member m's record: n send counts, then n receive counts.
  std::vector<uint64_t> sends(n * n), receives(n * n);
  for (size_t m = 0; m < n; ++m) {
    for (size_t p = 0; p < n; ++p) {
      sends[m * n + p] = all[m * 2 * n + p];
      receives[m * n + p] = all[m * 2 * n + n + p];
    }
  }
  return FromVerdict(CountMatrixVerdict(Where(operation), group.members(),
                                        sends, receives,
                                        VerdictPoint::kBeforePayload));
}

}  // namespace rankd::dataplane::gloo::internal
