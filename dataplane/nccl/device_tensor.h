// DeviceTensor: the NCCL backend's value (docs/contract.md, Backends): a shared
// device buffer, its ValueDescriptor and the device it lives on, plus an
// optional "ready" event: the CUDA event after which the buffer holds the
// value. Outputs of NCCL operations carry their operation's completion event as
// ready event, so later GPU work (ours or the caller's, on any stream) can be
// ordered after them without blocking the host. Copies share the buffer.
#ifndef RANKD_DATAPLANE_NCCL_DEVICE_TENSOR_H_
#define RANKD_DATAPLANE_NCCL_DEVICE_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/nccl/cuda_event.h"
#include "dataplane/nccl/cuda_stream.h"
#include "dataplane/nccl/device_buffer.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane::nccl {

class DeviceTensor {
 public:
  // InvalidArgument when `buffer` is null or smaller than the descriptor.
  static absl::StatusOr<DeviceTensor> Wrap(
      std::shared_ptr<DeviceBuffer> buffer, ValueDescriptor descriptor,
      std::shared_ptr<CudaEvent> ready = nullptr);

  // Uninitialized device memory for `descriptor`, ordered on `stream`.
  static absl::StatusOr<DeviceTensor> Allocate(
      const ValueDescriptor& descriptor, std::shared_ptr<CudaStream> stream);

  // A copy of `bytes` host bytes (exactly descriptor.byte_size()); returns
  // once `data` may be reused.
  static absl::StatusOr<DeviceTensor> FromHost(
      const ValueDescriptor& descriptor, const void* data, size_t bytes,
      std::shared_ptr<CudaStream> stream);
  template <typename T>
  static absl::StatusOr<DeviceTensor> FromHostVector(
      const ValueDescriptor& descriptor, const std::vector<T>& values,
      std::shared_ptr<CudaStream> stream) {
    return FromHost(descriptor, values.data(), values.size() * sizeof(T),
                    std::move(stream));
  }

  // Waits for the ready event and copies the value to the host (on the
  // device's transfer stream, CudaStream::ForTransfers, so unrelated work
  // queued on the tensor's stream does not delay it).
  absl::StatusOr<std::vector<uint8_t>> ToHost() const;
  template <typename T>
  absl::StatusOr<std::vector<T>> ToHostVector() const {
    auto bytes = ToHost();
    if (!bytes.ok()) return bytes.status();
    std::vector<T> out(bytes->size() / sizeof(T));
    if (!out.empty())
      std::memcpy(out.data(), bytes->data(), out.size() * sizeof(T));
    return out;
  }

  const ValueDescriptor& descriptor() const { return descriptor_; }
  int device() const { return buffer_->device(); }
  void* data() const { return buffer_->data(); }
  size_t byte_size() const { return descriptor_.byte_size(); }
  const std::shared_ptr<DeviceBuffer>& buffer() const { return buffer_; }
  const std::shared_ptr<CudaEvent>& ready() const { return ready_; }
  // Whether the two tensors' bytes intersect (an empty tensor overlaps
  // nothing); both must be on one device to mean anything.
  bool Overlaps(const DeviceTensor& other) const {
    const auto* a = static_cast<const char*>(data());
    const auto* b = static_cast<const char*>(other.data());
    return byte_size() > 0 && other.byte_size() > 0 &&
           a < b + other.byte_size() && b < a + byte_size();
  }
  // The same buffer and descriptor, ready after `event`.
  DeviceTensor WithReady(std::shared_ptr<CudaEvent> event) const;
  // "f32[4, 8] on cuda:0"
  std::string ToString() const;

 private:
  DeviceTensor(std::shared_ptr<DeviceBuffer> buffer, ValueDescriptor descriptor,
               std::shared_ptr<CudaEvent> ready)
      : buffer_(std::move(buffer)),
        descriptor_(std::move(descriptor)),
        ready_(std::move(ready)) {}
  std::shared_ptr<DeviceBuffer> buffer_;
  ValueDescriptor descriptor_;
  std::shared_ptr<CudaEvent> ready_;
};

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_DEVICE_TENSOR_H_
