#include "dataplane/nccl/internal/event_operation.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace rankd::dataplane::nccl::internal {

std::shared_ptr<Operation> EventOperation(
    std::string operation, std::shared_ptr<CudaEvent> event,
    std::vector<std::shared_ptr<const void>> retained, bool queued) {
  Operation::Probe probe = [event, operation]() -> absl::StatusOr<bool> {
    if (event == nullptr) return false;
    absl::StatusOr<bool> finished = event->Query();
    if (!finished.ok()) {
      return absl::Status(
          finished.status().code(),
          absl::StrCat("nccl backend: ", operation,
                       " failed on the device: ", finished.status().message()));
    }
    return finished;
  };
  if (!queued) {
    return Operation::Pending(std::move(operation), std::move(retained),
                              std::move(probe));
  }
  return std::make_shared<Operation>(std::move(operation), std::move(retained),
                                     std::move(probe));
}

}  // namespace rankd::dataplane::nccl::internal
