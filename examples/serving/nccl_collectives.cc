// The example's Collectives on the NCCL backend: DeviceTensor values on the
// rank's GPU; a Matrix is copied to the device before each operation and
// back after it (the example's model runs on the host). Without a CUDA
// build or device, NcclAvailable() says why and nothing is opened.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/descriptor_proto.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/native_runtime.h"
#include "dataplane/nccl/nccl_session.h"
#include "examples/serving/backends.h"
#include "examples/serving/session_collectives.h"

namespace rankd::examples {
namespace {

using dataplane::nccl::DeviceTensor;
using dataplane::nccl::NcclSession;

struct DeviceCodec {
  static absl::StatusOr<DeviceTensor> Upload(NcclSession& session,
                                             const Matrix& m) {
    auto descriptor = MatrixDescriptor(m.rows, m.cols);
    if (!descriptor.ok()) return descriptor.status();
    return DeviceTensor::FromHost(*descriptor, m.values.data(),
                                  m.values.size() * sizeof(float),
                                  session.stream());
  }
  static absl::StatusOr<Matrix> Download(const DeviceTensor& t, size_t cols) {
    auto values = t.ToHostVector<float>();
    if (!values.ok()) return values.status();
    Matrix m;
    m.cols = cols;
    m.rows = values->size() / cols;
    m.values = *std::move(values);
    return m;
  }
};

}  // namespace

absl::StatusOr<int> NcclDevices(std::string* runtime_summary) {
  const dataplane::nccl::NativeRuntimeReport report =
      dataplane::nccl::DescribeNativeRuntime();
  if (runtime_summary != nullptr) *runtime_summary = report.Summary();
  if (report.gpus.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--backend=nccl needs a CUDA GPU; this machine has none (",
        report.device_reason.empty() ? "no CUDA device" : report.device_reason,
        "). Use --backend=gloo, which runs the same job on the CPU."));
  }
  if (!report.nccl_loaded()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--backend=nccl needs NCCL: ", report.nccl_error));
  }
  return static_cast<int>(report.gpus.size());
}

absl::StatusOr<std::unique_ptr<Collectives>> OpenNcclCollectives(
    dataplane::ControlPlane* control_plane,
    const v1::SessionDescriptor& descriptor, const BackendOptions& options) {
  if (auto devices = NcclDevices(nullptr); !devices.ok()) {
    return devices.status();
  }
  auto converted = dataplane::DescriptorFromProto(descriptor);
  if (!converted.ok()) return converted.status();
  dataplane::nccl::NcclSessionOptions nccl;
  nccl.tag = "serving";
  nccl.init_timeout = options.connect_timeout;
  nccl.op_timeout = options.op_timeout;
  auto session =
      NcclSession::Open(*std::move(converted), control_plane, std::move(nccl));
  if (!session.ok()) return session.status();
  return std::unique_ptr<Collectives>(
      new SessionCollectives<NcclSession, DeviceCodec>("nccl",
                                                       *std::move(session)));
}

}  // namespace rankd::examples
