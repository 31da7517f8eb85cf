#include "dataplane/host_tensor.h"

#include <algorithm>

namespace rankd::dataplane {

HostTensor HostTensor::Zeros(const ValueDescriptor& descriptor) {
  // At least one byte so that data() is never null, even for zero rows.
  auto buffer = std::make_shared<Buffer>(
      std::max<size_t>(descriptor.byte_size(), 1), uint8_t{0});
  return HostTensor(descriptor, std::move(buffer));
}

absl::StatusOr<HostTensor> HostTensor::FromBytes(
    const ValueDescriptor& descriptor, absl::Span<const uint8_t> bytes) {
  if (bytes.size() != descriptor.byte_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostTensor: ", descriptor.ToString(), " needs ",
                     descriptor.byte_size(), " bytes; got ", bytes.size()));
  }
  HostTensor tensor = Zeros(descriptor);
  if (!bytes.empty()) std::memcpy(tensor.data(), bytes.data(), bytes.size());
  return tensor;
}

HostTensor HostTensor::Clone() const {
  return HostTensor(descriptor_, std::make_shared<Buffer>(*buffer_));
}

}  // namespace rankd::dataplane
