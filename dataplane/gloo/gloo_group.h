// GlooGroup and GlooRoute: the Gloo backend's CommunicationGroup and
// CommunicationRoute. A GlooGroup is one collective group this rank belongs
// to (the world, or a group of the session descriptor) with its connected
// Gloo context; a group of one member has no context and its operations are
// local copies. A GlooRoute is a directed source -> destination pair of
// world ranks within one group, the unit of ordered send/receive bundles.
// Both are created by the backend (GlooBackend::group / Route) and are only
// valid with the backend that made them.
//
// A backend with several executors connects every group once per executor
// ("lane"): the group the backend hands out is lane 0 and holds the other
// lanes, each a GlooGroup of the same members with its own Gloo context and
// counters; an operation runs on OnLane(executor.lane()). Lanes never share
// a context, so their traffic cannot pair across executors.
//
// The sequence counters are touched only by their lane's executor thread,
// so every member numbers the same operations alike; the Gloo tag (or slot) of
// an operation mixes its sequence number with a fingerprint of what it is
// (agreement_check.h), so members that submit different operations never
// pair their messages.
// Depends on dataplane/collective_group.h and absl; Gloo types are only forward
// declared.
#ifndef RANKD_DATAPLANE_GLOO_GLOO_GROUP_H_
#define RANKD_DATAPLANE_GLOO_GLOO_GROUP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/collective_group.h"
#include "dataplane/sequence_numbers.h"

namespace gloo {
class Context;
}

namespace rankd::dataplane::gloo {

class GlooGroup : public std::enable_shared_from_this<GlooGroup> {
 public:
  // `owner` identifies the communicator that made the group.
  GlooGroup(const void* owner, CollectiveGroupId id, bool is_world,
            std::vector<uint32_t> members, uint32_t local_rank,
            std::shared_ptr<::gloo::Context> context, uint32_t lane = 0);

  // Lane 0 only, while the communicator connects: adds lane lanes().size()+1
  // over `context`.
  void AddLane(std::shared_ptr<::gloo::Context> context);
  // This group (lane 0, the one the backend hands out) on executor lane
  // `lane`: itself for lane 0, null past the last lane or when called on a
  // lane other than 0.
  std::shared_ptr<GlooGroup> OnLane(uint32_t lane);
  // The lanes after lane 0 (for the communicator's abort; operations take
  // lane 0 groups only).
  const std::vector<std::shared_ptr<GlooGroup>>& lanes() const {
    return lanes_;
  }
  uint32_t lane() const { return lane_; }

  CollectiveGroupId id() const { return id_; }
  bool is_world() const { return is_world_; }
  const std::vector<uint32_t>& members() const { return members_; }
  uint32_t local_rank() const { return local_rank_; }
  uint32_t rank() const { return members_[local_rank_]; }
  uint32_t size() const { return static_cast<uint32_t>(members_.size()); }
  // The index of `world_rank` in members(), if it is a member.
  std::optional<uint32_t> IndexOf(uint32_t world_rank) const;
  // "world" or "group 3" (lanes after 0 add " on executor 2").
  std::string ToString() const;
  // What mismatch diagnoses key its records by: "world", "g3", "g3.e2".
  std::string ScopeKey() const;

  // The connected Gloo context; null for a one-member group.
  const std::shared_ptr<::gloo::Context>& context() const { return context_; }
  const void* owner() const { return owner_; }

  // Executor thread only: the sequence number of the next collective on this
  // group (the same on every member that submitted the same work).
  uint32_t NextSequence() { return sequence_.NextCollective(); }
  // Executor thread only: the next sequence number on the directed route
  // between member indices `source` and `destination`.
  uint32_t NextRouteSequence(uint32_t source, uint32_t destination) {
    return sequence_.NextTransfer(source, destination);
  }

 private:
  const void* const owner_;
  const CollectiveGroupId id_;
  const bool is_world_;
  const std::vector<uint32_t> members_;
  const uint32_t local_rank_;
  const std::shared_ptr<::gloo::Context> context_;
  const uint32_t lane_;
  std::vector<std::shared_ptr<GlooGroup>> lanes_;  // lane 0 only
  SequenceNumbers sequence_;
};

class GlooRoute {
 public:
  GlooRoute(std::shared_ptr<GlooGroup> group, uint32_t source_index,
            uint32_t destination_index)
      : group_(std::move(group)),
        source_index_(source_index),
        destination_index_(destination_index) {}

  const std::shared_ptr<GlooGroup>& group() const { return group_; }
  // World ranks.
  uint32_t source() const { return group_->members()[source_index_]; }
  uint32_t destination() const { return group_->members()[destination_index_]; }
  // Member indices within the group.
  uint32_t source_index() const { return source_index_; }
  uint32_t destination_index() const { return destination_index_; }
  // "route 2->4 in group 3".
  std::string ToString() const;

 private:
  std::shared_ptr<GlooGroup> group_;
  uint32_t source_index_;
  uint32_t destination_index_;
};

}  // namespace rankd::dataplane::gloo

#endif  // RANKD_DATAPLANE_GLOO_GLOO_GROUP_H_
