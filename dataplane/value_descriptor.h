// ValueDescriptor: the row-major logical shape and element type of one
// data-plane value (docs/contract.md, Types and "Empty values"). Built only
// by factories that validate it, so a descriptor that exists is valid: only
// the leading extent may be zero, and no element or byte count overflows
// size_t. Depends on dataplane/dtype.h and absl.
#ifndef RANKD_DATAPLANE_VALUE_DESCRIPTOR_H_
#define RANKD_DATAPLANE_VALUE_DESCRIPTOR_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/dtype.h"

namespace rankd::dataplane {

// Row-major logical shape and element type of a value. An empty shape is a
// scalar (one element). The leading extent may be 0 (a value with no rows,
// valid for every operation: a rank with no requests); every other extent
// is at least 1.
class ValueDescriptor {
 public:
  // The descriptor of `shape` elements of `dtype`; shape[0] may be 0.
  // InvalidArgument naming the dimension for a zero extent after the first,
  // or naming the shape when the element count or the byte size overflows.
  static absl::StatusOr<ValueDescriptor> Create(std::vector<size_t> shape,
                                                TensorDtype dtype);
  // A value of `rows` rows shaped like `row` (shape [rows, row.shape...]);
  // `rows` may be 0. InvalidArgument when the element count or byte size
  // overflows.
  static absl::StatusOr<ValueDescriptor> Rows(size_t rows,
                                              const ValueDescriptor& row);
  // The shape of one row of this value's leading axis: shape[1:] (a scalar
  // row for a 1-D value or a scalar). Never fails.
  ValueDescriptor RowDescriptor() const;

  // Copies share one immutable shape (a reference count, no allocation:
  // a descriptor is copied with every tensor, several times per
  // operation). A moved-from descriptor is still this descriptor.
  ValueDescriptor(const ValueDescriptor&) = default;
  ValueDescriptor& operator=(const ValueDescriptor&) = default;

  const std::vector<size_t>& shape() const { return *shape_; }
  TensorDtype dtype() const { return dtype_; }
  size_t element_count() const { return elements_; }
  size_t byte_size() const { return elements_ * DtypeSize(dtype_); }
  // Elements in one row of the leading axis (all elements for a scalar).
  size_t row_elements() const;
  // Length of the leading axis (1 for a scalar).
  size_t rows() const { return shape_->empty() ? 1 : (*shape_)[0]; }
  // "f32[4, 8]"
  std::string ToString() const;

  friend bool operator==(const ValueDescriptor& a, const ValueDescriptor& b) {
    return a.dtype_ == b.dtype_ &&
           (a.shape_ == b.shape_ || *a.shape_ == *b.shape_);
  }

 private:
  ValueDescriptor(std::vector<size_t> shape, TensorDtype dtype, size_t elements)
      : shape_(std::make_shared<const std::vector<size_t>>(std::move(shape))),
        dtype_(dtype),
        elements_(elements) {}
  std::shared_ptr<const std::vector<size_t>> shape_;  // never null
  TensorDtype dtype_;
  size_t elements_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_VALUE_DESCRIPTOR_H_
