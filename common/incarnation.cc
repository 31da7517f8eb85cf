// incarnation.cc: see incarnation.h.

#include "common/incarnation.h"

#include <errno.h>
#include <sys/random.h>

#include <random>

namespace rankd {
namespace {

// 8 bytes from getrandom(2), or false when the kernel has none to give
// without blocking (its pool is not yet initialised) or lacks the call.
bool KernelRandom(uint64_t* value) {
  for (;;) {
    const ssize_t n = getrandom(value, sizeof(*value), GRND_NONBLOCK);
    if (n == static_cast<ssize_t>(sizeof(*value))) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

uint64_t DeviceRandom() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

uint64_t NewIncarnation() {
  uint64_t value = 0;
  while (value == 0) {
    if (!KernelRandom(&value)) value = DeviceRandom();
  }
  return value;
}

}  // namespace rankd
