// common/round_limits.h: the all_gather_words frame limit, part of
// common/limits.h (which includes this) but a header of its own so that
// client/client.h, which names it in its public API, and code that
// includes both see one definition. Depends on nothing.
#ifndef RANKD_COMMON_ROUND_LIMITS_H_
#define RANKD_COMMON_ROUND_LIMITS_H_

#include <cstdint>

namespace rankd {

// Largest frame one rank may send in one all_gather_words round.
inline constexpr uint32_t kMaxFrameWords = 65536;

}  // namespace rankd

#endif  // RANKD_COMMON_ROUND_LIMITS_H_
