#include "dataplane/shape.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {
namespace {

absl::Status NoSuchAxis(const ValueDescriptor& descriptor, size_t axis,
                        absl::string_view backend,
                        absl::string_view operation) {
  return absl::InvalidArgumentError(absl::StrCat(
      backend, " backend: ", operation, ": axis ", axis,
      " is out of range for ", descriptor.shape().empty() ? "the scalar " : "",
      descriptor.ToString()));
}

}  // namespace

absl::StatusOr<AxisLayout> LayoutAlong(const ValueDescriptor& descriptor,
                                       size_t axis, absl::string_view backend,
                                       absl::string_view operation) {
  const std::vector<size_t>& shape = descriptor.shape();
  AxisLayout layout;
  layout.unit_bytes = DtypeSize(descriptor.dtype());
  if (shape.empty()) {
    if (axis != 0) return NoSuchAxis(descriptor, axis, backend, operation);
    return layout;
  }
  if (axis >= shape.size()) {
    return NoSuchAxis(descriptor, axis, backend, operation);
  }
  for (size_t i = 0; i < axis; ++i) layout.outer *= shape[i];
  layout.extent = shape[axis];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    layout.unit_bytes *= shape[i];
  return layout;
}

absl::StatusOr<ValueDescriptor> WithExtent(const ValueDescriptor& descriptor,
                                           size_t axis, size_t extent,
                                           absl::string_view backend,
                                           absl::string_view operation) {
  const bool scalar = descriptor.shape().empty();
  if (scalar ? axis != 0 : axis >= descriptor.shape().size()) {
    return NoSuchAxis(descriptor, axis, backend, operation);
  }
  absl::StatusOr<ValueDescriptor> result;
  if (axis == 0) {
    result = scalar ? ValueDescriptor::Create({extent}, descriptor.dtype())
                    : ValueDescriptor::Rows(extent, descriptor.RowDescriptor());
  } else if (extent == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " backend: ", operation, ": the result would have a zero ",
        "extent along axis ", axis, " (only the leading axis may be empty)"));
  } else {
    std::vector<size_t> shape = descriptor.shape();
    shape[axis] = extent;
    result = ValueDescriptor::Create(std::move(shape), descriptor.dtype());
  }
  if (!result.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " backend: ", operation, ": the result of ", extent,
        " along axis ", axis, " of ", descriptor.ToString(),
        " is invalid: ", result.status().message()));
  }
  return result;
}

}  // namespace rankd::dataplane
