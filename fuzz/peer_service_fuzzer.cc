// Fuzzes the Peer service's request handling: arbitrary bytes parsed as
// each rankd.v1.Peer request and sent to an in-process daemon
// (fuzz/internal/service_driver.h has the input format). The daemon:
// nnodes = 2: node 0 coordinates in-process, inputs act as node 1 (or as
// nobody).
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
              .service = "rankd.v1.Peer", .nnodes = 2, .world_size = 2})
          .release();
  return driver->Run(data, size);
}
