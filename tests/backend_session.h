// BackendSession: one rank's data-plane session on Gloo or on NCCL, as the
// recovery tests with real daemons drive it (tests/domain_session_test.cc
// and its rank process tests/reform_rank.cc), so that one test body runs on
// either backend. It opens from the descriptor of a Join answer, sums host
// float vectors on a scope (on NCCL through device tensors on the session's
// stream: uploaded, summed, downloaded) and re-forms after a loss with the
// backend's own Reform. Nothing else of the sessions is hidden: descriptor,
// capabilities and poison are the backend's.
//
// Without a GPU the NCCL backend runs only against the CPU stand-in
// (//dataplane/nccl:libcuda_nccl_standin.so, named in $RANKD_CUDART_LIBRARY
// and $RANKD_NCCL_LIBRARY): a test-only imitation that checks rankd's
// sequencing, never the proof that the GPU path works (tests/gpu/ is).
//
// Testonly. Depends on the data plane (dataplane/gloo, dataplane/nccl and
// the contract's headers) and absl; never on the daemon or the client.
#ifndef RANKD_TESTS_BACKEND_SESSION_H_
#define RANKD_TESTS_BACKEND_SESSION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "dataplane/capabilities.h"
#include "dataplane/collective_scope.h"
#include "dataplane/control_plane.h"
#include "dataplane/session_descriptor.h"

namespace rankd::testing {

enum class Backend { kGloo, kNccl };

// "gloo" or "nccl", as the backends name themselves in their messages.
std::string BackendName(Backend backend);
// The inverse of BackendName; InvalidArgument for any other name.
absl::StatusOr<Backend> ParseBackend(absl::string_view name);

class BackendSession {
 public:
  virtual ~BackendSession() = default;

  // Opens `descriptor`'s session on `backend` through `control_plane`
  // (which must outlive it) with the backend's default options, except
  // that an NCCL session runs on CUDA device `device` (-1: the backend's
  // default device rule). The backend's Open errors (NCCL: Unavailable
  // without a CUDA device or its libraries).
  static absl::StatusOr<std::unique_ptr<BackendSession>> Open(
      Backend backend,
      const dataplane::DistributedSessionDescriptor& descriptor,
      dataplane::ControlPlane* control_plane, int device = -1);

  // The backend's Reform (GlooSession::Reform, NcclSession::Reform): takes
  // `ended` in every case and returns the next epoch's session on the same
  // backend (and device), or Reform's error.
  static absl::StatusOr<std::unique_ptr<BackendSession>> Reform(
      std::unique_ptr<BackendSession> ended, absl::Duration timeout);

  virtual Backend backend() const = 0;
  virtual const dataplane::DistributedSessionDescriptor& descriptor() const = 0;
  virtual dataplane::DistributedCapabilities capabilities() const = 0;
  // OK while healthy; once poisoned, the first cause.
  virtual absl::Status poison() const = 0;

  // All-reduces `values` (f32[values.size()]) on `scope` and waits for the
  // completion, unbounded (the session's own operation deadline bounds
  // it); the sums, or the submission's or the completion's error.
  virtual absl::StatusOr<std::vector<float>> Sum(
      const dataplane::CollectiveScope& scope,
      const std::vector<float>& values) = 0;

 protected:
  // Reform's backend half: hands the backend's session to the backend's
  // Reform, leaving this one empty (Reform then discards it).
  virtual absl::StatusOr<std::unique_ptr<BackendSession>> ReformInner(
      absl::Duration timeout) = 0;
};

}  // namespace rankd::testing

#endif  // RANKD_TESTS_BACKEND_SESSION_H_
