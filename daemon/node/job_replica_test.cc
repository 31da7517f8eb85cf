// JobReplica: the job's membership as a daemon sees it from the
// coordinator's events, and events that name no rank or node of the job.
#include "daemon/node/job_replica.h"

#include "gtest/gtest.h"

namespace rankd {
namespace {

JobSpec TwoByTwo() {
  JobSpec spec;
  spec.job_id = "j";
  spec.world_size = 4;
  spec.nnodes = 2;
  spec.nproc_per_node = 2;
  return spec;
}

v1::JobEvent Event(v1::EventKind kind, std::vector<uint32_t> ranks = {},
                   std::optional<uint32_t> node = std::nullopt) {
  v1::JobEvent event;
  event.set_kind(kind);
  for (uint32_t r : ranks) event.add_ranks(r);
  if (node.has_value()) event.set_node_index(*node);
  return event;
}

TEST(JobReplicaTest, StartsFormingWithEveryRankOnItsDefaultNode) {
  JobReplica replica(TwoByTwo());
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_FORMING);
  ASSERT_EQ(replica.world_size(), 4u);
  ASSERT_EQ(replica.nnodes(), 2u);
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(replica.member(r).state, v1::MEMBER_STATE_NOT_JOINED);
    EXPECT_EQ(replica.member(r).node_index, r / 2);
  }
  EXPECT_EQ(replica.node_state(1), v1::NODE_STATE_NOT_REGISTERED);
  EXPECT_EQ(replica.joined_ranks(), 0u);
  EXPECT_EQ(replica.registered_nodes(), 0u);
}

TEST(JobReplicaTest, FollowsMembersNodesAndTheJob) {
  JobReplica replica(TwoByTwo());
  v1::JobEvent registered = Event(v1::EVENT_KIND_NODE_REGISTERED, {}, 1);
  registered.mutable_node()->set_hostname("node-b");
  replica.Apply(registered);
  EXPECT_EQ(replica.node_state(1), v1::NODE_STATE_REGISTERED);
  EXPECT_EQ(replica.node_info(1).hostname(), "node-b");
  EXPECT_EQ(replica.registered_nodes(), 1u);

  v1::JobEvent joined = Event(v1::EVENT_KIND_MEMBER_JOINED, {3}, 1);
  joined.mutable_member()->set_pid(4242);
  replica.Apply(joined);
  EXPECT_EQ(replica.member(3).state, v1::MEMBER_STATE_JOINED);
  EXPECT_EQ(replica.member(3).details.pid(), 4242u);
  EXPECT_EQ(replica.joined_ranks(), 1u);

  replica.Apply(Event(v1::EVENT_KIND_JOB_READY));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_READY);
  replica.Apply(Event(v1::EVENT_KIND_MEMBER_LEFT, {3}, 1));
  EXPECT_EQ(replica.member(3).state, v1::MEMBER_STATE_LEFT);
  EXPECT_EQ(replica.joined_ranks(), 1u) << "a rank that left had joined";
  // As on the coordinator: with a rank gone no round can complete.
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_DRAINING);

  // A lost node loses the ranks the event names.
  replica.Apply(Event(v1::EVENT_KIND_MEMBER_JOINED, {2}, 1));
  replica.Apply(Event(v1::EVENT_KIND_NODE_LOST, {2}, 1));
  EXPECT_EQ(replica.node_state(1), v1::NODE_STATE_LOST);
  EXPECT_EQ(replica.member(2).state, v1::MEMBER_STATE_LOST);

  replica.Apply(Event(v1::EVENT_KIND_JOB_FAILED));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_FAILED);
  replica.Apply(Event(v1::EVENT_KIND_JOB_COMPLETED));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_FAILED) << "failure sticks";
  replica.Apply(Event(v1::EVENT_KIND_JOB_READY));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_FAILED);
}

TEST(JobReplicaTest, CompletedUnlessFailedAndMarkFailed) {
  JobReplica replica(TwoByTwo());
  replica.Apply(Event(v1::EVENT_KIND_MEMBER_LEFT, {0}, 0));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_DRAINING);
  replica.Apply(Event(v1::EVENT_KIND_JOB_COMPLETED));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_COMPLETED);
  replica.MarkFailed();
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_FAILED);
}

TEST(JobReplicaTest, OneEventForSeveralRanksOfANodeCarriesEachRanksDetails) {
  JobReplica replica(TwoByTwo());
  v1::JobEvent joined = Event(v1::EVENT_KIND_MEMBER_JOINED, {3, 2}, 1);
  joined.add_members()->set_pid(33);
  joined.add_members()->set_pid(22);
  replica.Apply(joined);
  EXPECT_EQ(replica.member(2).state, v1::MEMBER_STATE_JOINED);
  EXPECT_EQ(replica.member(3).state, v1::MEMBER_STATE_JOINED);
  EXPECT_EQ(replica.member(3).details.pid(), 33u);
  EXPECT_EQ(replica.member(2).details.pid(), 22u);
  EXPECT_EQ(replica.joined_ranks(), 2u);
  // Details that do not pair with the ranks are not guessed at.
  v1::JobEvent unpaired = Event(v1::EVENT_KIND_MEMBER_JOINED, {0, 1}, 0);
  unpaired.add_members()->set_pid(7);
  replica.Apply(unpaired);
  EXPECT_EQ(replica.member(0).state, v1::MEMBER_STATE_JOINED);
  EXPECT_EQ(replica.member(0).details.pid(), 0u);
}

// A join storm's event spans nodes: no node on the event, each member
// names the node it joined on (a rank need not be on its default node).
TEST(JobReplicaTest, OneEventForRanksOfSeveralNodesPlacesEachOnItsNode) {
  JobReplica replica(TwoByTwo());
  v1::JobEvent joined = Event(v1::EVENT_KIND_MEMBER_JOINED, {0, 3, 1});
  for (uint32_t node : {1u, 1u, 0u}) {
    v1::MemberDetails* m = joined.add_members();
    m->set_node_index(node);
    m->set_pid(100 + node);
  }
  replica.Apply(joined);
  EXPECT_EQ(replica.member(0).node_index, 1u);
  EXPECT_EQ(replica.member(3).node_index, 1u);
  EXPECT_EQ(replica.member(1).node_index, 0u);
  EXPECT_EQ(replica.member(0).details.pid(), 101u);
  EXPECT_EQ(replica.member(1).state, v1::MEMBER_STATE_JOINED);
  EXPECT_EQ(replica.joined_ranks(), 3u);
  // A node outside the job is not taken: the rank stays where it was.
  v1::JobEvent stray = Event(v1::EVENT_KIND_MEMBER_JOINED, {2});
  stray.add_members()->set_node_index(7);
  replica.Apply(stray);
  EXPECT_EQ(replica.member(2).node_index, 1u);
}

TEST(JobReplicaTest, EventsOutsideTheJobChangeNothing) {
  JobReplica replica(TwoByTwo());
  replica.Apply(Event(v1::EVENT_KIND_MEMBER_JOINED, {4, 1000000}, 0));
  replica.Apply(Event(v1::EVENT_KIND_NODE_REGISTERED, {}, 2));
  replica.Apply(Event(v1::EVENT_KIND_NODE_LOST, {}, 99));
  // A rank of the job with a node outside it keeps its node.
  replica.Apply(Event(v1::EVENT_KIND_MEMBER_JOINED, {1}, 7));
  EXPECT_EQ(replica.member(1).state, v1::MEMBER_STATE_JOINED);
  EXPECT_EQ(replica.member(1).node_index, 0u);
  // Details only with exactly one rank.
  v1::JobEvent two = Event(v1::EVENT_KIND_MEMBER_JOINED, {0, 2}, 0);
  two.mutable_member()->set_pid(7);
  replica.Apply(two);
  EXPECT_EQ(replica.member(0).details.pid(), 0u);
  EXPECT_EQ(replica.joined_ranks(), 3u);
  EXPECT_EQ(replica.registered_nodes(), 0u);
  EXPECT_EQ(replica.node_state(0), v1::NODE_STATE_NOT_REGISTERED);
  replica.Apply(Event(static_cast<v1::EventKind>(999)));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_FORMING);
}

// Epochs (issue 38): the replica follows RECOVERING and the epoch events
// name, and READY again once the coordinator says so.
TEST(JobReplicaTest, FollowsRecoveryAndTheEpoch) {
  JobReplica replica(TwoByTwo());
  EXPECT_EQ(replica.epoch(), 1u);
  v1::JobEvent ready = Event(v1::EVENT_KIND_JOB_READY);
  ready.set_epoch(1);
  replica.Apply(ready);
  v1::JobEvent lost = Event(v1::EVENT_KIND_MEMBER_LOST, {3}, 1);
  lost.set_epoch(1);
  replica.Apply(lost);
  v1::JobEvent recovering = Event(v1::EVENT_KIND_JOB_RECOVERING, {3});
  recovering.set_epoch(2);
  replica.Apply(recovering);
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_RECOVERING);
  EXPECT_EQ(replica.epoch(), 2u);
  EXPECT_EQ(replica.member(3).state, v1::MEMBER_STATE_LOST);
  v1::JobEvent replaced = Event(v1::EVENT_KIND_MEMBER_JOINED, {3}, 1);
  replaced.set_epoch(2);
  replica.Apply(replaced);
  EXPECT_EQ(replica.member(3).state, v1::MEMBER_STATE_JOINED);
  ready.set_epoch(2);
  replica.Apply(ready);
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_READY);
  // An event of an older epoch (replayed) never moves it back.
  replica.Apply(lost);
  EXPECT_EQ(replica.epoch(), 2u);
  replica.Apply(Event(v1::EVENT_KIND_JOB_FAILED));
  replica.Apply(recovering);
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_FAILED);
}

TEST(JobReplicaTest, FollowsDomainsWithRecoveryByDomain) {
  JobSpec spec = TwoByTwo();
  spec.topology.tensor = 2;
  spec.topology.data = 2;  // domain 0: ranks 0-1, domain 1: ranks 2-3
  JobReplica replica(spec);
  replica.Apply(Event(v1::EVENT_KIND_JOB_READY));
  EXPECT_FALSE(replica.by_domain());
  auto domain_event = [](v1::EventKind kind, uint32_t domain, uint64_t epoch,
                         uint64_t first_round = 0) {
    v1::JobEvent e = Event(kind);
    e.set_domain(domain);
    e.set_epoch(epoch);
    e.set_first_world_round(first_round);
    return e;
  };
  replica.Apply(domain_event(v1::EVENT_KIND_DOMAIN_RECOVERING, 1, 2));
  EXPECT_TRUE(replica.by_domain());
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_READY);  // domain 0 serves
  EXPECT_EQ(replica.EpochOfRank(1), 1u);
  EXPECT_EQ(replica.EpochOfRank(2), 2u);
  EXPECT_TRUE(replica.domain(1).recovering);
  EXPECT_EQ(replica.domain(1).first_world_round, 0u);
  // An event of the job-wide counter does not move domain 0's epoch.
  v1::JobEvent joined = Event(v1::EVENT_KIND_MEMBER_JOINED, {3}, 1);
  joined.set_epoch(2);
  replica.Apply(joined);
  EXPECT_EQ(replica.epoch(), 2u);
  EXPECT_EQ(replica.EpochOfRank(0), 1u);
  // Both domains recovering: the job is RECOVERING.
  replica.Apply(domain_event(v1::EVENT_KIND_DOMAIN_RECOVERING, 0, 3));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_RECOVERING);
  replica.Apply(domain_event(v1::EVENT_KIND_DOMAIN_READY, 1, 2, 7));
  EXPECT_EQ(replica.job_state(), v1::JOB_STATE_READY);
  EXPECT_FALSE(replica.domain(1).recovering);
  EXPECT_EQ(replica.domain(1).first_world_round, 7u);
  // A replayed older event, or a domain outside the job, changes nothing.
  replica.Apply(domain_event(v1::EVENT_KIND_DOMAIN_RECOVERING, 1, 1));
  EXPECT_FALSE(replica.domain(1).recovering);
  replica.Apply(domain_event(v1::EVENT_KIND_DOMAIN_RECOVERING, 9, 9));
  EXPECT_EQ(replica.EpochOfRank(2), 2u);
}

}  // namespace
}  // namespace rankd
