// Cross-rank agreement checks run by the Gloo executor before moving data:
// every member contributes a fingerprint of what it is about to do (the
// operation, dtype, shape, axis, root, counts) through one small allgather,
// so every member sees the same fingerprints and decides the same way. On a
// disagreement every member fails with InvalidArgument before any payload
// moves, the members stay in step and the session stays usable (a
// TaskResult::Agreed failure). A transport failure during the check is a
// native failure. Internal to the Gloo backend; executor thread only.
// Depends on gloo_group.h, gloo_executor.h (TaskResult), native_ops.h, absl.
#ifndef RANKD_DATAPLANE_GLOO_AGREEMENT_CHECK_H_
#define RANKD_DATAPLANE_GLOO_AGREEMENT_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "dataplane/gloo/gloo_executor.h"
#include "dataplane/gloo/gloo_group.h"
#include "dataplane/gloo/native_ops.h"

namespace rankd::dataplane::gloo_internal {

// FNV-1a, 64 bits: stable across processes (unlike absl::Hash).
uint64_t Fingerprint(absl::string_view canonical);

// Every member of `group` must pass the same `canonical` description.
TaskResult VerifyAgreement(GlooGroup& group, const std::string& operation,
                           const std::string& canonical, Milliseconds timeout);

// all_to_all_v: besides `canonical` (dtype, row shape, axis), member s's
// send[d] must equal member d's receive[s] for every pair; a mismatch names
// both members (and world ranks) identically on every member.
TaskResult VerifyAllToAllCounts(GlooGroup& group, const std::string& operation,
                                const std::string& canonical,
                                const std::vector<size_t>& send,
                                const std::vector<size_t>& receive,
                                Milliseconds timeout);

}  // namespace rankd::dataplane::gloo_internal

#endif  // RANKD_DATAPLANE_GLOO_AGREEMENT_CHECK_H_
