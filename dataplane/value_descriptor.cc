#include "dataplane/value_descriptor.h"

#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::dataplane {
namespace {

// a * b without overflow, or nullopt.
std::optional<size_t> Multiply(size_t a, size_t b) {
  if (a != 0 && b > std::numeric_limits<size_t>::max() / a) return std::nullopt;
  return a * b;
}

}  // namespace

absl::StatusOr<ValueDescriptor> ValueDescriptor::Create(
    std::vector<size_t> shape, TensorDtype dtype) {
  size_t elements = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    // No rows is a value (a rank with nothing to send); an empty row is not.
    if (shape[i] == 0 && i > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", i, " of shape [", absl::StrJoin(shape, ", "),
          "] is zero; only the leading extent may be 0 (docs/contract.md, "
          "\"Empty values\")"));
    }
    auto product = Multiply(elements, shape[i]);
    if (!product.has_value() || !Multiply(*product, DtypeSize(dtype))) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] overflows"));
    }
    elements = *product;
  }
  return ValueDescriptor(std::move(shape), dtype, elements);
}

absl::StatusOr<ValueDescriptor> ValueDescriptor::Rows(
    size_t rows, const ValueDescriptor& row) {
  std::vector<size_t> shape = {rows};
  shape.insert(shape.end(), row.shape().begin(), row.shape().end());
  auto elements = Multiply(rows, row.element_count());
  if (!elements.has_value() || !Multiply(*elements, DtypeSize(row.dtype()))) {
    return absl::InvalidArgumentError(
        absl::StrCat(rows, " rows of ", row.ToString(), " overflow"));
  }
  return ValueDescriptor(std::move(shape), row.dtype(), *elements);
}

ValueDescriptor ValueDescriptor::RowDescriptor() const {
  std::vector<size_t> row;
  if (shape_->size() > 1) row.assign(shape_->begin() + 1, shape_->end());
  size_t elements = 1;
  for (size_t d : row) elements *= d;
  return ValueDescriptor(std::move(row), dtype_, elements);
}

size_t ValueDescriptor::row_elements() const {
  if (shape_->empty()) return 1;
  size_t elements = 1;
  for (size_t i = 1; i < shape_->size(); ++i) elements *= (*shape_)[i];
  return elements;
}

std::string ValueDescriptor::ToString() const {
  return absl::StrCat(DtypeName(dtype_), "[", absl::StrJoin(*shape_, ", "),
                      "]");
}

}  // namespace rankd::dataplane
