// FakeJob: an in-process stand-in for rankd's control plane, shared by
// several simulated ranks of one process (tests only). It implements the
// ControlPlane interface per rank: a key-value broker with blocking gets,
// all_gather_words rounds (synchronous and bounded), job health and failure
// callbacks, and a namespace. Fail() injects a job failure the way the
// daemon's watch stream reports a lost rank.
#ifndef RANKD_DATAPLANE_NCCL_FAKE_CONTROL_PLANE_H_
#define RANKD_DATAPLANE_NCCL_FAKE_CONTROL_PLANE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/control_plane.h"

namespace rankd::dataplane::nccl::testing {

class FakeJob : public std::enable_shared_from_this<FakeJob> {
 public:
  static std::shared_ptr<FakeJob> Create(uint32_t world_size,
                                         std::string ns = "fakejob/1");

  // The control plane of `rank` (each keeps its own round numbering).
  std::unique_ptr<ControlPlane> ControlPlaneFor(uint32_t rank);

  // Fails the job: JobHealth() returns `cause`, pending and later waits fail
  // with it, and every registered failure callback runs (once).
  void Fail(const absl::Status& cause);

  std::optional<std::string> Get(const std::string& key) const;
  std::vector<std::string> Keys() const;
  int kv_sets() const;
  int kv_gets() const;
  uint32_t world_size() const { return world_size_; }
  const std::string& ns() const { return ns_; }

 private:
  friend class FakeControlPlane;
  FakeJob(uint32_t world_size, std::string ns)
      : world_size_(world_size), ns_(std::move(ns)) {}

  const uint32_t world_size_;
  const std::string ns_;
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  int kv_sets_ ABSL_GUARDED_BY(mu_) = 0;
  int kv_gets_ ABSL_GUARDED_BY(mu_) = 0;
  // round -> frames by rank
  std::map<uint64_t, std::map<uint32_t, std::vector<uint32_t>>> rounds_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const absl::Status&)>> callbacks_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd::dataplane::nccl::testing

#endif  // RANKD_DATAPLANE_NCCL_FAKE_CONTROL_PLANE_H_
