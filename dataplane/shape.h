// Shape arithmetic of the operations that partition a value along an axis
// (the gathers and all_to_all), shared by both backends so that they accept
// and refuse the same shapes and counts with the same words
// (docs/dataplane.md, "Validation"). Depends on dataplane/value_descriptor.h
// and absl.
#ifndef RANKD_DATAPLANE_SHAPE_H_
#define RANKD_DATAPLANE_SHAPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane {

// A value seen around one axis: `outer` blocks (the product of the dims
// before the axis), each of `extent` indices of `unit_bytes` bytes (the
// dims after the axis times the dtype size). A scalar is [1] along axis 0.
struct AxisLayout {
  size_t outer = 1;
  size_t extent = 1;
  size_t unit_bytes = 0;
};

// The layout of `descriptor` along `axis`. InvalidArgument
// "<backend> backend: <operation>: axis A is out of range for D" when the
// value has no such axis (a scalar has only axis 0).
absl::StatusOr<AxisLayout> LayoutAlong(const ValueDescriptor& descriptor,
                                       size_t axis, absl::string_view backend,
                                       absl::string_view operation);

// `descriptor` with the dim of `axis` replaced by `extent`; a scalar (axis
// 0) becomes [extent]. Zero is allowed only on axis 0 (a member, or a
// result, with no rows). InvalidArgument naming `backend` and `operation`
// for another axis, a zero inner extent, or a result ValueDescriptor
// refuses (too large).
absl::StatusOr<ValueDescriptor> WithExtent(const ValueDescriptor& descriptor,
                                           size_t axis, size_t extent,
                                           absl::string_view backend,
                                           absl::string_view operation);

// A variable all-to-all along an axis, seen from one member: where each
// member's indices start in the input and in the output, and the output.
struct AllToAllLayout {
  AxisLayout input;                     // the input along the axis
  std::vector<size_t> send_offsets;     // one per member, then the total
  std::vector<size_t> receive_offsets;  // one per member, then the total
  ValueDescriptor output;
};

// The layout of an all-to-all of `input` along `axis` on member `me` of
// `members`, sending send_counts[m] indices to member m and receiving
// receive_counts[m] from it. InvalidArgument
// "<backend> backend: <operation>: ..." when the counts do not have one
// entry per member, the input is a scalar, the axis is out of range, the
// counts overflow when added up, the send counts do not add up to the
// input's extent along the axis, this member's own send and receive counts
// differ (the self slot), or the output would be invalid (WithExtent).
// What members must agree on between them (member s's send_counts[d] is
// member d's receive_counts[s]) no single member can check.
absl::StatusOr<AllToAllLayout> LayoutAllToAll(
    const ValueDescriptor& input, size_t axis,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, size_t members, size_t me,
    absl::string_view backend, absl::string_view operation);

// An uneven all_gather along an axis, seen from one member: where each
// member's indices start in the output, and the output.
struct UnevenGatherLayout {
  AxisLayout input;             // the input along the axis (a scalar as [1])
  std::vector<size_t> offsets;  // one per member, then the total
  ValueDescriptor output;
};

// The layout of an all_gather of `input` along `axis` in which member m
// contributes counts[m] indices, on member `me` of `members`.
// InvalidArgument "<backend> backend: <operation>: ..." when the counts do
// not have one entry per member, the axis is out of range, this member's
// count is not its input's extent along the axis, the counts overflow when
// added up, or the output would be invalid (WithExtent). That the members
// pass the same counts no single member can check.
absl::StatusOr<UnevenGatherLayout> LayoutUnevenGather(
    const ValueDescriptor& input, size_t axis, absl::Span<const size_t> counts,
    size_t members, size_t me, absl::string_view backend,
    absl::string_view operation);

// An even all_gather along an axis: the input's layout along it and the
// output.
struct EvenGatherLayout {
  AxisLayout input;
  ValueDescriptor output;
};

// The layout of an even all_gather of `input` along `axis` over `members`
// members: the output is the input with `members` x its extent along the
// axis (a scalar gathers as [members]). InvalidArgument "<backend> backend:
// <operation>: ..." when the axis is out of range (LayoutAlong), the
// gathered extent overflows, or the output would be invalid (WithExtent).
// Both backends' even all_gather check their arguments here.
absl::StatusOr<EvenGatherLayout> LayoutEvenGather(const ValueDescriptor& input,
                                                  size_t axis, size_t members,
                                                  absl::string_view backend,
                                                  absl::string_view operation);

// The output descriptor of an all_gather over `members` members of
// `input`: [members * n, ...] for a [n, ...] input, and [members] for a
// scalar. Returns no error: the caller must know the result fits a
// ValueDescriptor (no overflow), which this function does not check.
ValueDescriptor AllGatherOutput(const ValueDescriptor& input, uint32_t members);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SHAPE_H_
