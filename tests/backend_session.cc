#include "tests/backend_session.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/nccl_session.h"
#include "dataplane/value_descriptor.h"

namespace rankd::testing {
namespace {

using dataplane::CollectiveScope;
using dataplane::HostTensor;
using dataplane::TensorDtype;
using dataplane::ValueDescriptor;
using dataplane::gloo::GlooSession;
using dataplane::nccl::DeviceTensor;
using dataplane::nccl::NcclSession;

// What differs between the backends, as traits: how a float vector becomes
// the backend's value and back.
struct GlooTraits {
  using Session = GlooSession;
  static constexpr Backend kBackend = Backend::kGloo;
  static absl::StatusOr<HostTensor> Make(GlooSession&,
                                         const ValueDescriptor& desc,
                                         const std::vector<float>& values) {
    HostTensor x = HostTensor::Zeros(desc);
    std::memcpy(x.data(), values.data(), values.size() * sizeof(float));
    return x;
  }
  static absl::StatusOr<std::vector<float>> Read(const HostTensor& x) {
    const float* p = reinterpret_cast<const float*>(x.data());
    return std::vector<float>(p, p + x.descriptor().element_count());
  }
};

struct NcclTraits {
  using Session = NcclSession;
  static constexpr Backend kBackend = Backend::kNccl;
  static absl::StatusOr<DeviceTensor> Make(NcclSession& session,
                                           const ValueDescriptor& desc,
                                           const std::vector<float>& values) {
    return DeviceTensor::FromHostVector(desc, values, session.stream());
  }
  static absl::StatusOr<std::vector<float>> Read(const DeviceTensor& x) {
    return x.ToHostVector<float>();
  }
};

template <typename Traits>
class Session final : public BackendSession {
 public:
  explicit Session(std::unique_ptr<typename Traits::Session> session)
      : session_(std::move(session)) {}

  Backend backend() const override { return Traits::kBackend; }
  const dataplane::DistributedSessionDescriptor& descriptor() const override {
    return session_->descriptor();
  }
  dataplane::DistributedCapabilities capabilities() const override {
    return session_->capabilities();
  }
  absl::Status poison() const override { return session_->poison(); }

  absl::StatusOr<std::vector<float>> Sum(
      const CollectiveScope& scope, const std::vector<float>& values) override {
    auto desc = ValueDescriptor::Create({values.size()}, TensorDtype::kF32);
    if (!desc.ok()) return desc.status();
    auto x = Traits::Make(*session_, *desc, values);
    if (!x.ok()) return x.status();
    auto sum = session_->AllReduceSum(scope, *x);
    if (!sum.ok()) return sum.status();
    if (absl::Status s = sum->completion->Wait(); !s.ok()) return s;
    return Traits::Read(sum->output);
  }

 protected:
  absl::StatusOr<std::unique_ptr<BackendSession>> ReformInner(
      absl::Duration timeout) override {
    auto reformed = Traits::Session::Reform(std::move(session_), timeout);
    if (!reformed.ok()) return reformed.status();
    return std::make_unique<Session<Traits>>(*std::move(reformed));
  }

 private:
  std::unique_ptr<typename Traits::Session> session_;
};

}  // namespace

std::string BackendName(Backend backend) {
  return backend == Backend::kGloo ? "gloo" : "nccl";
}

absl::StatusOr<Backend> ParseBackend(absl::string_view name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("backend \"", name, "\": want gloo or nccl"));
}

absl::StatusOr<std::unique_ptr<BackendSession>> BackendSession::Open(
    Backend backend, const dataplane::DistributedSessionDescriptor& descriptor,
    dataplane::ControlPlane* control_plane, int device) {
  if (backend == Backend::kGloo) {
    auto session = GlooSession::Open(descriptor, control_plane);
    if (!session.ok()) return session.status();
    return std::make_unique<Session<GlooTraits>>(*std::move(session));
  }
  dataplane::nccl::NcclSessionOptions options;
  options.device = device;
  auto session = NcclSession::Open(descriptor, control_plane, options);
  if (!session.ok()) return session.status();
  return std::make_unique<Session<NcclTraits>>(*std::move(session));
}

absl::StatusOr<std::unique_ptr<BackendSession>> BackendSession::Reform(
    std::unique_ptr<BackendSession> ended, absl::Duration timeout) {
  if (ended == nullptr) {
    return absl::InvalidArgumentError("re-forming a null session");
  }
  return ended->ReformInner(timeout);
}

}  // namespace rankd::testing
