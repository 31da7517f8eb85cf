// Fuzzes the Rank service's request handling: arbitrary bytes parsed as
// each rankd.v1.Rank request and sent to an in-process daemon
// (fuzz/internal/service_driver.h has the input format). The daemon:
// nnodes = 1, world_size = 2: both ranks local, reached over the socket or TCP.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz/internal/service_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Lives for the whole process (libFuzzer exits without unwinding); its
  // daemon is stopped at exit, before static destructors run.
  static rankd::fuzz::internal::ServiceDriver* const driver =
      std::make_unique<rankd::fuzz::internal::ServiceDriver>(
          rankd::fuzz::internal::DriverOptions{
              .service = "rankd.v1.Rank", .nnodes = 1, .world_size = 2})
          .release();
  return driver->Run(data, size);
}
