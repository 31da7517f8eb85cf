#include "common/monotonic_clock.h"

namespace rankd {
namespace {

struct Anchor {
  absl::Time wall;
  std::chrono::steady_clock::time_point steady;
};

const Anchor& ProcessAnchor() {
  // Read once, on first use, in whichever thread comes first.
  static const Anchor anchor{absl::Now(), std::chrono::steady_clock::now()};
  return anchor;
}

}  // namespace

absl::Time MonotonicNow() {
  const Anchor& anchor = ProcessAnchor();
  return anchor.wall +
         absl::FromChrono(std::chrono::steady_clock::now() - anchor.steady);
}

std::chrono::steady_clock::time_point ToSteadyTime(absl::Time monotonic) {
  const Anchor& anchor = ProcessAnchor();
  if (monotonic == absl::InfiniteFuture()) {
    return std::chrono::steady_clock::time_point::max();
  }
  if (monotonic == absl::InfinitePast()) {
    return std::chrono::steady_clock::time_point::min();
  }
  return anchor.steady +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             absl::ToChronoNanoseconds(monotonic - anchor.wall));
}

}  // namespace rankd
