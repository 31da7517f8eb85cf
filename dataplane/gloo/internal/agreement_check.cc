#include "dataplane/gloo/internal/agreement_check.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "dataplane/agreement.h"

namespace rankd::dataplane::gloo::internal {
namespace {

// Groups up to this size pad every check's record to all_to_all_v's
// (1 + 2n words: at most 1,032 bytes a member); larger ones gather the
// fingerprints alone and all_to_all_v's counts in a second gather, rather
// than n * (1 + 2n) words before every collective.
constexpr size_t kMaxPaddedMembers = 64;

// Gathers `words` (the same count on every member) from every member under
// the tag of `check` at the group's next sequence number.
absl::Status GatherWords(GlooGroup& group, const std::string& operation,
                         const std::vector<uint64_t>& words,
                         std::vector<uint64_t>* all, Milliseconds timeout,
                         absl::string_view check) {
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

// Every member's record of one check, gathered under the one tag every
// check of every operation uses (so that it pairs whatever the members are
// about to do): its fingerprint, then n send and n receive counts
// (all_to_all_v's; zeros for any other operation) where `words` leaves
// room for them. Every record of a group has one length: a longer message
// than a peer posted for ends the process on Gloo's I/O thread (an
// all_reduce_sum's check paired with an all_to_all_v's did). That length
// is RecordWords(n) where every operation checks (all_to_all_v's
// 1 + 2n in a group of at most kMaxPaddedMembers, else the fingerprint
// alone); where only all_to_all_v checks, always 1 + 2n. `all` gets
// member m's record at m * words.
size_t RecordWords(size_t n) { return n <= kMaxPaddedMembers ? 1 + 2 * n : 1; }
absl::Status GatherRecords(GlooGroup& group, const std::string& operation,
                           size_t words, uint64_t fingerprint,
                           const std::vector<size_t>& send,
                           const std::vector<size_t>& receive,
                           std::vector<uint64_t>* all, Milliseconds timeout) {
  const size_t n = group.size();
  std::vector<uint64_t> record(words, 0);
  record[0] = fingerprint;
  if (words == 1 + 2 * n) {
    for (size_t p = 0; p < n; ++p) {
      if (p < send.size()) record[1 + p] = send[p];
      if (p < receive.size()) record[1 + n + p] = receive[p];
    }
  }
  return GatherWords(group, operation, record, all, timeout, "agreement check");
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
  const size_t n = group.size();
  absl::Status s =
      GatherRecords(group, operation, RecordWords(n),
                    OperationFingerprint(canonical), {}, {}, &all, timeout);
  if (!s.ok()) return TaskResult::Native(s);
  std::vector<uint64_t> fingerprints(n);
  for (size_t m = 0; m < n; ++m) fingerprints[m] = all[m * RecordWords(n)];
  return FromVerdict(CollectiveVerdict(
      Where(operation), canonical, group.members(), group.local_rank(),
      fingerprints, VerdictPoint::kBeforePayload));
}

TaskResult VerifyAllToAllCounts(GlooGroup& group, const std::string& operation,
                                const std::string& canonical,
                                const std::vector<size_t>& send,
                                const std::vector<size_t>& receive,
                                Milliseconds timeout,
                                bool every_operation_checks) {
  const size_t n = group.size();
  std::vector<uint64_t> fingerprints(n), sends(n * n), receives(n * n);
  std::vector<uint64_t> all;
  // Member m's counts in `all`: n sends from `first`, then n receives.
  size_t stride = 0, first = 0;
  if (RecordWords(n) > 1 || !every_operation_checks) {
    // One gather: fingerprints and counts in the records.
    stride = 1 + 2 * n;
    absl::Status s =
        GatherRecords(group, operation, stride, OperationFingerprint(canonical),
                      send, receive, &all, timeout);
    if (!s.ok()) return TaskResult::Native(s);
    first = 1;
    for (size_t m = 0; m < n; ++m) fingerprints[m] = all[m * stride];
    absl::Status verdict = CollectiveVerdict(
        Where(operation), canonical, group.members(), group.local_rank(),
        fingerprints, VerdictPoint::kBeforePayload);
    if (!verdict.ok()) return FromVerdict(std::move(verdict));
  } else {
    // The fingerprints as every check gathers them; once they agree,
    // every member is here, and the counts go under a tag of their own.
    TaskResult agreed = VerifyAgreement(group, operation, canonical, timeout);
    if (!agreed.status.ok()) return agreed;
    std::vector<uint64_t> words;
    words.reserve(2 * n);
    for (size_t c : send) words.push_back(c);
    for (size_t c : receive) words.push_back(c);
    absl::Status s = GatherWords(group, operation, words, &all, timeout,
                                 "all_to_all_v counts check");
    if (!s.ok()) return TaskResult::Native(s);
    stride = 2 * n;
  }
  for (size_t m = 0; m < n; ++m) {
    for (size_t p = 0; p < n; ++p) {
      sends[m * n + p] = all[m * stride + first + p];
      receives[m * n + p] = all[m * stride + first + n + p];
    }
  }
  return FromVerdict(CountMatrixVerdict(Where(operation), group.members(),
                                        sends, receives,
                                        VerdictPoint::kBeforePayload));
}

}  // namespace rankd::dataplane::gloo::internal
