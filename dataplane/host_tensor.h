// HostTensor: a value in host memory for host backends (Gloo): shared
// ownership of one byte buffer plus the ValueDescriptor that interprets it.
// Copying a HostTensor shares the buffer (like a shared_ptr); Clone() makes a
// deep copy. A completion that retains a HostTensor keeps its buffer alive.
// Buffers are 64-byte aligned and come from HostBufferPool::Default()
// (dataplane/host_buffer_pool.h): when the last tensor or resource() holding
// a buffer of 64 KiB or more drops it, the block is kept for the next tensor
// of about the same size instead of being unmapped and faulted in again.
//
//   auto t = HostTensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
//   if (!t.ok()) return t.status();
//   absl::Span<const float> v = *t->Values<float>();
//
// Element types are those of dataplane/element_types.h (float, double,
// int8_t..uint64_t, bool, Float16, BFloat16, Complex64). Thread safety: the
// object is immutable except through the buffer; concurrent writes to one
// buffer are the caller's business. Depends on dataplane/value_descriptor.h,
// dataplane/element_types.h, dataplane/host_buffer_pool.h and absl.
#ifndef RANKD_DATAPLANE_HOST_TENSOR_H_
#define RANKD_DATAPLANE_HOST_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "dataplane/dtype.h"
#include "dataplane/element_types.h"
#include "dataplane/host_buffer_pool.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane {

class HostTensor {
 public:
  // A zero-filled tensor of `descriptor` (which may have zero rows).
  static HostTensor Zeros(const ValueDescriptor& descriptor);

  // A tensor of `descriptor` whose bytes are unspecified (they may hold a
  // previous tensor's data): for outputs that the caller overwrites entirely
  // before anyone reads them. Cheaper than Zeros for large tensors.
  static HostTensor Uninitialized(const ValueDescriptor& descriptor);

  // A tensor holding a copy of `bytes`. InvalidArgument unless `bytes` has
  // exactly descriptor.byte_size() bytes.
  static absl::StatusOr<HostTensor> FromBytes(const ValueDescriptor& descriptor,
                                              absl::Span<const uint8_t> bytes);

  // A tensor of `shape` holding `values` (row-major); shape[0] may be 0
  // (docs/contract.md, "Empty values"). The dtype is DtypeOf<T>.
  // InvalidArgument for a bad shape or a count mismatch.
  // (std::vector<bool> has no span: FromVector handles bool.)
  template <typename T>
  static absl::StatusOr<HostTensor> FromSpan(std::vector<size_t> shape,
                                             absl::Span<const T> values);
  template <typename T>
  static absl::StatusOr<HostTensor> FromVector(std::vector<size_t> shape,
                                               const std::vector<T>& values) {
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<uint8_t> bytes(values.begin(), values.end());
      auto descriptor =
          ValueDescriptor::Create(std::move(shape), TensorDtype::kBool);
      if (!descriptor.ok()) return descriptor.status();
      return FromBytes(*descriptor, bytes);
    } else {
      return FromSpan<T>(std::move(shape), absl::MakeConstSpan(values));
    }
  }
  // `rows` rows shaped like `row` (rows may be zero), holding `values`.
  template <typename T>
  static absl::StatusOr<HostTensor> FromRows(size_t rows,
                                             std::vector<size_t> row_shape,
                                             const std::vector<T>& values);

  const ValueDescriptor& descriptor() const { return descriptor_; }
  TensorDtype dtype() const { return descriptor_.dtype(); }
  size_t byte_size() const { return descriptor_.byte_size(); }

  // The buffer. Never null (a zero-byte tensor points at a valid, empty
  // allocation), aligned to HostBufferPool::kAlignment (64) bytes.
  uint8_t* data() const { return buffer_->data(); }
  absl::Span<const uint8_t> bytes() const {
    return absl::MakeConstSpan(buffer_->data(), byte_size());
  }

  // Typed views of the elements. FailedPrecondition when T is not the
  // tensor's element type.
  template <typename T>
  absl::StatusOr<absl::Span<const T>> Values() const;
  template <typename T>
  absl::StatusOr<absl::Span<T>> MutableValues() const;

  // A deep copy with its own buffer (copied, never zero-filled first).
  HostTensor Clone() const;

  // Copies share the buffer and are never donated (below); moves keep the
  // donation.
  HostTensor(const HostTensor& other)
      : descriptor_(other.descriptor_), buffer_(other.buffer_) {}
  HostTensor& operator=(const HostTensor& other) {
    descriptor_ = other.descriptor_;
    buffer_ = other.buffer_;
    donated_ = false;
    return *this;
  }
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  // Donation: `tensor`, marked as given up by the caller. An operation that
  // receives a donated tensor which is the only owner of its buffer (no
  // copy, no retained resource shares it) may write its output into that
  // buffer instead of a new one, e.g. an all_reduce_sum in place, as
  // torch.distributed does, without a second buffer or a copy pass. The
  // result is the same; only the input's bytes are gone. If anything else
  // still shares the buffer, the operation works out of place as usual, so
  // donating is always safe:
  //
  //   auto sum = session.AllReduceSum(scope, HostTensor::Donate(std::move(x)));
  //
  // Which operations use a donation is documented per backend
  // (docs/dataplane.md); the others ignore it.
  static HostTensor Donate(HostTensor tensor) {
    tensor.donated_ = true;
    return tensor;
  }
  bool donated() const { return donated_; }
  // True when this tensor is donated and the only owner of its buffer: an
  // operation may then reuse the buffer for its output.
  bool donated_and_sole_owner() const {
    return donated_ && buffer_.use_count() == 1;
  }

  // True when both tensors use the same buffer.
  bool SharesBufferWith(const HostTensor& other) const {
    return buffer_ == other.buffer_;
  }

  // The buffer as an opaque shared resource, for completions to retain. The
  // block is not reused while any copy of it is held.
  std::shared_ptr<const void> resource() const { return buffer_; }

 private:
  HostTensor(ValueDescriptor descriptor, std::shared_ptr<HostBuffer> buffer)
      : descriptor_(std::move(descriptor)), buffer_(std::move(buffer)) {}
  template <typename T>
  absl::Status CheckType() const;

  ValueDescriptor descriptor_;
  std::shared_ptr<HostBuffer> buffer_;  // never null
  bool donated_ = false;
};

// ---- implementation details ------------------------------------------------

template <typename T>
absl::StatusOr<HostTensor> HostTensor::FromSpan(std::vector<size_t> shape,
                                                absl::Span<const T> values) {
  auto descriptor =
      ValueDescriptor::Create(std::move(shape), DtypeOf<T>::value);
  if (!descriptor.ok()) return descriptor.status();
  if (descriptor->element_count() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HostTensor: ", descriptor->ToString(), " needs ",
        descriptor->element_count(), " values; got ", values.size()));
  }
  HostTensor tensor = Uninitialized(*descriptor);
  if (!values.empty()) {
    std::memcpy(tensor.data(), values.data(), values.size() * sizeof(T));
  }
  return tensor;
}

template <typename T>
absl::StatusOr<HostTensor> HostTensor::FromRows(size_t rows,
                                                std::vector<size_t> row_shape,
                                                const std::vector<T>& values) {
  auto row = ValueDescriptor::Create(std::move(row_shape), DtypeOf<T>::value);
  if (!row.ok()) return row.status();
  auto descriptor = ValueDescriptor::Rows(rows, *row);
  if (!descriptor.ok()) return descriptor.status();
  if (descriptor->element_count() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HostTensor: ", descriptor->ToString(), " needs ",
        descriptor->element_count(), " values; got ", values.size()));
  }
  HostTensor tensor = Uninitialized(*descriptor);
  if (!values.empty()) {
    std::memcpy(tensor.data(), values.data(), values.size() * sizeof(T));
  }
  return tensor;
}

template <typename T>
absl::Status HostTensor::CheckType() const {
  if (DtypeOf<T>::value != dtype()) {
    return absl::FailedPreconditionError(
        absl::StrCat("HostTensor holds ", DtypeName(dtype()), " elements, not ",
                     DtypeName(DtypeOf<T>::value)));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<absl::Span<const T>> HostTensor::Values() const {
  if (absl::Status s = CheckType<T>(); !s.ok()) return s;
  return absl::MakeConstSpan(reinterpret_cast<const T*>(data()),
                             descriptor_.element_count());
}

template <typename T>
absl::StatusOr<absl::Span<T>> HostTensor::MutableValues() const {
  if (absl::Status s = CheckType<T>(); !s.ok()) return s;
  return absl::MakeSpan(reinterpret_cast<T*>(data()),
                        descriptor_.element_count());
}

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_HOST_TENSOR_H_
