// The canonical description of an operation: the text that members which
// submit the same work give alike, which the agreement checks fingerprint
// (OperationFingerprint, mismatch_diagnosis.h) and the mismatch diagnosis
// quotes ("rank 3 submitted `all_reduce_sum f32[3]`"). Both backends
// describe their operations with these functions, so the same scheduler bug
// reads the same on Gloo and on NCCL, and what members must agree on is
// decided once (docs/dataplane.md, "Validation"). `kind` is the backend
// operation ("all_reduce_sum", "all_gather_even", "variable_all_to_all").
// Depends on value_descriptor.h and absl.
#ifndef RANKD_DATAPLANE_OPERATION_DESCRIPTION_H_
#define RANKD_DATAPLANE_OPERATION_DESCRIPTION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane {

// Work on one value whose descriptor every member shares
// ("all_reduce_sum f32[4]").
std::string DescribeOnValue(absl::string_view kind,
                            const ValueDescriptor& value);

// DescribeOnValue(kind, value), remembered per thread: the description
// this thread made last, when `kind` and `value` equal the last call's,
// else a new one. A serving loop submits the same work over and over, and
// a description is a format of the kind and every dimension (about a
// microsecond on the benchmark machine): this makes it two comparisons.
// Shared and immutable: keeping it (in an operation's queued work) costs a
// reference count, not a copy. Never null.
std::shared_ptr<const std::string> DescribeOnValueRemembered(
    absl::string_view kind, const ValueDescriptor& value);

// Work on one value shared by every member, with a root member index
// ("broadcast root=1 f32[4]").
std::string DescribeRooted(absl::string_view kind, uint32_t root,
                           const ValueDescriptor& value);

// Work whose members' values differ along `axis` by design; they agree on
// the axis, the rest of the shape and, where every member knows them, the
// per-member `counts` ("all_gather_uneven axis=0 counts=[1,2] f32[*, 4]";
// without counts: "variable_all_to_all axis=0 f32[*, 4]"). A scalar is
// described as [1], as it is gathered.
std::string DescribeAlongAxis(absl::string_view kind, size_t axis,
                              const ValueDescriptor& value,
                              absl::Span<const size_t> counts = {});

// Values that travel between two members, in the order both ends list them
// ("bundle(f32[2], i32[3])"); a single send or receive is a bundle of one,
// so either form pairs with the other.
std::string DescribeBundle(absl::Span<const ValueDescriptor> values);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_OPERATION_DESCRIPTION_H_
