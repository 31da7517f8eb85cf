#include "dataplane/gloo/internal/agreement_check.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "dataplane/agreement.h"

namespace rankd::dataplane::gloo::internal {
namespace {

// Every member's record of one check: its fingerprint, then n send and n
// receive counts (all_to_all_v's; zeros for any other operation). Every
// check of every operation gathers under one tag, so that it pairs
// whatever the members are about to do; so every record in a group has
// this one length: a longer message than a peer posted for ends the
// process on Gloo's I/O thread (an all_reduce_sum's check paired with an
// all_to_all_v's did). `all` gets member m's record at m * (1 + 2n).
absl::Status GatherRecords(GlooGroup& group, const std::string& operation,
                           uint64_t fingerprint,
                           const std::vector<size_t>& send,
                           const std::vector<size_t>& receive,
                           std::vector<uint64_t>* all, Milliseconds timeout) {
  const size_t n = group.size();
  std::vector<uint64_t> words(1 + 2 * n, 0);
  words[0] = fingerprint;
  for (size_t p = 0; p < send.size() && p < n; ++p) words[1 + p] = send[p];
  for (size_t p = 0; p < receive.size() && p < n; ++p) {
    words[1 + n + p] = receive[p];
  }
  all->assign(n * words.size(), 0);
  std::vector<size_t> bytes(n, words.size() * sizeof(uint64_t));
  const uint32_t tag = OperationTag(group.NextSequence(),
                                    OperationFingerprint("agreement check"));
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
  absl::Status s = GatherRecords(
      group, operation, OperationFingerprint(canonical), {}, {}, &all, timeout);
  if (!s.ok()) return TaskResult::Native(s);
  const size_t n = group.size();
  std::vector<uint64_t> fingerprints(n);
  for (size_t m = 0; m < n; ++m) fingerprints[m] = all[m * (1 + 2 * n)];
  return FromVerdict(CollectiveVerdict(
      Where(operation), canonical, group.members(), group.local_rank(),
      fingerprints, VerdictPoint::kBeforePayload));
}

TaskResult VerifyAllToAllCounts(GlooGroup& group, const std::string& operation,
                                const std::string& canonical,
                                const std::vector<size_t>& send,
                                const std::vector<size_t>& receive,
                                Milliseconds timeout) {
  std::vector<uint64_t> all;
  absl::Status s =
      GatherRecords(group, operation, OperationFingerprint(canonical), send,
                    receive, &all, timeout);
  if (!s.ok()) return TaskResult::Native(s);
  // Member m's record: its fingerprint, n send counts, n receive counts.
  const size_t n = group.size();
  const size_t stride = 1 + 2 * n;
  std::vector<uint64_t> fingerprints(n), sends(n * n), receives(n * n);
  for (size_t m = 0; m < n; ++m) {
    fingerprints[m] = all[m * stride];
    for (size_t p = 0; p < n; ++p) {
      sends[m * n + p] = all[m * stride + 1 + p];
      receives[m * n + p] = all[m * stride + 1 + n + p];
    }
  }
  absl::Status verdict = CollectiveVerdict(
      Where(operation), canonical, group.members(), group.local_rank(),
      fingerprints, VerdictPoint::kBeforePayload);
  if (verdict.ok()) {
    verdict = CountMatrixVerdict(Where(operation), group.members(), sends,
                                 receives, VerdictPoint::kBeforePayload);
  }
  return FromVerdict(std::move(verdict));
}

}  // namespace rankd::dataplane::gloo::internal
