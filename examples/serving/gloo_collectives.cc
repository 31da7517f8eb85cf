// The example's Collectives on the Gloo backend: HostTensor values, so
// uploading and downloading a Matrix are plain copies.
#include <cstring>
#include <memory>
#include <utility>

#include "dataplane/descriptor_proto.h"
#include "dataplane/gloo/gloo_options.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/host_tensor.h"
#include "examples/serving/backends.h"
#include "examples/serving/session_collectives.h"

namespace rankd::examples {
namespace {

using dataplane::HostTensor;
using dataplane::gloo::GlooSession;

struct HostCodec {
  static absl::StatusOr<HostTensor> Upload(GlooSession&, const Matrix& m) {
    return HostTensor::FromRows<float>(m.rows, {m.cols}, m.values);
  }
  static absl::StatusOr<Matrix> Download(const HostTensor& t, size_t cols) {
    auto values = t.Values<float>();
    if (!values.ok()) return values.status();
    Matrix m;
    m.cols = cols;
    m.rows = values->size() / cols;
    m.values.assign(values->begin(), values->end());
    return m;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collectives>> OpenGlooCollectives(
    dataplane::ControlPlane* control_plane,
    const v1::SessionDescriptor& descriptor, const BackendOptions& options) {
  dataplane::gloo::GlooSessionOptions gloo;
  gloo.hostname = options.hostname;
  gloo.connect_timeout = options.connect_timeout;
  gloo.op_timeout = options.op_timeout;
  auto converted = dataplane::DescriptorFromProto(descriptor);
  if (!converted.ok()) return converted.status();
  auto session = GlooSession::Open(*converted, control_plane, gloo);
  if (!session.ok()) return session.status();
  return std::unique_ptr<Collectives>(
      new SessionCollectives<GlooSession, HostCodec>("gloo",
                                                     *std::move(session)));
}

}  // namespace rankd::examples
