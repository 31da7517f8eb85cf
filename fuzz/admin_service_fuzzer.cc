// Fuzzes the Admin service's request handling: arbitrary bytes parsed as
// each rankd.v1.Admin request and sent to an in-process daemon
// (fuzz/internal/service_driver.h has the input format). The daemon:
// admin_kv_read on, so Admin.KvGet's checks are reached.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz/internal/service_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Lives for the whole process (libFuzzer exits without unwinding); its
  // daemon is stopped at exit, before static destructors run.
  static rankd::fuzz::internal::ServiceDriver* const driver =
      std::make_unique<rankd::fuzz::internal::ServiceDriver>(
          rankd::fuzz::internal::DriverOptions{.service = "rankd.v1.Admin",
                                               .nnodes = 1,
                                               .world_size = 2,
                                               .admin_kv_read = true})
          .release();
  return driver->Run(data, size);
}
