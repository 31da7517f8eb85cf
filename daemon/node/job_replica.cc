#include "daemon/node/job_replica.h"

#include <algorithm>

namespace rankd {

JobReplica::JobReplica(const JobSpec& spec)
    : members_(spec.world_size),
      nodes_(spec.nnodes, v1::NODE_STATE_NOT_REGISTERED),
      node_info_(spec.nnodes),
      domain_size_(DomainSizeOf(spec.topology)),
      domains_(std::max<uint32_t>(1, spec.world_size / domain_size_)) {
  for (uint32_t r = 0; r < spec.world_size; ++r) {
    members_[r].node_index = spec.DefaultNodeOf(r);
  }
}

void JobReplica::SetRanks(const v1::JobEvent& event, v1::MemberState state) {
  for (uint32_t r : event.ranks()) {
    if (r >= members_.size()) continue;
    members_[r].state = state;
    if (event.has_node_index() && event.node_index() < nodes_.size()) {
      members_[r].node_index = event.node_index();
    }
  }
}

void JobReplica::SetNode(const v1::JobEvent& event, v1::NodeState state) {
  if (event.has_node_index() && event.node_index() < nodes_.size()) {
    nodes_[event.node_index()] = state;
  }
}

void JobReplica::Apply(const v1::JobEvent& event) {
  // Epochs only grow (an event from an older coordinator names none).
  if (event.epoch() > epoch_) epoch_ = event.epoch();
  switch (event.kind()) {
    case v1::EVENT_KIND_MEMBER_JOINED:
      SetRanks(event, v1::MEMBER_STATE_JOINED);
      if (event.members_size() == event.ranks_size()) {
        for (int i = 0; i < event.ranks_size(); ++i) {
          if (event.ranks(i) >= members_.size()) continue;
          Member& m = members_[event.ranks(i)];
          m.details = event.members(i);
          // A join storm's event spans nodes: each member names its own.
          if (m.details.has_node_index() &&
              m.details.node_index() < nodes_.size()) {
            m.node_index = m.details.node_index();
          }
        }
      } else if (event.has_member() && event.ranks_size() == 1 &&
                 event.ranks(0) < members_.size()) {
        // From a coordinator that sends one rank per event, without
        // `members`.
        members_[event.ranks(0)].details = event.member();
      }
      break;
    case v1::EVENT_KIND_MEMBER_LEFT:
      SetRanks(event, v1::MEMBER_STATE_LEFT);
      // As the coordinator: a job a rank left serves no more rounds
      // (JOB_COMPLETED follows once every rank left).
      if (job_state_ == v1::JOB_STATE_READY ||
          job_state_ == v1::JOB_STATE_FORMING ||
          job_state_ == v1::JOB_STATE_RECOVERING) {
        job_state_ = v1::JOB_STATE_DRAINING;
      }
      break;
    case v1::EVENT_KIND_MEMBER_LOST:
      SetRanks(event, v1::MEMBER_STATE_LOST);
      break;
    case v1::EVENT_KIND_NODE_REGISTERED:
      SetNode(event, v1::NODE_STATE_REGISTERED);
      if (event.has_node() && event.has_node_index() &&
          event.node_index() < node_info_.size()) {
        node_info_[event.node_index()] = event.node();
      }
      break;
    case v1::EVENT_KIND_NODE_LOST:
      SetNode(event, v1::NODE_STATE_LOST);
      SetRanks(event, v1::MEMBER_STATE_LOST);
      break;
    case v1::EVENT_KIND_NODE_LEFT:
      SetNode(event, v1::NODE_STATE_LEFT);
      break;
    case v1::EVENT_KIND_JOB_READY:
      if (job_state_ == v1::JOB_STATE_FORMING ||
          job_state_ == v1::JOB_STATE_RECOVERING) {
        job_state_ = v1::JOB_STATE_READY;
      }
      break;
    case v1::EVENT_KIND_JOB_RECOVERING:
      if (job_state_ != v1::JOB_STATE_FAILED &&
          job_state_ != v1::JOB_STATE_COMPLETED) {
        job_state_ = v1::JOB_STATE_RECOVERING;
      }
      break;
    case v1::EVENT_KIND_JOB_COMPLETED:
      if (job_state_ != v1::JOB_STATE_FAILED) {
        job_state_ = v1::JOB_STATE_COMPLETED;
      }
      break;
    case v1::EVENT_KIND_JOB_FAILED:
      job_state_ = v1::JOB_STATE_FAILED;
      break;
    case v1::EVENT_KIND_DOMAIN_RECOVERING:
    case v1::EVENT_KIND_DOMAIN_READY: {
      if (!event.has_domain() || event.domain() >= domains_.size()) break;
      by_domain_ = true;
      Domain& d = domains_[event.domain()];
      if (event.epoch() < d.epoch) break;  // an older one, replayed
      d.epoch = event.epoch();
      d.recovering = event.kind() == v1::EVENT_KIND_DOMAIN_RECOVERING;
      d.first_world_round = d.recovering ? 0 : event.first_world_round();
      // The job's state follows its domains': READY while one serves.
      if (job_state_ == v1::JOB_STATE_READY ||
          job_state_ == v1::JOB_STATE_RECOVERING) {
        bool serving = false;
        for (const Domain& other : domains_) {
          serving = serving || !other.recovering;
        }
        job_state_ = serving ? v1::JOB_STATE_READY : v1::JOB_STATE_RECOVERING;
      }
      break;
    }
    default:
      break;
  }
}

uint32_t JobReplica::joined_ranks() const {
  uint32_t joined = 0;
  for (const Member& m : members_) {
    if (m.state != v1::MEMBER_STATE_NOT_JOINED) ++joined;
  }
  return joined;
}

uint32_t JobReplica::registered_nodes() const {
  uint32_t registered = 0;
  for (v1::NodeState s : nodes_) {
    if (s != v1::NODE_STATE_NOT_REGISTERED) ++registered;
  }
  return registered;
}

}  // namespace rankd
