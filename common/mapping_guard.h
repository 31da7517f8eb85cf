// MappingGuard: keeps a process alive when another process truncates a
// file this one has mapped shared.
//
// Touching a page of a MAP_SHARED mapping beyond the end of its file raises
// SIGBUS, and a peer that can write the file can shrink it at any time (the
// daemon maps each rank's round-slots file, common/round_slots.h). A
// guarded mapping is registered here; the process-wide SIGBUS handler
// installed on first use replaces a faulting guarded mapping with
// anonymous zeroed memory of the same size (the access then completes,
// reading zeros) and marks the mapping broken, for its owner to notice and
// drop. A SIGBUS outside every guarded mapping is a real fault: the handler
// restores the default action and the signal kills the process as before.
// (Wayland compositors guard their clients' shared-memory buffers the same
// way.)
//
// Bounds: at most kMaxGuardedMappings at once. Thread-safe; the handler
// touches only atomics. Depends only on Linux.
#ifndef RANKD_COMMON_MAPPING_GUARD_H_
#define RANKD_COMMON_MAPPING_GUARD_H_

#include <cstddef>

namespace rankd {

class MappingGuard {
 public:
  static constexpr size_t kMaxGuardedMappings = 4096;

  // Guards [base, base + bytes), a mapping the caller owns. On success the
  // guard must be released (Release) before the mapping is unmapped. Returns
  // a handle >= 0, or -1 when kMaxGuardedMappings are guarded already (the
  // mapping then stays unguarded).
  static int Guard(void* base, size_t bytes);
  // True once an access to guarded mapping `handle` faulted and the mapping
  // was replaced by zeroed memory.
  static bool Broken(int handle);
  // Stops guarding `handle` (no-op for -1).
  static void Release(int handle);
};

}  // namespace rankd

#endif  // RANKD_COMMON_MAPPING_GUARD_H_
