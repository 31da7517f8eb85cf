// The engine's agreement policy: what the members of an operation compare
// to make sure they submitted the same work, what a disagreement or a
// refusal says, and when a refusing member must tell its peers. One copy
// for every backend (docs/dataplane.md, "Agreement"): a backend only moves
// the records (Gloo through a small allgather or exchange, NCCL inside the
// payload's NCCL group) and hands them to the verdicts below, so that both
// backends refuse the same disagreements with the same words.
//
// A record is a 64-bit fingerprint of the operation's canonical
// description (OperationFingerprint); all_to_all_v also records every
// member's send and receive counts, since no single member knows the whole
// count matrix. Pure functions and constants; thread-safe. Depends on
// common/rank_list.h and absl.
#ifndef RANKD_DATAPLANE_AGREEMENT_H_
#define RANKD_DATAPLANE_AGREEMENT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rankd::dataplane {

// A stable 64-bit digest (FNV-1a) of an operation's canonical description,
// the same in every process (unlike absl::Hash): what members compare to
// find out whether they submitted the same work.
uint64_t OperationFingerprint(absl::string_view canonical);

// What a member that refused an operation on its own arguments (another
// shape, an output of the wrong size, a tensor elsewhere: validation can
// differ between members) "submitted", when its peers check agreement
// before the payload and so wait for its record: it sends the fingerprint
// of this text, and the peers refuse the operation too, naming it, instead
// of waiting for op_timeout. No operation's canonical description looks
// like it.
inline constexpr char kRefusedCanonical[] = "(refused by this member)";
// Whether `fingerprint` is kRefusedCanonical's.
bool IsRefusal(uint64_t fingerprint);
// What a peer's error says about such members.
inline constexpr char kRefusedOnItsOwnArguments[] =
    " on its own arguments (its error says why)";

// When a verdict is given: before any of the payload was queued (the
// records travelled alone; nothing moved and the session stays usable), or
// after the payload ran alongside the records (the output is not valid).
// It is the last clause of every disagreement message.
enum class VerdictPoint { kBeforePayload, kAfterPayload };

// A collective's records: every member's fingerprint in member order.
// `members` are the world ranks in member order; this member is index `me`
// and submitted `canonical`. OK when every fingerprint equals this
// member's; otherwise InvalidArgument
//   "<where>: rank R refused it on its own arguments (...)[; ranks ...
//    submitted another operation]; <point>"
// when any member refused, or
//   "<where>: members disagree on the operation, dtype or shape: ranks ...
//    submitted `<canonical>`; ranks ... submitted another one; <point>".
// Every member that gathered the same records words it the same way, up to
// its own `canonical`.
absl::Status CollectiveVerdict(absl::string_view where,
                               absl::string_view canonical,
                               absl::Span<const uint32_t> members, size_t me,
                               absl::Span<const uint64_t> fingerprints,
                               VerdictPoint point);

// all_to_all_v's count matrix, once the fingerprints agreed: sends[s * n +
// d] is what member s sends member d, receives[d * n + s] what member d
// expects from member s (n = members.size()). OK when they match
// everywhere; otherwise InvalidArgument naming the first pair (source-major),
// identically on every member:
//   "<where>: members disagree on the counts: member S (rank R) sends X rows
//    to member D (rank Q), which expects Y from it; <point>".
absl::Status CountMatrixVerdict(absl::string_view where,
                                absl::Span<const uint32_t> members,
                                absl::Span<const uint64_t> sends,
                                absl::Span<const uint64_t> receives,
                                VerdictPoint point);

// One point-to-point transfer as this member sees it, with both ends'
// fingerprints.
struct TransferRecord {
  size_t peer = 0;         // member index of the other end
  uint32_t peer_rank = 0;  // its world rank
  bool send = false;       // this member is the source
  std::string canonical;   // what this end submitted
  uint64_t mine = 0;       // this end's fingerprint
  uint64_t theirs = 0;     // the other end's
};

// The transfers of a send/receive (one) or a batch (several). OK when both
// ends of every transfer agree; otherwise InvalidArgument
//   "<where>: the ends disagree: the send to member P (rank R): this end
//    has `<canonical>`, the other end <refused it on its own arguments
//    (...) | submitted another transfer>; ...; <point>".
// When `disagreeing` is set it gets one flag per transfer: true where the
// ends differ (a batch still moves the others).
absl::Status TransfersVerdict(absl::string_view where,
                              absl::Span<const TransferRecord> transfers,
                              VerdictPoint point,
                              std::vector<bool>* disagreeing = nullptr);

// Whether a member that refuses an operation on its own arguments must send
// its peers a refusal record: they check agreement before the payload (the
// session's verify_agreement, or an operation that always checks first:
// all_to_all_v's counts, uneven all_gather), so without one they would
// wait for its record until op_timeout. Never in a one-member scope.
bool PeersAwaitRecord(size_t members, bool verify_agreement, bool checks_first);

// What a refusal says once its refusal record was handed to the peers of
// `scope` (a group, or with `route` a route): with `told` OK, " (the other
// members of <scope> are told and refuse it too)" appended (" (the other end
// of <scope> is told and refuses it too)" for a route); when handing it
// over failed, "; telling the other members of <scope> failed: <told>".
// Keeps `refusal`'s code.
absl::Status RefusalAfterTelling(const absl::Status& refusal,
                                 absl::string_view scope, bool route,
                                 const absl::Status& told);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_AGREEMENT_H_
