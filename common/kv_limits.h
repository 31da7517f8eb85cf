// common/kv_limits.h: the key-value broker's key and value limits, part of
// common/limits.h (which includes this) but a header of their own so that
// code that also includes client/client.h (whose public constants repeat
// some of limits.h's) can use them: the key-value channel's frames
// (common/kv_frame.h) and client.h itself. Depends on nothing.
#ifndef RANKD_COMMON_KV_LIMITS_H_
#define RANKD_COMMON_KV_LIMITS_H_

#include <cstddef>

namespace rankd {

// Largest key-value key and value (bytes), on every path: the Rank
// service's calls, the coordinator's store and the key-value channel's
// frames.
inline constexpr size_t kMaxKvKeyBytes = 512;
inline constexpr size_t kMaxKvValueBytes = size_t{1} << 20;

}  // namespace rankd

#endif  // RANKD_COMMON_KV_LIMITS_H_
