#include "dataplane/nccl/nccl_executor.h"

#include <utility>

namespace rankd::dataplane::nccl {

absl::StatusOr<NcclExecutor> NcclExecutor::Create(int device, uint32_t lane) {
  auto stream = CudaStream::Create(device);
  if (!stream.ok()) return stream.status();
  return NcclExecutor(*std::move(stream), lane);
}

}  // namespace rankd::dataplane::nccl
