#include "dataplane/shape.h"

#include <limits>
#include <optional>
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

// offsets[i] = sum(counts[0..i)), one more entry than `counts`; nullopt when
// the sum overflows.
std::optional<std::vector<size_t>> PrefixSums(absl::Span<const size_t> counts) {
  std::vector<size_t> offsets(1, 0);
  offsets.reserve(counts.size() + 1);
  for (size_t c : counts) {
    if (c > std::numeric_limits<size_t>::max() - offsets.back()) {
      return std::nullopt;
    }
    offsets.push_back(offsets.back() + c);
  }
  return offsets;
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

absl::StatusOr<AllToAllLayout> LayoutAllToAll(
    const ValueDescriptor& input, size_t axis,
    absl::Span<const size_t> send_counts,
    absl::Span<const size_t> receive_counts, size_t members, size_t me,
    absl::string_view backend, absl::string_view operation) {
  auto refuse = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend, " backend: ", operation, ": ", parts...));
  };
  if (send_counts.size() != members || receive_counts.size() != members) {
    return refuse("send counts have ", send_counts.size(),
                  " entries and receive counts ", receive_counts.size(),
                  "; both need one per member (", members, ")");
  }
  if (input.shape().empty()) {
    return refuse("the input needs an axis to partition; got the scalar ",
                  input.ToString());
  }
  auto along = LayoutAlong(input, axis, backend, operation);
  if (!along.ok()) return along.status();
  auto sent = PrefixSums(send_counts);
  auto received = PrefixSums(receive_counts);
  if (!sent.has_value() || !received.has_value()) {
    return refuse("the counts overflow when added up");
  }
  std::vector<size_t> send_offsets = *std::move(sent);
  std::vector<size_t> receive_offsets = *std::move(received);
  if (send_offsets.back() != along->extent) {
    return refuse("send counts add up to ", send_offsets.back(),
                  " but the input ", input.ToString(), " has ", along->extent,
                  " along axis ", axis);
  }
  if (send_counts[me] != receive_counts[me]) {
    return refuse("the self slot disagrees: send_counts[", me,
                  "] = ", send_counts[me], " but receive_counts[", me,
                  "] = ", receive_counts[me]);
  }
  auto output =
      WithExtent(input, axis, receive_offsets.back(), backend, operation);
  if (!output.ok()) return output.status();
  return AllToAllLayout{*along, std::move(send_offsets),
                        std::move(receive_offsets), *std::move(output)};
}

absl::StatusOr<UnevenGatherLayout> LayoutUnevenGather(
    const ValueDescriptor& input, size_t axis, absl::Span<const size_t> counts,
    size_t members, size_t me, absl::string_view backend,
    absl::string_view operation) {
  auto refuse = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend, " backend: ", operation, ": ", parts...));
  };
  if (counts.size() != members) {
    return refuse("counts has ", counts.size(),
                  " entries; it needs one per member (", members, ")");
  }
  auto along = LayoutAlong(input, axis, backend, operation);
  if (!along.ok()) return along.status();
  if (counts[me] != along->extent) {
    return refuse("counts[", me, "] (this member) is ", counts[me],
                  " but the input ", input.ToString(), " has ", along->extent,
                  " along axis ", axis);
  }
  auto offsets = PrefixSums(counts);
  if (!offsets.has_value()) return refuse("the counts overflow when added up");
  auto output = WithExtent(input, axis, offsets->back(), backend, operation);
  if (!output.ok()) return output.status();
  return UnevenGatherLayout{*along, *std::move(offsets), *std::move(output)};
}

absl::StatusOr<EvenGatherLayout> LayoutEvenGather(const ValueDescriptor& input,
                                                  size_t axis, size_t members,
                                                  absl::string_view backend,
                                                  absl::string_view operation) {
  auto along = LayoutAlong(input, axis, backend, operation);
  if (!along.ok()) return along.status();
  if (members != 0 &&
      along->extent > std::numeric_limits<size_t>::max() / members) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, " backend: ", operation, ": the gathered extent along axis ",
        axis, " (", along->extent, " x ", members, " members) overflows"));
  }
  auto output =
      WithExtent(input, axis, along->extent * members, backend, operation);
  if (!output.ok()) return output.status();
  return EvenGatherLayout{*along, *std::move(output)};
}

ValueDescriptor AllGatherOutput(const ValueDescriptor& input,
                                uint32_t members) {
  if (input.shape().empty()) {
    return *ValueDescriptor::Create({members}, input.dtype());
  }
  return *ValueDescriptor::Rows(input.rows() * members, input.RowDescriptor());
}

}  // namespace rankd::dataplane
