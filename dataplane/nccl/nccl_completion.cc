#include "dataplane/nccl/nccl_completion.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rankd::dataplane::nccl {

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

void NcclOpOwner::Unattended(const std::shared_ptr<Operation>& op) {
  Quarantine(op);
}

std::shared_ptr<NcclCompletion> MakeNcclCompletion(
    std::shared_ptr<Operation> op, const std::shared_ptr<NcclOpOwner>& owner) {
  return std::make_shared<NcclCompletion>(
      std::move(op), owner, OperationCompletion::OwnerRef::kShared, "nccl");
}

namespace {

// Owner of session-less operations. Leaked singleton; its quarantine's
// reaper thread starts on first use.
class LocalOwner final : public NcclOpOwner {
 public:
  absl::Status PoisonStatus() const override { return absl::OkStatus(); }
  void Poison(const absl::Status&) override {}
  bool SupportsNativeCancel() const override { return false; }
  bool SupportsQuarantine() const override { return true; }
  bool CancelNative(const absl::Status&) override { return true; }
  std::string abort_effect() const override { return "nothing"; }
  void Quarantine(std::shared_ptr<Operation> op) override {
    op->QuarantineIn(quarantine_);
  }
  absl::Duration AbortGrace() const override { return absl::ZeroDuration(); }

 private:
  dataplane::Quarantine quarantine_{absl::Milliseconds(20)};
};

}  // namespace

std::shared_ptr<NcclOpOwner> LocalOpOwner() {
  static auto* owner =
      new std::shared_ptr<NcclOpOwner>(std::make_shared<LocalOwner>());
  return *owner;
}

}  // namespace rankd::dataplane::nccl
