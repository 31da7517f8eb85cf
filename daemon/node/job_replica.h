// JobReplica: one daemon's copy of the job's membership and state, built
// from the coordinator's events, so that every daemon can answer admin
// queries (rankctl status, members, topology) even when the coordinator is
// gone.
//
// A value type, not thread-safe: NodeAgent holds it under its lock. An
// event that names a rank or node outside the job changes nothing (the
// coordinator is authenticated, but a malformed event must never crash a
// daemon). Depends on job_spec.h and the protos.
#ifndef RANKD_DAEMON_JOB_REPLICA_H_
#define RANKD_DAEMON_JOB_REPLICA_H_

#include <cstdint>
#include <vector>

#include "daemon/coordinator/job_spec.h"
#include "rankd/v1/admin.pb.h"

namespace rankd {

class JobReplica {
 public:
  struct Member {
    v1::MemberState state = v1::MEMBER_STATE_NOT_JOINED;
    uint32_t node_index = 0;
    v1::MemberDetails details;  // from its MEMBER_JOINED event
  };

  // Every rank NOT_JOINED on its default node, every node NOT_REGISTERED,
  // the job FORMING.
  explicit JobReplica(const JobSpec& spec);

  // Applies one of the coordinator's events: member and node states,
  // joined members' details, registered nodes' info, the job's state
  // (READY from FORMING or RECOVERING; RECOVERING unless FAILED or
  // COMPLETED; COMPLETED unless FAILED; FAILED) and its epoch (the highest
  // an event named).
  void Apply(const v1::JobEvent& event);
  // The job failed as this daemon saw it (the coordinator was lost).
  void MarkFailed() { job_state_ = v1::JOB_STATE_FAILED; }

  v1::JobState job_state() const { return job_state_; }
  // The job's epoch as the events told it (1 before any named one).
  uint64_t epoch() const { return epoch_; }

  // Recovery by domain (docs/contract.md, "Data-parallel domains"), as the
  // DOMAIN_* events told it: on from the first such event.
  struct Domain {
    bool recovering = false;
    uint64_t epoch = 1;
    uint64_t first_world_round = 1;  // 0 while recovering
  };
  bool by_domain() const { return by_domain_; }
  // The domain of `rank` (< world_size()).
  uint32_t domain_of(uint32_t rank) const { return rank / domain_size_; }
  const Domain& domain(uint32_t index) const { return domains_[index]; }
  // The epoch `rank` (< world_size()) must act in: its domain's once
  // recovery by domain showed, else the job's.
  uint64_t EpochOfRank(uint32_t rank) const {
    return by_domain_ ? domains_[domain_of(rank)].epoch : epoch_;
  }
  uint32_t world_size() const { return static_cast<uint32_t>(members_.size()); }
  uint32_t nnodes() const { return static_cast<uint32_t>(nodes_.size()); }
  // `rank` < world_size().
  const Member& member(uint32_t rank) const { return members_[rank]; }
  // `node` < nnodes(). Info is empty until the node registered.
  v1::NodeState node_state(uint32_t node) const { return nodes_[node]; }
  const v1::NodeInfo& node_info(uint32_t node) const {
    return node_info_[node];
  }
  // Ranks that joined at some point (any state but NOT_JOINED).
  uint32_t joined_ranks() const;
  // Nodes that registered at some point.
  uint32_t registered_nodes() const;

 private:
  void SetRanks(const v1::JobEvent& event, v1::MemberState state);
  void SetNode(const v1::JobEvent& event, v1::NodeState state);

  std::vector<Member> members_;
  std::vector<v1::NodeState> nodes_;
  std::vector<v1::NodeInfo> node_info_;
  v1::JobState job_state_ = v1::JOB_STATE_FORMING;
  uint64_t epoch_ = 1;
  const uint32_t domain_size_;
  bool by_domain_ = false;
  std::vector<Domain> domains_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_JOB_REPLICA_H_
