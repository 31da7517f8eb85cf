#include "dataplane/agreement.h"

#include "absl/strings/str_cat.h"
#include "common/rank_list.h"

namespace rankd::dataplane {
namespace {

const char* Consequence(VerdictPoint point) {
  return point == VerdictPoint::kBeforePayload ? "; nothing moved"
                                               : "; the output is not valid";
}

}  // namespace

uint64_t OperationFingerprint(absl::string_view canonical) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : canonical) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool IsRefusal(uint64_t fingerprint) {
  static const uint64_t refused = OperationFingerprint(kRefusedCanonical);
  return fingerprint == refused;
}

absl::Status CollectiveVerdict(absl::string_view where,
                               absl::string_view canonical,
                               absl::Span<const uint32_t> members, size_t me,
                               absl::Span<const uint64_t> fingerprints,
                               VerdictPoint point) {
  if (fingerprints.size() != members.size() || me >= members.size()) {
    return absl::InternalError(absl::StrCat(
        where, ": malformed agreement records (", fingerprints.size(), " for ",
        members.size(), " members)"));
  }
  const uint64_t mine = fingerprints[me];
  std::vector<uint32_t> same, different, refused;
  for (size_t m = 0; m < members.size(); ++m) {
    if (fingerprints[m] == mine) {
      same.push_back(members[m]);
    } else if (IsRefusal(fingerprints[m])) {
      refused.push_back(members[m]);
    } else {
      different.push_back(members[m]);
    }
  }
  if (!refused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", NameRanks(refused), " refused it",
        kRefusedOnItsOwnArguments,
        different.empty() ? ""
                          : absl::StrCat("; ", NameRanks(different),
                                         " submitted another operation"),
        Consequence(point)));
  }
  if (different.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": members disagree on the operation, dtype or shape: ",
      NameRanks(same), " submitted `", canonical, "`; ", NameRanks(different),
      " submitted another one", Consequence(point)));
}

absl::Status CountMatrixVerdict(absl::string_view where,
                                absl::Span<const uint32_t> members,
                                absl::Span<const uint64_t> sends,
                                absl::Span<const uint64_t> receives,
                                VerdictPoint point) {
  const size_t n = members.size();
  if (sends.size() != n * n || receives.size() != n * n) {
    return absl::InternalError(
        absl::StrCat(where, ": malformed count records (", sends.size(),
                     " and ", receives.size(), " counts for ", n, " members)"));
  }
  for (size_t src = 0; src < n; ++src) {
    for (size_t dst = 0; dst < n; ++dst) {
      const uint64_t sent = sends[src * n + dst];
      const uint64_t expected = receives[dst * n + src];
      if (sent == expected) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": members disagree on the counts: member ", src, " (rank ",
          members[src], ") sends ", sent, " rows to member ", dst, " (rank ",
          members[dst], "), which expects ", expected, " from it",
          Consequence(point)));
    }
  }
  return absl::OkStatus();
}

absl::Status TransfersVerdict(absl::string_view where,
                              absl::Span<const TransferRecord> transfers,
                              VerdictPoint point,
                              std::vector<bool>* disagreeing) {
  if (disagreeing != nullptr) disagreeing->assign(transfers.size(), false);
  std::string disagreements;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const TransferRecord& t = transfers[i];
    if (t.mine == t.theirs) continue;
    if (disagreeing != nullptr) (*disagreeing)[i] = true;
    absl::StrAppend(&disagreements, disagreements.empty() ? "" : "; ",
                    t.send ? "the send to" : "the receive from", " member ",
                    t.peer, " (rank ", t.peer_rank, "): this end has `",
                    t.canonical, "`, the other end ",
                    IsRefusal(t.theirs)
                        ? absl::StrCat("refused it", kRefusedOnItsOwnArguments)
                        : "submitted another transfer");
  }
  if (disagreements.empty()) return absl::OkStatus();
  // In a batch the transfers whose ends agree still move.
  const char* consequence =
      transfers.size() == 1 ? Consequence(point)
      : point == VerdictPoint::kBeforePayload
          ? "; those transfers moved nothing"
          : "; the outputs of those transfers are not valid";
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": the ends disagree: ", disagreements, consequence));
}

bool PeersAwaitRecord(size_t members, bool verify_agreement,
                      bool checks_first) {
  return members > 1 && (verify_agreement || checks_first);
}

absl::Status RefusalAfterTelling(const absl::Status& refusal,
                                 absl::string_view scope, bool route,
                                 const absl::Status& told) {
  const std::string peers = absl::StrCat(
      route ? "the other end of " : "the other members of ", scope);
  if (!told.ok()) {
    return absl::Status(refusal.code(),
                        absl::StrCat(refusal.message(), "; telling ", peers,
                                     " failed: ", told.message()));
  }
  return absl::Status(refusal.code(),
                      absl::StrCat(refusal.message(), " (", peers,
                                   route ? " is told and refuses it too)"
                                         : " are told and refuse it too)"));
}

}  // namespace rankd::dataplane
