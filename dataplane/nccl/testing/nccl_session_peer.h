// NcclSessionPeer: NcclSession::Open in its two private steps, for tests
// that inspect a session whose initialization failed or has not run yet
// (capabilities stay empty, Unavailable is not poisoning, Initialize runs
// once only, an init bounded by its deadline poisons). Users open sessions
// with NcclSession::Open only. Test-only (target :nccl_session_peer).
#ifndef RANKD_DATAPLANE_NCCL_TESTING_NCCL_SESSION_PEER_H_
#define RANKD_DATAPLANE_NCCL_TESTING_NCCL_SESSION_PEER_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dataplane/nccl/nccl_session.h"

namespace rankd::dataplane::nccl::testing {

class NcclSessionPeer {
 public:
  // A session with no native work done and no capability.
  static absl::StatusOr<std::unique_ptr<NcclSession>> Create(
      DistributedSessionDescriptor descriptor, ControlPlane* control_plane,
      NcclSessionOptions options = {}) {
    return NcclSession::Create(std::move(descriptor), control_plane,
                               std::move(options));
  }
  // The rest of Open: the device probe, the unique ids and every
  // communicator. FailedPrecondition on a second call.
  static absl::Status Initialize(NcclSession& session) {
    return session.Initialize();
  }
};

}  // namespace rankd::dataplane::nccl::testing

#endif  // RANKD_DATAPLANE_NCCL_TESTING_NCCL_SESSION_PEER_H_
