#include "dataplane/nccl/device_tensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/nccl/cuda_copy.h"

namespace rankd::dataplane::nccl {

absl::StatusOr<DeviceTensor> DeviceTensor::Wrap(
    std::shared_ptr<DeviceBuffer> buffer, ValueDescriptor descriptor,
    std::shared_ptr<CudaEvent> ready) {
  if (buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl backend: a device tensor ", descriptor.ToString(),
                     " needs a buffer"));
  }
  if (buffer->size() < descriptor.byte_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: a device tensor ", descriptor.ToString(), " needs ",
        descriptor.byte_size(), " bytes; its buffer has ", buffer->size()));
  }
  return DeviceTensor(std::move(buffer), std::move(descriptor),
                      std::move(ready));
}

absl::StatusOr<DeviceTensor> DeviceTensor::Allocate(
    const ValueDescriptor& descriptor, std::shared_ptr<CudaStream> stream) {
  auto buffer =
      DeviceBuffer::Allocate(descriptor.byte_size(), std::move(stream));
  if (!buffer.ok()) return buffer.status();
  return Wrap(*std::move(buffer), descriptor);
}

absl::StatusOr<DeviceTensor> DeviceTensor::FromHost(
    const ValueDescriptor& descriptor, const void* data, size_t bytes,
    std::shared_ptr<CudaStream> stream) {
  if (bytes != descriptor.byte_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl backend: ", descriptor.ToString(), " needs ",
                     descriptor.byte_size(), " host bytes; got ", bytes));
  }
  if (stream == nullptr) {
    return absl::InvalidArgumentError("nccl backend: FromHost needs a stream");
  }
  std::shared_ptr<CudaStream> s = stream;
  auto tensor = Allocate(descriptor, std::move(stream));
  if (!tensor.ok()) return tensor.status();
  absl::Status copied = CopyHostToDevice(tensor->data(), data, bytes, *s);
  if (!copied.ok()) return copied;
  return tensor;
}

absl::StatusOr<std::vector<uint8_t>> DeviceTensor::ToHost() const {
  std::vector<uint8_t> out(byte_size());
  if (out.empty()) return out;
  auto stream = CudaStream::ForTransfers(device());
  if (!stream.ok()) return stream.status();
  // Waits on the host: the transfer stream is shared, and work that never
  // finishes must not block other reads queued behind it.
  if (ready_ != nullptr) {
    absl::Status waited = ready_->Synchronize();
    if (!waited.ok()) return waited;
  }
  absl::Status copied =
      CopyDeviceToHost(out.data(), data(), out.size(), **stream);
  if (!copied.ok()) return copied;
  return out;
}

DeviceTensor DeviceTensor::WithReady(std::shared_ptr<CudaEvent> event) const {
  return DeviceTensor(buffer_, descriptor_, std::move(event));
}

std::string DeviceTensor::ToString() const {
  return absl::StrCat(descriptor_.ToString(), " on cuda:", device());
}

}  // namespace rankd::dataplane::nccl
