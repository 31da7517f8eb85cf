#include "dataplane/nccl/internal/op_owner.h"

#include <string>
#include <utility>

#include "absl/time/time.h"
#include "dataplane/quarantine.h"

namespace rankd::dataplane::nccl::internal {

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
  absl::Status poison() const override { return absl::OkStatus(); }
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

}  // namespace rankd::dataplane::nccl::internal
