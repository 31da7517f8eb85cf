// The NCCL native layer as the session front sees it (native_layer.h's
// SessionNativeLayer): NcclSession is SessionFront<DeviceTensor,
// NativeLayer>. Each operation is the matching Submit* of nccl_ops.cc on
// the session's stream, under the session's name and scope. Owns the
// session's hold on SessionImpl: destroying the layer detaches it from the
// control plane. Private to dataplane/nccl/. Depends on
// internal/session_impl.h and the engine's headers.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_LAYER_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_LAYER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "dataplane/admission.h"
#include "dataplane/capabilities.h"
#include "dataplane/control_plane.h"
#include "dataplane/nccl/device_tensor.h"
#include "dataplane/nccl/internal/session_impl.h"
#include "dataplane/nccl/nccl_options.h"
#include "dataplane/peer_transfer.h"
#include "dataplane/session.h"
#include "dataplane/session_descriptor.h"
#include "dataplane/value_descriptor.h"

namespace rankd::dataplane::nccl::internal {

class NativeLayer {
 public:
  using Value = DeviceTensor;
  // The communicator and the scope's words ("group 3"), which every
  // message of the operation uses.
  using Scope = ScopedComm;
  using ValueSubmission = DistributedSession<DeviceTensor>::ValueSubmission;
  using ValuesSubmission = DistributedSession<DeviceTensor>::ValuesSubmission;

  // `impl` is not null.
  explicit NativeLayer(std::shared_ptr<SessionImpl> impl);
  // Detaches the session state (SessionImpl::Detach).
  ~NativeLayer();
  NativeLayer(const NativeLayer&) = delete;
  NativeLayer& operator=(const NativeLayer&) = delete;

  const std::shared_ptr<SessionImpl>& impl() const { return impl_; }

  const char* backend_name() const { return kBackendName; }
  const DistributedSessionDescriptor& descriptor() const {
    return impl_->descriptor();
  }
  DistributedCapabilities capabilities() const { return impl_->capabilities(); }
  // The engine's admission (SessionImpl::CommFor), then: FailedPrecondition
  // when the session's stream takes part in a CUDA graph capture (refused
  // before any native work; the session stays usable).
  absl::StatusOr<Scope> Admit(const AdmissionRequest& request);
  size_t MemberCount(const Scope& on) const { return on.comm->members.size(); }
  size_t LocalMember(const Scope& on) const { return on.comm->local_rank; }

  absl::StatusOr<ValueSubmission> AllReduceSum(const Scope& comm,
                                               std::string label,
                                               const DeviceTensor& input,
                                               const DeviceTensor* output);
  absl::StatusOr<ValueSubmission> AllGather(const Scope& comm,
                                            std::string label,
                                            const DeviceTensor& input,
                                            const DeviceTensor* output);
  absl::StatusOr<ValueSubmission> AllToAllV(
      const Scope& comm, std::string label, const DeviceTensor& input,
      absl::Span<const size_t> send_counts,
      absl::Span<const size_t> receive_counts, const DeviceTensor* output);
  absl::StatusOr<ValueSubmission> Send(const Scope& comm, std::string label,
                                       size_t peer, const DeviceTensor& input);
  absl::StatusOr<ValueSubmission> Receive(const Scope& comm, std::string label,
                                          size_t peer,
                                          const ValueDescriptor& descriptor,
                                          const DeviceTensor* output);
  absl::StatusOr<ValuesSubmission> BatchSendReceive(
      const Scope& comm, std::string label,
      absl::Span<const PeerValue<DeviceTensor>> sends,
      absl::Span<const PeerValue<DeviceTensor>> receives);

  ControlPlane* control_plane() { return impl_->control_plane(); }
  absl::Duration words_timeout() const {
    return impl_->options().words_timeout;
  }
  absl::Status poison() const { return impl_->poison(); }
  void Poison(const absl::Status& cause) { impl_->Poison(cause); }
  void Abort(const absl::Status& cause) { impl_->CancelNative(cause); }

 private:
  const std::shared_ptr<SessionImpl> impl_;
};

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_NATIVE_LAYER_H_
