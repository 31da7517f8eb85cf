#include "dataplane/nccl/testing/stream_stall.h"

#include "absl/time/clock.h"

namespace rankd::dataplane::nccl::testing {
namespace {

void HoldStream(void* arg) {
  auto* stall = static_cast<Stall*>(arg);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!stall->released.load() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace

Stall* StallStream(const CudaStream& stream) {
  auto* stall = new Stall();
  if (!LaunchHostFunction(stream, HoldStream, stall).ok()) return nullptr;
  return stall;
}

}  // namespace rankd::dataplane::nccl::testing
