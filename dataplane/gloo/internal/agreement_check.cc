#include "dataplane/gloo/internal/agreement_check.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/mismatch_diagnosis.h"

namespace rankd::dataplane::gloo::internal {
namespace {

// Gathers `words` (the same count on every member) from every member.
absl::Status GatherWords(GlooGroup& group, const std::string& operation,
                         const std::vector<uint64_t>& words,
                         std::vector<uint64_t>* all, Milliseconds timeout) {
  const size_t n = group.size();
  all->assign(n * words.size(), 0);
  std::vector<size_t> bytes(n, words.size() * sizeof(uint64_t));
  // The check itself must pair whatever the members are about to do.
  const uint32_t tag = OperationTag(group.NextSequence(),
                                    OperationFingerprint("agreement check"));
  return CatchNative(absl::StrCat("gloo ", operation, " (agreement check)"),
                     [&] {
                       NativeAllGatherV(group.context(), words.data(),
                                        all->data(), bytes, tag, timeout);
                     });
}

std::string Ranks(const std::vector<uint32_t>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "));
}

// The members in `refused` refused the operation on their own arguments;
// those in `different` submitted another one.
TaskResult Refused(const std::string& operation,
                   const std::vector<uint32_t>& refused,
                   const std::vector<uint32_t>& different = {}) {
  return TaskResult::Agreed(absl::InvalidArgumentError(absl::StrCat(
      "gloo ", operation, ": ", Ranks(refused), " refused it",
      kRefusedOnItsOwnArguments,
      different.empty()
          ? ""
          : absl::StrCat("; ", Ranks(different), " submitted something else"),
      "; nothing moved")));
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
  if (mine == theirs) return TaskResult::Ok();
  if (IsRefusal(theirs)) {
    return Refused(operation, {group.members()[peer]});
  }
  return TaskResult::Agreed(absl::InvalidArgumentError(absl::StrCat(
      "gloo ", operation, ": the two ends disagree on the bundle: this end (",
      is_source ? "source" : "destination", ") has ", canonical,
      ", the other end something else")));
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
  const uint64_t mine = all[group.local_rank()];
  std::vector<uint32_t> same, different, refused;
  for (uint32_t m = 0; m < group.size(); ++m) {
    if (all[m] == mine) {
      same.push_back(group.members()[m]);
    } else if (IsRefusal(all[m])) {
      refused.push_back(group.members()[m]);
    } else {
      different.push_back(group.members()[m]);
    }
  }
  if (!refused.empty()) return Refused(operation, refused, different);
  if (different.empty()) return TaskResult::Ok();
  return TaskResult::Agreed(absl::InvalidArgumentError(absl::StrCat(
      "gloo ", operation,
      ": members disagree on the operation, dtype or shape: ranks ",
      absl::StrJoin(same, ", "), " submitted `", canonical, "` but ranks ",
      absl::StrJoin(different, ", "), " submitted something else")));
}

TaskResult VerifyAllToAllCounts(GlooGroup& group, const std::string& operation,
                                const std::string& canonical,
                                const std::vector<size_t>& send,
                                const std::vector<size_t>& receive,
                                Milliseconds timeout) {
  const size_t n = group.size();
  std::vector<uint64_t> words;
  words.reserve(1 + 2 * n);
  words.push_back(OperationFingerprint(canonical));
  for (size_t c : send) words.push_back(c);
  for (size_t c : receive) words.push_back(c);
  std::vector<uint64_t> all;
  absl::Status s = GatherWords(group, operation, words, &all, timeout);
  if (!s.ok()) return TaskResult::Native(s);
  const size_t stride = 1 + 2 * n;
  auto fingerprint = [&](size_t m) { return all[m * stride]; };
  auto sends = [&](size_t s_, size_t d) { return all[s_ * stride + 1 + d]; };
  auto receives = [&](size_t d, size_t s_) {
    return all[d * stride + 1 + n + s_];
  };
  std::vector<uint32_t> refused;
  for (size_t m = 0; m < n; ++m) {
    if (IsRefusal(fingerprint(m))) refused.push_back(group.members()[m]);
  }
  if (!refused.empty()) return Refused(operation, refused);
  for (size_t m = 1; m < n; ++m) {
    if (fingerprint(m) != fingerprint(0)) {
      return TaskResult::Agreed(absl::InvalidArgumentError(
          absl::StrCat("gloo ", operation,
                       ": members disagree on the dtype, row shape or "
                       "axis: rank ",
                       group.rank(), " submitted `", canonical, "`; ranks ",
                       group.members()[0], " and ", group.members()[m],
                       " submitted different ones")));
    }
  }
  for (size_t src = 0; src < n; ++src) {
    for (size_t dst = 0; dst < n; ++dst) {
      if (sends(src, dst) != receives(dst, src)) {
        return TaskResult::Agreed(absl::InvalidArgumentError(absl::StrCat(
            "gloo ", operation, ": member ", src, " (rank ",
            group.members()[src], ") sends ", sends(src, dst),
            " rows to member ", dst, " (rank ", group.members()[dst],
            "), which expects ", receives(dst, src), " from it")));
      }
    }
  }
  return TaskResult::Ok();
}

}  // namespace rankd::dataplane::gloo::internal
