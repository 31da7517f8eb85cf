#include "dataplane/nccl/internal/comm_name.h"

#include "absl/strings/str_format.h"

namespace rankd::dataplane::nccl::internal {

std::string CommName(absl::Span<const uint32_t> members, uint32_t world_size) {
  bool world = members.size() == world_size;
  for (size_t i = 0; world && i < members.size(); ++i) {
    world = members[i] == i;
  }
  if (world) return "world";
  uint64_t hash = 1469598103934665603ull;  // FNV-1a 64
  for (uint32_t m : members) {
    for (int b = 0; b < 4; ++b) {
      hash ^= (m >> (8 * b)) & 0xffu;
      hash *= 1099511628211ull;
    }
  }
  return absl::StrFormat("m%u-%016x", members.size(), hash);
}

}  // namespace rankd::dataplane::nccl::internal
