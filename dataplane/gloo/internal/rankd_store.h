// RankdStore: Gloo's rendezvous store (::gloo::rendezvous::Store) on the rankd
// key-value broker, reached through the data plane's ControlPlane. Every key
// is prefixed "gloo/<namespace>/<group>/" so that jobs, job incarnations,
// session instances and groups never see each other's keys. Reads block
// until the key is set, bounded by a deadline, or until the job fails (a
// loss ending the store's epoch while a session connects: the broker's own
// wait would outlast it; JobHealth is checked every
// kRendezvousHealthEvery).
//
// Given the group's members, a key Gloo names after a member ("<i>",
// "<i>/<j>", "rank_<i>": member i's addresses) is also that member's own
// key (OwnedKey, "r<world rank>/gloo/..."), so no other rank can publish
// or replace a member's address (docs/operations.md, "Key-value
// ownership"). Without members (a store for the caller's own contexts)
// keys belong to whoever creates them first.
//
// Gloo's store interface can only report errors by throwing, so failures
// (deadline passed, job failed, broker unreachable) are thrown as
// ::gloo::IoException whose message names the key and carries the broker's
// status; callers catch them (see session_impl.cc). Thread-safe (a
// MeshContext's pair connects share one) when the control plane is. Depends on
// Gloo's store header, dataplane/control_plane.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_RANKD_STORE_H_
#define RANKD_DATAPLANE_GLOO_RANKD_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/control_plane.h"
#include "gloo/rendezvous/store.h"

namespace rankd::dataplane::gloo::internal {

// How often a read waiting for a key checks the job's health.
inline constexpr absl::Duration kRendezvousHealthEvery =
    absl::Milliseconds(200);

class RankdStore final : public ::gloo::rendezvous::Store {
 public:
  // The key prefix of `group` (a group id, or "world") in session
  // `instance` of the job incarnation `name_space`:
  // "gloo/<namespace>/<group>/", with "i<instance>/" before the group when
  // instance is not zero.
  static std::string Prefix(absl::string_view name_space, uint32_t instance,
                            absl::string_view group);

  // `control_plane` must outlive the store. `timeout` bounds get() and
  // wait() (wait's own timeout applies when shorter). `members` are the
  // world ranks of the context's members, in its order (empty: unknown).
  // Keys live under job epoch `epoch` (EpochKey in control_plane.h).
  RankdStore(ControlPlane* control_plane, std::string prefix,
             absl::Duration timeout, std::vector<uint32_t> members = {},
             uint64_t epoch = 1);

  // The broker key of Gloo's `key`: prefix() + key, owned by the member
  // the key names when members are known, under the store's epoch.
  std::string FullKey(absl::string_view key) const;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  const std::string& prefix() const { return prefix_; }

 private:
  // AwaitKey (control_plane.h) for `full`, at most `bound` (DeadlineExceeded
  // naming the key), in slices of kRendezvousHealthEvery: the job's failure
  // (JobHealth) as soon as it shows between slices.
  absl::StatusOr<std::string> Await(const std::string& full,
                                    absl::Duration bound);

  // Values wait() read, for the get() Gloo issues right after it: one
  // broker round trip per key instead of two (a full-mesh connect waits for
  // and then reads every member's addresses).
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> fetched_ ABSL_GUARDED_BY(mu_);
  ControlPlane* const control_plane_;
  const std::string prefix_;
  const absl::Duration timeout_;
  const std::vector<uint32_t> members_;
  const uint64_t epoch_;
};

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_RANKD_STORE_H_
