// GlooTestCluster: several Gloo sessions of one job as threads of the test
// process, over an InProcessJob control plane and real Gloo TCP connections
// on 127.0.0.1. Construction connects every rank concurrently (each
// session's creation blocks on the others). Testonly. Depends on
// dataplane/gloo, in_process_control_plane.h and absl.
#ifndef RANKD_DATAPLANE_TESTING_GLOO_TEST_CLUSTER_H_
#define RANKD_DATAPLANE_TESTING_GLOO_TEST_CLUSTER_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/topology.h"
#include "dataplane/gloo/gloo_session.h"
#include "dataplane/testing/in_process_control_plane.h"

namespace rankd::dataplane::gloo::testing {

using ::rankd::dataplane::testing::InProcessJob;

class GlooTestCluster {
 public:
  // With `recovery_by_domain`, each rank's descriptor is confined to its
  // data-parallel domain of `topology` (session_descriptor.h's
  // recovery_domain()), as under the daemons' --recovery=domain.
  GlooTestCluster(ParallelTopology topology, uint32_t world_size,
                  GlooSessionOptions options = DefaultOptions(),
                  bool recovery_by_domain = false);
  // Rank r's session gets `per_rank[r]` (one entry per rank): for tests of
  // members whose options differ.
  GlooTestCluster(ParallelTopology topology,
                  std::vector<GlooSessionOptions> per_rank,
                  bool recovery_by_domain = false);

  // Short timeouts so failing tests fail fast.
  static GlooSessionOptions DefaultOptions();

  // OK when every rank connected; otherwise the first error.
  const absl::Status& status() const { return status_; }
  uint32_t world_size() const { return world_size_; }
  InProcessJob& job() { return *job_; }
  GlooSession& session(uint32_t rank) { return *sessions_[rank]; }
  // Destroys one rank's session (as its process exiting would).
  void DestroySession(uint32_t rank) { sessions_[rank].reset(); }

  // Runs fn(rank) on one thread per rank and joins them.
  void Run(const std::function<void(uint32_t rank)>& fn);

 private:
  const uint32_t world_size_;
  std::shared_ptr<InProcessJob> job_;
  std::vector<std::unique_ptr<ControlPlane>> control_planes_;
  std::vector<std::unique_ptr<GlooSession>> sessions_;
  absl::Status status_;
};

}  // namespace rankd::dataplane::gloo::testing

#endif  // RANKD_DATAPLANE_TESTING_GLOO_TEST_CLUSTER_H_
