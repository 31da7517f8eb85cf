// Limits on what a caller can make a daemon hold or wait for, shared by the
// node agent (the Rank service) and the coordinator (the Peer service), so
// a value refused on one path is refused on the other with the same words.
// The table in docs/operations.md ("Limits") lists them. Depends on absl.
#ifndef RANKD_COMMON_LIMITS_H_
#define RANKD_COMMON_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rankd {

// Longest wait a caller may ask for (timeout_ms, wait_for_world_ms).
inline constexpr uint32_t kMaxTimeoutMs = 3'600'000;
// Longest reason a node may give for releasing a rank or leaving.
inline constexpr size_t kMaxReasonBytes = 1024;
// Longest device field (kind, uuid, pci_bus_id) a rank may report.
inline constexpr size_t kMaxDeviceFieldBytes = 256;

// OK for 1..kMaxTimeoutMs; InvalidArgument naming `field` otherwise (zero:
// every wait needs a deadline).
absl::Status CheckTimeoutMs(uint32_t timeout_ms, absl::string_view field);

// The same for a wait that is optional: 0 (do not wait) is OK too.
absl::Status CheckOptionalTimeoutMs(uint32_t timeout_ms,
                                    absl::string_view field);

// OK when `value` has at most `max_bytes` bytes; InvalidArgument naming
// `field`, its size and the limit otherwise (never echoing the value).
absl::Status CheckTextSize(absl::string_view field, absl::string_view value,
                           size_t max_bytes);

}  // namespace rankd

#endif  // RANKD_COMMON_LIMITS_H_
