// Shape arithmetic of the operations that partition a value along an axis
// (the gathers and all_to_all), shared by both backends so that they accept
// and refuse the same shapes with the same words (docs/dataplane.md,
// "Validation"). Depends on dataplane/types.h and absl.
#ifndef RANKD_DATAPLANE_SHAPE_H_
#define RANKD_DATAPLANE_SHAPE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dataplane/types.h"

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

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SHAPE_H_
