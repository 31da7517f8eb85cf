// InProcessJob: an in-memory stand-in for rankd's control plane, for unit
// tests that run several ranks as threads of one process. Each rank gets a
// ControlPlane (ForRank) sharing one key-value map, one all_gather_words
// round sequence and one job health; Fail() fails the job and runs every
// rank's OnJobFailure callbacks, as the daemon's watch stream would.
//
// Epochs (docs/architecture.md, "Epochs and recovery"), as `rankd
// --recovery=on` runs them: Lose(rank) ends the current epoch e (its
// failure callbacks run, its ranks' control planes are fenced: their
// rounds and key-value calls fail with the loss) and moves the job to
// e + 1; Replace(rank) gives the lost rank's replacement process a control
// plane joined at e + 1; a survivor joins it through ControlPlane::Rejoin;
// once every rank joined, the world is whole at e + 1. A key under
// "epoch/<N>/" can be set only by a rank joined at epoch N. Fail() ends
// the job for good, whatever the epoch. Not a model of the daemon beyond
// what the data plane needs. Testonly. Depends on dataplane/control_plane.h
// and absl.
#ifndef RANKD_DATAPLANE_TESTING_IN_PROCESS_CONTROL_PLANE_H_
#define RANKD_DATAPLANE_TESTING_IN_PROCESS_CONTROL_PLANE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/collective_group.h"
#include "dataplane/control_plane.h"
#include "dataplane/session_descriptor.h"

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

  // Ends the current epoch: `rank` is lost with `cause` (an error), the
  // epoch's failure callbacks run (once) and the job moves on to the next
  // epoch, which is whole once every rank joined it (Replace, Rejoin).
  // FailedPrecondition when the job already failed for good or `rank` is
  // outside the world.
  absl::Status Lose(uint32_t rank, const absl::Status& cause);
  // The control plane of `rank`'s replacement process, joined at the
  // current epoch (after Lose). FailedPrecondition while the current epoch
  // is 1 or `rank` already joined it.
  absl::StatusOr<std::unique_ptr<ControlPlane>> Replace(uint32_t rank);
  // The job's current epoch (1 until the first Lose).
  uint64_t epoch() const;
  // Gives Rejoin's descriptor of `rank` these groups (default: none; tests
  // whose sessions have groups set them).
  void SetGroups(uint32_t rank, std::vector<CollectiveGroupDescriptor> groups);
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

  // The job's health at its current epoch.
  absl::Status Health() const;

  // Used by the per-rank control planes, each at the epoch it joined.
  absl::Status Set(uint64_t epoch, const std::string& key,
                   const std::string& value);
  absl::StatusOr<std::string> Get(uint64_t epoch, const std::string& key,
                                  absl::Duration timeout);
  absl::StatusOr<int64_t> Add(uint64_t epoch, const std::string& key,
                              int64_t delta);
  absl::Status HealthAt(uint64_t epoch) const;
  void AddFailureCallback(uint64_t epoch,
                          std::function<void(const absl::Status&)> callback);
  absl::StatusOr<std::vector<uint32_t>> Round(uint64_t epoch, uint32_t rank,
                                              uint64_t round,
                                              std::vector<uint32_t> frame,
                                              absl::Duration timeout);
  // Waits for the job to pass `ended_epoch`, joins `rank` at the current
  // epoch and waits for the world to be whole there (ControlPlane::Rejoin).
  absl::StatusOr<DistributedSessionDescriptor> Rejoin(uint32_t rank,
                                                      uint64_t ended_epoch,
                                                      absl::Duration timeout);
  absl::StatusOr<DistributedSessionDescriptor> DescriptorAt(
      uint32_t rank, uint64_t epoch) const;

 private:
  InProcessJob(uint32_t world_size, std::string name_space)
      : world_size_(world_size), name_space_(std::move(name_space)) {}

  const uint32_t world_size_;
  const std::string name_space_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  int kv_sets_ ABSL_GUARDED_BY(mu_) = 0;
  int kv_gets_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status HealthAtLocked(uint64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when a rank joined at `epoch` may write `key` now.
  absl::Status WritableAt(uint64_t epoch, absl::string_view key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's terminal failure (Fail), whatever the epoch.
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 1;
  // epoch -> why it ended (Lose).
  std::map<uint64_t, absl::Status> ended_ ABSL_GUARDED_BY(mu_);
  // epoch -> ranks joined at it (epoch 1: everyone).
  std::map<uint64_t, std::set<uint32_t>> joined_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::vector<CollectiveGroupDescriptor>> groups_
      ABSL_GUARDED_BY(mu_);
  // (epoch, callback)
  std::vector<std::pair<uint64_t, std::function<void(const absl::Status&)>>>
      callbacks_ ABSL_GUARDED_BY(mu_);
  // (epoch, round) -> rank -> frame
  std::map<std::pair<uint64_t, uint64_t>,
           std::map<uint32_t, std::vector<uint32_t>>>
      rounds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd::dataplane::testing

#endif  // RANKD_DATAPLANE_TESTING_IN_PROCESS_CONTROL_PLANE_H_
