#include "dataplane/host_tensor.h"

namespace rankd::dataplane {

HostTensor HostTensor::Uninitialized(const ValueDescriptor& descriptor) {
  // The pool gives every request, even of zero bytes, a non-null block.
  return HostTensor(
      descriptor,
      std::make_shared<HostBuffer>(
          HostBufferPool::Default().Allocate(descriptor.byte_size())));
}

HostTensor HostTensor::Zeros(const ValueDescriptor& descriptor) {
  // A reused block holds its previous user's bytes: always clear it.
  HostTensor tensor = Uninitialized(descriptor);
  std::memset(tensor.data(), 0, tensor.byte_size());
  return tensor;
}

absl::StatusOr<HostTensor> HostTensor::FromBytes(
    const ValueDescriptor& descriptor, absl::Span<const uint8_t> bytes) {
  if (bytes.size() != descriptor.byte_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostTensor: ", descriptor.ToString(), " needs ",
                     descriptor.byte_size(), " bytes; got ", bytes.size()));
  }
  HostTensor tensor = Uninitialized(descriptor);
  if (!bytes.empty()) std::memcpy(tensor.data(), bytes.data(), bytes.size());
  return tensor;
}

HostTensor HostTensor::Clone() const {
  HostTensor copy = Uninitialized(descriptor_);
  if (byte_size() != 0) std::memcpy(copy.data(), data(), byte_size());
  return copy;
}

}  // namespace rankd::dataplane
