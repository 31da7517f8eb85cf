// InProcessJob: an in-memory stand-in for rankd's control plane, for unit
// tests that run several ranks as threads of one process. Each rank gets a
// ControlPlane (ForRank) sharing one key-value map, one all_gather_words
// round sequence and one job health; Fail() fails the job and runs every
// rank's OnJobFailure callbacks, as the daemon's watch stream would. Not a
// model of the daemon beyond what the data plane needs. Testonly. Depends on
// dataplane/control_plane.h and absl.
#ifndef RANKD_DATAPLANE_TESTING_IN_PROCESS_CONTROL_PLANE_H_
#define RANKD_DATAPLANE_TESTING_IN_PROCESS_CONTROL_PLANE_H_

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

namespace rankd::dataplane::testing {

class InProcessJob : public std::enable_shared_from_this<InProcessJob> {
 public:
  static std::shared_ptr<InProcessJob> Create(uint32_t world_size,
                                              std::string name_space = "job@1");

  // The control plane of `rank`; the job outlives it through shared
  // ownership.
  std::unique_ptr<ControlPlane> ForRank(uint32_t rank);

  // Fails the job with `cause` and runs every registered callback (once).
  void Fail(const absl::Status& cause);
  // Fails the job without running the callbacks: only JobHealth() polls
  // see it (as before a watch stream delivered the failure).
  void FailWithoutNotice(const absl::Status& cause);

  uint32_t world_size() const { return world_size_; }
  const std::string& name_space() const { return name_space_; }
  // Keys set so far (for tests of the store's prefixes).
  std::vector<std::string> Keys() const;
  // The value of `key` now, without waiting (nullopt when unset).
  std::optional<std::string> Peek(const std::string& key) const;
  // Key-value sets and gets made so far, by every rank (for tests that a
  // path makes no control-plane traffic).
  int kv_sets() const;
  int kv_gets() const;

  // Used by the per-rank control planes.
  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout);
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  absl::Status Health() const;
  void AddFailureCallback(std::function<void(const absl::Status&)> callback);
  absl::StatusOr<std::vector<uint32_t>> Round(uint32_t rank, uint64_t round,
                                              std::vector<uint32_t> frame,
                                              absl::Duration timeout);

 private:
  InProcessJob(uint32_t world_size, std::string name_space)
      : world_size_(world_size), name_space_(std::move(name_space)) {}

  const uint32_t world_size_;
  const std::string name_space_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  int kv_sets_ ABSL_GUARDED_BY(mu_) = 0;
  int kv_gets_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const absl::Status&)>> callbacks_
      ABSL_GUARDED_BY(mu_);
  // round -> rank -> frame
  std::map<uint64_t, std::map<uint32_t, std::vector<uint32_t>>> rounds_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd::dataplane::testing

#endif  // RANKD_DATAPLANE_TESTING_IN_PROCESS_CONTROL_PLANE_H_
