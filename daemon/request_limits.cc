#include "daemon/request_limits.h"

#include "common/limits.h"

namespace rankd {

absl::Status CheckDevice(const v1::DeviceInfo& device) {
  if (auto s =
          CheckTextSize("device.kind", device.kind(), kMaxDeviceFieldBytes);
      !s.ok()) {
    return s;
  }
  if (auto s =
          CheckTextSize("device.uuid", device.uuid(), kMaxDeviceFieldBytes);
      !s.ok()) {
    return s;
  }
  return CheckTextSize("device.pci_bus_id", device.pci_bus_id(),
                       kMaxDeviceFieldBytes);
}

absl::Status CheckReason(absl::string_view reason) {
  return CheckTextSize("reason", reason, kMaxReasonBytes);
}

}  // namespace rankd
