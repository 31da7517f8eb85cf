// The engine's rule for caller-owned outputs (the *Into operations,
// docs/dataplane.md, "Caller-owned outputs"), one copy for every backend:
// the output must have exactly the result's descriptor, and may share the
// input's bytes only when the operation runs in place, and then only all of
// them. A backend says how its output lies against the input
// (OutputOverlap); the words are the engine's. Pure function; depends on
// dataplane/value_descriptor.h and absl.
#ifndef RANKD_DATAPLANE_CALLER_OUTPUT_H_
#define RANKD_DATAPLANE_CALLER_OUTPUT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane {

// How a caller-owned output lies against the operation's input.
enum class OutputOverlap {
  kNone,       // no byte in common (or either is empty)
  kSameBytes,  // exactly the input's bytes: the output is the input
  kPartial,    // some bytes in common, but not exactly the same range
};

// OK when `output` may receive a result of descriptor `result` computed
// from an input it overlaps as `overlap`; `runs_in_place` says whether the
// operation can compute in place (all_reduce_sum, broadcast). Otherwise
// InvalidArgument, nothing submitted:
//   "<backend> backend: <operation>: the output is D but the result is R"
//   "<backend> backend: <operation>: the output overlaps the input, and
//    <operation> cannot run in place"
//   "<backend> backend: <operation>: the output overlaps the input, and
//    <operation> runs in place only on exactly the input's bytes".
absl::Status CheckCallerOutput(absl::string_view backend,
                               absl::string_view operation,
                               const ValueDescriptor& output,
                               const ValueDescriptor& result,
                               OutputOverlap overlap, bool runs_in_place);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_CALLER_OUTPUT_H_
