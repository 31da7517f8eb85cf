// How the Gloo backend keeps members that submit different operations from
// exchanging data of the wrong layout.
//
// Always: every operation's Gloo tag (collectives) or slot (point-to-point)
// mixes its sequence number with a fingerprint of what it is (operation,
// dtype, shape, axis, root, agreed counts): OperationTag. Gloo pairs
// messages by slot, so members that disagree never pair; they wait until
// op_timeout, and dataplane/mismatch_diagnosis.h then names who submitted what.
// This costs nothing per operation.
//
// On request (GlooSessionOptions::verify_agreement) and always for the count
// matrix of variable_all_to_all (which no single member knows, so no tag can
// carry it): an explicit check before moving data. Every member contributes its
// fingerprint (and counts) through one small allgather, so every member
// sees the same fingerprints and decides the same way. On a disagreement
// every member fails with InvalidArgument before any payload moves, the
// members stay in step and the session stays usable (a TaskResult::Agreed
// failure). A transport failure during the check is a native failure.
// A member that refused the operation on its own arguments takes part with
// kRefusedCanonical (dataplane/agreement.h), and the others' check
// fails naming it as such.
// Internal to the Gloo backend; executor thread only.
// Depends on gloo_group.h, gloo_executor.h (TaskResult), native_ops.h, absl.
#ifndef RANKD_DATAPLANE_GLOO_AGREEMENT_CHECK_H_
#define RANKD_DATAPLANE_GLOO_AGREEMENT_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "dataplane/gloo/gloo_executor.h"
#include "dataplane/gloo/gloo_group.h"
#include "dataplane/gloo/internal/native_ops.h"

namespace rankd::dataplane::gloo::internal {

// The Gloo tag of the operation numbered `sequence` (on its group or route)
// whose canonical description has `fingerprint`. For a fixed fingerprint it
// is a bijection of the sequence number, so consecutive operations never
// share a tag; operations with different fingerprints at the same sequence
// number get different tags unless their fingerprints collide in 32 bits.
uint32_t OperationTag(uint32_t sequence, uint64_t fingerprint);

// Every member of `group` must pass the same `canonical` description. In a
// group of at most 64 members its record is padded to all_to_all_v's
// (1 + 2n words).
TaskResult VerifyAgreement(GlooGroup& group, const std::string& operation,
                           const std::string& canonical, Milliseconds timeout);

// A transfer numbered `sequence` on route `source` -> `destination`
// (member indices; this member is one of them): each end sends the other
// the fingerprint of its `canonical` and both compare.
TaskResult ExchangeRouteFingerprints(GlooGroup& group,
                                     const std::string& operation,
                                     uint32_t sequence, uint32_t source,
                                     uint32_t destination,
                                     const std::string& canonical,
                                     Milliseconds timeout);

// all_to_all_v: besides `canonical` (dtype, row shape, axis), member s's
// send[d] must equal member d's receive[s] for every pair; a mismatch names
// both members (and world ranks) identically on every member. One gather
// of 1 + 2n words a member, the length every check of a group of at most
// 64 members pads its record to; in a larger group where
// `every_operation_checks` (verify_agreement: other operations' checks
// gather the fingerprint alone), the fingerprints first and, once they
// agree, the counts under a tag of their own. Either way it pairs with
// any other operation's check.
TaskResult VerifyAllToAllCounts(GlooGroup& group, const std::string& operation,
                                const std::string& canonical,
                                const std::vector<size_t>& send,
                                const std::vector<size_t>& receive,
                                Milliseconds timeout,
                                bool every_operation_checks);

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_AGREEMENT_CHECK_H_
