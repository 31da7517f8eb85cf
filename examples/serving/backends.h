// Opening the example's Collectives on a rankd data-plane backend: Gloo
// (host memory over TCP; runs anywhere) or NCCL (CUDA devices). Both take
// the control plane of a joined rankd::Client (MakeClientControlPlane) and
// the descriptor Join returned.
#ifndef RANKD_EXAMPLES_SERVING_BACKENDS_H_
#define RANKD_EXAMPLES_SERVING_BACKENDS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dataplane/control_plane.h"
#include "examples/serving/collectives.h"
#include "rankd/v1/common.pb.h"

namespace rankd::examples {

struct BackendOptions {
  // Gloo: the address this rank's TCP transport listens on (the node's
  // address; 127.0.0.1 on a single machine).
  std::string hostname = "127.0.0.1";
  // Connecting every group (Gloo rendezvous, NCCL communicator init).
  absl::Duration connect_timeout = absl::Seconds(60);
  // Gloo: bound of every native operation.
  absl::Duration op_timeout = absl::Seconds(30);
};

// GlooSession over `control_plane` (which must outlive the result).
absl::StatusOr<std::unique_ptr<Collectives>> OpenGlooCollectives(
    dataplane::ControlPlane* control_plane,
    const v1::SessionDescriptor& descriptor, const BackendOptions& options);

// The number of CUDA devices when this machine can run the NCCL backend (a
// CUDA runtime, NCCL and at least one device); otherwise
// FailedPrecondition saying why, e.g. "--backend=nccl needs a CUDA GPU;
// this machine has none (...). Use --backend=gloo, ...". When
// `runtime_summary` is not null it receives what the NCCL backend loaded
// (CUDA runtime and NCCL files and versions, driver, GPUs:
// dataplane/nccl/native_runtime.h), on one line, either way.
absl::StatusOr<int> NcclDevices(std::string* runtime_summary);

// NcclSession over `control_plane` on the GPU of the rank's index on its
// node (one rank per GPU: a node with more ranks than GPUs fails before any
// communicator exists).
absl::StatusOr<std::unique_ptr<Collectives>> OpenNcclCollectives(
    dataplane::ControlPlane* control_plane,
    const v1::SessionDescriptor& descriptor, const BackendOptions& options);

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_BACKENDS_H_
