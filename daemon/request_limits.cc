#include "daemon/request_limits.h"

#include "absl/strings/str_cat.h"
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

absl::Status CheckNodeInfo(const v1::NodeInfo& node) {
  const struct {
    const char* field;
    const std::string& value;
    size_t limit;
  } texts[] = {
      {"node.hostname", node.hostname(), kMaxHostNameBytes},
      {"node.pod_name", node.pod_name(), kMaxHostNameBytes},
      {"node.address", node.address(), kMaxAddressBytes},
      {"node.boot_id", node.boot_id(), kMaxBootIdBytes},
  };
  for (const auto& text : texts) {
    if (auto s = CheckTextSize(text.field, text.value, text.limit); !s.ok()) {
      return s;
    }
  }
  if (node.devices_size() > static_cast<int>(kMaxDevicesPerNode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node.devices has ", node.devices_size(),
                     " devices; the limit is ", kMaxDevicesPerNode));
  }
  for (const v1::DeviceInfo& device : node.devices()) {
    if (auto s = CheckDevice(device); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckReason(absl::string_view reason) {
  return CheckTextSize("reason", reason, kMaxReasonBytes);
}

absl::Status CheckJobId(absl::string_view job_id, absl::string_view served,
                        absl::string_view role, absl::string_view hint) {
  if (job_id == served) return absl::OkStatus();
  std::string shown = job_id.empty() || IsJobId(job_id)
                          ? absl::StrCat("'", job_id, "'")
                          : absl::StrCat("(a ", job_id.size(),
                                         "-byte id that is not a job id)");
  return absl::NotFoundError(absl::StrCat("unknown job ", shown, "; this ",
                                          role, " serves job '", served, "'",
                                          hint));
}

}  // namespace rankd
