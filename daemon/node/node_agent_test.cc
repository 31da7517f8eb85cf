// NodeAgent's Join bookkeeping against a fake coordinator link that holds
// the coordinator's JoinRank replies and releases them in the order a test
// chooses, so concurrent Joins are reproduced deterministically. (Once, a
// failed join reply arriving after another Join for the same local rank
// left that local rank pointing at an erased member, and the next Join
// threw std::out_of_range and killed the daemon.)
#include "daemon/node/node_agent.h"

#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/error_reason.h"
#include "common/kv_limits.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "daemon/coordinator/job_spec.h"
#include "daemon/deadline_timer.h"
#include "daemon/node/coordinator_link.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;

// Registers at once and answers every call OK, except JoinRank: those wait
// in `joins` until the test releases them.
class HeldJoinsLink : public CoordinatorLink {
 public:
  struct HeldJoin {
    v1::JoinRankRequest request;
    Reply<v1::JoinRankResponse> reply;
  };

  void Start(const v1::RegisterNodeRequest&, absl::Time, Listener*,
             Reply<v1::RegisterNodeResponse> registered) override {
    v1::RegisterNodeResponse response;
    response.set_job_incarnation(0x7777);
    registered(response);
  }
  void JoinRank(const v1::JoinRankRequest& request,
                Reply<v1::JoinRankResponse> reply) override {
    absl::MutexLock lock(&mu_);
    joins_.push_back({request, std::move(reply)});
  }
  void ReleaseRank(const v1::ReleaseRankRequest& request,
                   Reply<v1::ReleaseRankResponse> reply) override {
    {
      absl::MutexLock lock(&mu_);
      released_.push_back(request);
    }
    reply(v1::ReleaseRankResponse());
  }
  // The ReleaseRank calls so far (a lost or leaving rank each).
  std::vector<v1::ReleaseRankRequest> released() {
    absl::MutexLock lock(&mu_);
    return released_;
  }
  void ContributeWords(const v1::ContributeWordsRequest&,
                       Reply<v1::AllGatherWordsResponse> reply) override {
    reply(absl::UnimplementedError("not in this test"));
  }
  void KvSet(const v1::KvSetRequest&, Reply<v1::KvSetResponse> reply) override {
    reply(v1::KvSetResponse());
  }
  void KvGet(const v1::KvGetRequest&, Reply<v1::KvGetResponse> reply,
             const CancellationRef&) override {
    reply(absl::NotFoundError("not in this test"));
  }
  void KvAdd(const v1::KvAddRequest&, Reply<v1::KvAddResponse> reply) override {
    reply(v1::KvAddResponse());
  }
  void KvDelete(const v1::KvDeleteRequest&,
                Reply<v1::KvDeleteResponse> reply) override {
    reply(v1::KvDeleteResponse());
  }
  void KvCount(const v1::KvCountRequest&,
               Reply<v1::KvCountResponse> reply) override {
    reply(v1::KvCountResponse());
  }
  void LeaveNode(const v1::LeaveNodeRequest&,
                 Reply<v1::LeaveNodeResponse> reply) override {
    reply(v1::LeaveNodeResponse());
  }
  void Stop() override {}
  std::string coordinator_address() const override { return "fake"; }

  size_t held() {
    absl::MutexLock lock(&mu_);
    return joins_.size();
  }
  // Takes the held join for `rank` (the test releases it).
  HeldJoin Take(uint32_t rank) {
    absl::MutexLock lock(&mu_);
    for (auto it = joins_.begin(); it != joins_.end(); ++it) {
      if (it->request.rank() == rank) {
        HeldJoin join = std::move(*it);
        joins_.erase(it);
        return join;
      }
    }
    ADD_FAILURE() << "no join held for rank " << rank;
    return {};
  }

 private:
  absl::Mutex mu_;
  std::deque<HeldJoin> joins_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReleaseRankRequest> released_ ABSL_GUARDED_BY(mu_);
};

class NodeAgentJoinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobSpec spec;
    spec.job_id = "agent-test";
    spec.world_size = 4;
    spec.nnodes = 2;
    spec.nproc_per_node = 2;
    spec.topology = ParallelTopology{1, 1, 1, 4};
    // No lease expiry during a test, unless it asks for one.
    spec.heartbeat_timeout = HeartbeatTimeout();
    spec.recovery = Recovery();
    v1::NodeInfo node;
    node.set_node_index(0);
    node.set_daemon_incarnation(0x1234);
    auto agent = NodeAgent::Create(spec, node, &link_, timer_.get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    std::optional<absl::Status> started;
    agent_->Start(MonotonicNow() + absl::Seconds(5),
                  [&](absl::Status s) { started = s; });
    ASSERT_TRUE(started.has_value() && started->ok());
  }
  void TearDown() override {
    agent_.reset();
    timer_.reset();
  }
  virtual bool Recovery() const { return true; }
  virtual absl::Duration HeartbeatTimeout() const { return absl::Hours(1); }

  // Sends a Join; its reply lands in the returned slot (at once when the
  // agent answers itself, later when the test releases the held join).
  // A nullopt `local_rank` names none (a process that names only its rank).
  // The device is "cpu", or "cuda" with index `cuda_index` when given.
  std::shared_ptr<std::optional<absl::StatusOr<v1::JoinResponse>>> Join(
      std::optional<uint32_t> local_rank, uint64_t incarnation,
      std::optional<uint32_t> rank = std::nullopt,
      std::optional<int32_t> cuda_index = std::nullopt) {
    v1::JoinRequest request;
    request.set_job_id("agent-test");
    if (local_rank.has_value()) request.set_local_rank(*local_rank);
    if (rank.has_value()) request.set_rank(*rank);
    request.set_incarnation(incarnation);
    request.set_pid(1000 + local_rank.value_or(rank.value_or(0)));
    request.mutable_device()->set_kind(cuda_index.has_value() ? "cuda" : "cpu");
    if (cuda_index.has_value())
      request.mutable_device()->set_index(*cuda_index);
    auto slot =
        std::make_shared<std::optional<absl::StatusOr<v1::JoinResponse>>>();
    agent_->Join(request, [slot](absl::StatusOr<v1::JoinResponse> r) {
      *slot = std::move(r);
    });
    return slot;
  }

  static void Answer(HeldJoinsLink::HeldJoin join, absl::Status status) {
    if (status.ok()) {
      v1::JoinRankResponse response;
      response.set_job_incarnation(0x7777);
      join.reply(response);
    } else {
      join.reply(status);
    }
  }

  HeldJoinsLink link_;
  std::unique_ptr<DeadlineTimer> timer_ = std::make_unique<DeadlineTimer>();
  std::unique_ptr<NodeAgent> agent_;
};

TEST_F(NodeAgentJoinTest, ReorderedRepliesKeepEachLocalRanksMapping) {
  auto first = Join(0, 0xa1);  // rank 0, held at the coordinator
  ASSERT_EQ(link_.held(), 1u);
  // The same process claims rank 0 again as local rank 1: refused here,
  // never forwarded.
  auto again = Join(1, 0xa1, 0);
  ASSERT_TRUE(again->has_value());
  EXPECT_EQ((*again)->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains((*again)->status().message(),
                                "cannot join it again as local rank 1"))
      << (*again)->status();
  EXPECT_EQ(link_.held(), 1u);
  // Another process takes local rank 1 (rank 1); its join fails first, out
  // of order, then rank 0's succeeds.
  auto second = Join(1, 0xb2);
  ASSERT_EQ(link_.held(), 2u);
  Answer(link_.Take(1), absl::FailedPreconditionError("the job failed"));
  ASSERT_TRUE(second->has_value());
  EXPECT_EQ((*second)->status().code(), absl::StatusCode::kFailedPrecondition);
  Answer(link_.Take(0), absl::OkStatus());
  ASSERT_TRUE(first->has_value());
  ASSERT_TRUE((*first)->ok()) << (*first)->status();
  EXPECT_EQ((**first)->member().rank(), 0u);
  // Local rank 1 is free again, and local rank 0 still holds rank 0: a new
  // process joins local rank 1; a second claim on local rank 0 names its
  // holder.
  auto third = Join(1, 0xc3);
  ASSERT_EQ(link_.held(), 1u);
  Answer(link_.Take(1), absl::OkStatus());
  ASSERT_TRUE(third->has_value());
  ASSERT_TRUE((*third)->ok()) << (*third)->status();
  EXPECT_EQ((**third)->member().rank(), 1u);
  auto claim = Join(0, 0xd4);
  ASSERT_TRUE(claim->has_value());
  EXPECT_EQ((*claim)->status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains((*claim)->status().message(),
                                "already held by pid 1000 (rank 0)"))
      << (*claim)->status();
  EXPECT_EQ(link_.held(), 0u);
}

// Processes that name only their rank (a rankd:// URL's rank=, no
// local_rank=) get distinct slots: the rank's own slot in this node's
// block when free, else the lowest free one; a rank joining again keeps
// its slot; a full node names its limit.
TEST_F(NodeAgentJoinTest, ARankWithoutALocalRankGetsAFreeSlot) {
  auto one = Join(std::nullopt, 0xf1, 1);
  ASSERT_EQ(link_.held(), 1u);
  HeldJoinsLink::HeldJoin held_one = link_.Take(1);
  EXPECT_EQ(held_one.request.local_rank(), 1u);
  // Rank 2 belongs to node 1's block: the lowest free slot here, 0.
  auto two = Join(std::nullopt, 0xf2, 2);
  ASSERT_EQ(link_.held(), 1u);
  HeldJoinsLink::HeldJoin held_two = link_.Take(2);
  EXPECT_EQ(held_two.request.local_rank(), 0u);
  Answer(std::move(held_one), absl::OkStatus());
  Answer(std::move(held_two), absl::OkStatus());
  ASSERT_TRUE(one->has_value() && (*one)->ok());
  ASSERT_TRUE(two->has_value() && (*two)->ok());
  // The same process joining rank 1 again keeps its slot.
  auto again = Join(std::nullopt, 0xf1, 1);
  if (link_.held() == 1u) {
    HeldJoinsLink::HeldJoin held = link_.Take(1);
    EXPECT_EQ(held.request.local_rank(), 1u);
    Answer(std::move(held), absl::OkStatus());
  }
  ASSERT_TRUE(again->has_value());
  EXPECT_TRUE((*again)->ok()) << (*again)->status();
  // Both slots are held: a third rank is refused, naming the limit.
  auto full = Join(std::nullopt, 0xf3, 0);
  ASSERT_TRUE(full->has_value());
  EXPECT_EQ((*full)->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains((*full)->status().message(),
                                "every one of node 0's 2 local ranks is held"))
      << (*full)->status();
  EXPECT_EQ(link_.held(), 0u);
}

// A "cuda" device of index -1 (the process leaves the choice to the
// default-device rule) is recorded as its slot's GPU, also for a rank
// whose slot the daemon chose; an explicit index is kept.
TEST_F(NodeAgentJoinTest, AnUnnamedGpuIsRecordedAsTheSlotsGpu) {
  auto named = Join(0, 0xe1, std::nullopt, /*cuda_index=*/5);
  ASSERT_EQ(link_.held(), 1u);
  HeldJoinsLink::HeldJoin held_named = link_.Take(0);
  EXPECT_EQ(held_named.request.device().index(), 5);
  // Rank 2 (node 1's block) names no slot: it gets slot 1, and slot 1's GPU.
  auto unnamed = Join(std::nullopt, 0xe2, 2, /*cuda_index=*/-1);
  ASSERT_EQ(link_.held(), 1u);
  HeldJoinsLink::HeldJoin held_unnamed = link_.Take(2);
  EXPECT_EQ(held_unnamed.request.local_rank(), 1u);
  EXPECT_EQ(held_unnamed.request.device().kind(), "cuda");
  EXPECT_EQ(held_unnamed.request.device().index(), 1);
  Answer(std::move(held_named), absl::OkStatus());
  Answer(std::move(held_unnamed), absl::OkStatus());
  ASSERT_TRUE(named->has_value() && (*named)->ok());
  ASSERT_TRUE(unnamed->has_value() && (*unnamed)->ok());
}

// A compare-and-set's or compare-and-delete's expected value is bounded as
// a value is: a larger one (a gRPC request carries up to 64 MiB) is refused
// here, never forwarded.
TEST_F(NodeAgentJoinTest, AnExpectedValueOverTheLimitIsRefused) {
  auto joined = Join(0, 0xc0, 0);
  HeldJoinsLink::HeldJoin held = link_.Take(0);
  Answer(std::move(held), absl::OkStatus());
  ASSERT_TRUE(joined->has_value() && (*joined)->ok()) << (*joined)->status();
  v1::KvSetRequest set;
  *set.mutable_member() = (**joined)->member();
  set.set_key("k");
  set.set_value("v");
  set.set_expected(std::string(kMaxKvValueBytes + 1, 'x'));
  absl::Status set_status = absl::UnknownError("no reply");
  agent_->KvSet(set, [&](absl::StatusOr<v1::KvSetResponse> r) {
    set_status = r.status();
  });
  EXPECT_EQ(set_status.code(), absl::StatusCode::kInvalidArgument)
      << set_status;
  v1::KvDeleteRequest del;
  *del.mutable_member() = (**joined)->member();
  del.set_key("k");
  del.set_expected(std::string(kMaxKvValueBytes + 1, 'x'));
  absl::Status del_status = absl::UnknownError("no reply");
  agent_->KvDelete(del, [&](absl::StatusOr<v1::KvDeleteResponse> r) {
    del_status = r.status();
  });
  EXPECT_EQ(del_status.code(), absl::StatusCode::kInvalidArgument)
      << del_status;
  set.set_expected("v");  // within the limit: forwarded (the fake answers)
  agent_->KvSet(set, [&](absl::StatusOr<v1::KvSetResponse> r) {
    set_status = r.status();
  });
  EXPECT_TRUE(set_status.ok()) << set_status;
}

// Opening a Watch replays the mirror's kept events (up to thousands) into
// the stream's queue; that ran under the agent's lock, which every rank
// request takes, so a rank re-opening streams from sequence 0 could hold
// the node's other ranks up. A request made during the replay is answered
// during it.
TEST_F(NodeAgentJoinTest, AWatchReplaysItsEventsWithoutTheAgentsLock) {
  auto joined = Join(0, 0xc0, 0);
  HeldJoinsLink::HeldJoin held = link_.Take(0);
  Answer(std::move(held), absl::OkStatus());
  ASSERT_TRUE(joined->has_value() && (*joined)->ok()) << (*joined)->status();
  agent_->events().Append(v1::EVENT_KIND_NODE_REGISTERED, 0u, {}, "replayed");
  v1::WatchRequest watch;
  *watch.mutable_member() = (**joined)->member();
  watch.set_after_sequence(0);
  int replayed = 0;
  bool answered_during_replay = false;
  auto on_event = [&](const v1::JobEvent&) {
    if (replayed++ > 0) return;
    // Another request, on another thread, while the replay runs.
    absl::Notification answered;
    std::thread other([&] {
      agent_->LocalJob();
      answered.Notify();
    });
    answered_during_replay =
        answered.WaitForNotificationWithTimeout(absl::Seconds(5));
    other.join();
  };
  auto id = agent_->Attach(watch, {on_event, [](absl::Status) {}});
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_GE(replayed, 1);
  EXPECT_TRUE(answered_during_replay);
  agent_->Detach(*id, /*broken=*/false, "done");
}

// Retries of one process's join while earlier ones wait at the coordinator
// are bounded: each held a waiter there and a call on the node's shared
// connection (before: thousands could wait at once). An answer gives its
// place back.
TEST_F(NodeAgentJoinTest, JoinsOfOneProcessWaitingAtOnceAreBounded) {
  std::vector<std::shared_ptr<std::optional<absl::StatusOr<v1::JoinResponse>>>>
      joins;
  for (uint32_t i = 0; i < NodeAgent::kMaxJoinsInFlightPerRank; ++i) {
    joins.push_back(Join(0, 0xc0, 0));
    EXPECT_FALSE(joins.back()->has_value());
  }
  EXPECT_EQ(link_.held(), NodeAgent::kMaxJoinsInFlightPerRank);
  auto refused = Join(0, 0xc0, 0);
  ASSERT_TRUE(refused->has_value());
  EXPECT_EQ((*refused)->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string((*refused)->status().message()),
              HasSubstr("rank 0 has 4 joins waiting for their answer already"));
  Answer(link_.Take(0), absl::OkStatus());
  auto again = Join(0, 0xc0, 0);
  EXPECT_FALSE(again->has_value());
  while (link_.held() > 0) Answer(link_.Take(0), absl::OkStatus());
  for (auto& j : joins) {
    ASSERT_TRUE(j->has_value());
    EXPECT_TRUE((*j)->ok()) << (*j)->status();
  }
  ASSERT_TRUE(again->has_value() && (*again)->ok());
}

// A Watch resuming after an event the daemon no longer keeps is refused
// naming the oldest kept (before: it opened with the gap unseen), and the
// refusal gives its place back.
TEST_F(NodeAgentJoinTest, AWatchResumingPastTheKeptEventsIsOutOfRange) {
  auto joined = Join(0, 0xc0, 0);
  HeldJoinsLink::HeldJoin held = link_.Take(0);
  Answer(std::move(held), absl::OkStatus());
  ASSERT_TRUE(joined->has_value() && (*joined)->ok()) << (*joined)->status();
  for (size_t i = 0; i < EventLog::kDefaultCapacity + 5; ++i) {
    agent_->events().Append(v1::EVENT_KIND_NODE_REGISTERED, 0u, {}, "");
  }
  v1::WatchRequest watch;
  *watch.mutable_member() = (**joined)->member();
  watch.set_after_sequence(2);
  for (uint32_t i = 0; i < 2 * kMaxStreamsPerCaller; ++i) {
    auto refused = agent_->Attach(
        watch, {[](const v1::JobEvent&) {}, [](absl::Status) {}});
    ASSERT_EQ(refused.status().code(), absl::StatusCode::kOutOfRange)
        << refused.status();
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("are no longer kept"));
  }
  watch.set_after_sequence(agent_->events().last_sequence() - 1);
  int delivered = 0;
  auto id = agent_->Attach(
      watch, {[&](const v1::JobEvent&) { ++delivered; }, [](absl::Status) {}});
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(delivered, 1);
  agent_->Detach(*id, /*broken=*/false, "done");
}

// A rank whose last Watch the daemon itself closed (a reader too far
// behind) once kept its slot with no liveness check at all: a process that
// then died was never declared lost. It is leased again: lost unless it
// opens another Watch within the heartbeat timeout.
class NodeAgentLeaseTest : public NodeAgentJoinTest {
 protected:
  absl::Duration HeartbeatTimeout() const override {
    return absl::Milliseconds(200);
  }
};

TEST_F(NodeAgentLeaseTest, ARankWhoseWatchTheDaemonClosedIsLeasedAgain) {
  auto joined = Join(0, 0xc0, 0);
  HeldJoinsLink::HeldJoin held = link_.Take(0);
  Answer(std::move(held), absl::OkStatus());
  ASSERT_TRUE(joined->has_value() && (*joined)->ok()) << (*joined)->status();
  v1::WatchRequest watch;
  *watch.mutable_member() = (**joined)->member();
  auto id =
      agent_->Attach(watch, {[](const v1::JobEvent&) {}, [](absl::Status) {}});
  ASSERT_TRUE(id.ok()) << id.status();
  // Past the join's lease: the open Watch keeps it.
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_TRUE(link_.released().empty());
  agent_->Detach(*id, /*broken=*/false, "the reader fell too far behind");
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (link_.released().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const std::vector<v1::ReleaseRankRequest> released = link_.released();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].rank(), 0u);
  EXPECT_FALSE(released[0].clean());
  EXPECT_THAT(released[0].reason(), HasSubstr("had no Watch stream open"));
}

// A join that waits for the world, whose process dies meanwhile, once held
// its slot at the coordinator until the wait ended (up to an hour): the
// call's cancellation releases the rank as lost at once, and a new process
// of the rank joins.
TEST_F(NodeAgentJoinTest, AWaitingJoinWhoseCallerWentAwayReleasesItsRank) {
  v1::JoinRequest request;
  request.set_job_id("agent-test");
  request.set_local_rank(1);
  request.set_incarnation(0xe1);
  request.set_pid(1001);
  request.set_wait_for_world_ms(60000);
  request.mutable_device()->set_kind("cpu");
  auto cancellation = std::make_shared<CallCancellation>();
  std::optional<absl::StatusOr<v1::JoinResponse>> answer;
  agent_->Join(
      request,
      [&](absl::StatusOr<v1::JoinResponse> r) { answer = std::move(r); },
      NodeAgent::Caller{}, cancellation);
  ASSERT_EQ(link_.held(), 1u);
  EXPECT_TRUE(link_.released().empty());
  cancellation->Cancel();  // the process died: its connection closed
  const std::vector<v1::ReleaseRankRequest> released = link_.released();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].rank(), 1u);
  EXPECT_EQ(released[0].incarnation(), 0xe1u);
  EXPECT_FALSE(released[0].clean());
  EXPECT_THAT(released[0].reason(),
              HasSubstr("went away while its join waited for the world"));
  // The coordinator answers the waiting join at last: nothing changes.
  Answer(link_.Take(1), absl::OkStatus());
  // A new process of the rank takes the slot.
  auto replacement = Join(1, 0xe2, 1);
  Answer(link_.Take(1), absl::OkStatus());
  ASSERT_TRUE(replacement->has_value() && (*replacement)->ok())
      << (*replacement)->status();
  // A join answered before its caller went away is not released by it.
  auto later = std::make_shared<CallCancellation>();
  request.set_local_rank(0);
  request.set_incarnation(0xe3);
  std::optional<absl::StatusOr<v1::JoinResponse>> joined;
  agent_->Join(
      request,
      [&](absl::StatusOr<v1::JoinResponse> r) { joined = std::move(r); },
      NodeAgent::Caller{}, later);
  Answer(link_.Take(0), absl::OkStatus());
  ASSERT_TRUE(joined.has_value() && joined->ok()) << joined->status();
  later->Cancel();
  EXPECT_EQ(link_.released().size(), 1u);
}

// After its Leave a rank opens no new Watch stream (its process may not
// keep holding streams on the daemon).
TEST_F(NodeAgentJoinTest, ARankThatLeftOpensNoWatch) {
  auto joined = Join(0, 0xd0, 0);
  Answer(link_.Take(0), absl::OkStatus());
  ASSERT_TRUE(joined->has_value() && (*joined)->ok()) << (*joined)->status();
  v1::WatchRequest watch;
  *watch.mutable_member() = (**joined)->member();
  auto first =
      agent_->Attach(watch, {[](const v1::JobEvent&) {}, [](absl::Status) {}});
  ASSERT_TRUE(first.ok()) << first.status();
  v1::LeaveRequest leave;
  *leave.mutable_member() = (**joined)->member();
  std::optional<absl::StatusOr<v1::LeaveResponse>> left;
  agent_->Leave(
      leave, [&](absl::StatusOr<v1::LeaveResponse> r) { left = std::move(r); });
  ASSERT_TRUE(left.has_value() && left->ok());
  auto again =
      agent_->Attach(watch, {[](const v1::JobEvent&) {}, [](absl::Status) {}});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("has left the job"));
  agent_->Detach(*first, /*broken=*/true, "closed");
}

// A lost rank's slot may be taken by a rank that names none; the lost
// rank's replacement then gets a free slot, not its predecessor's (held).
TEST_F(NodeAgentJoinTest, AReplacementWhoseSlotWasTakenGetsAFreeOne) {
  auto lost = Join(std::nullopt, 0xa2, 2);
  HeldJoinsLink::HeldJoin held = link_.Take(2);
  EXPECT_EQ(held.request.local_rank(), 0u);
  Answer(std::move(held), absl::OkStatus());
  ASSERT_TRUE(lost->has_value() && (*lost)->ok()) << (*lost)->status();
  v1::WatchRequest watch;
  *watch.mutable_member() = (**lost)->member();
  auto id =
      agent_->Attach(watch, {[](const v1::JobEvent&) {}, [](absl::Status) {}});
  ASSERT_TRUE(id.ok()) << id.status();
  agent_->Detach(*id, /*broken=*/true, "process killed");
  // Rank 3 (node 1's block) names no slot: the lowest free, 0.
  auto taker = Join(std::nullopt, 0xa3, 3);
  held = link_.Take(3);
  EXPECT_EQ(held.request.local_rank(), 0u);
  Answer(std::move(held), absl::OkStatus());
  ASSERT_TRUE(taker->has_value() && (*taker)->ok()) << (*taker)->status();
  // Rank 2's replacement: slot 1.
  auto replacement = Join(std::nullopt, 0xb2, 2);
  ASSERT_EQ(link_.held(), 1u)
      << (replacement->has_value() ? (*replacement)->status().ToString() : "");
  held = link_.Take(2);
  EXPECT_EQ(held.request.local_rank(), 1u);
  Answer(std::move(held), absl::OkStatus());
  ASSERT_TRUE(replacement->has_value());
  EXPECT_TRUE((*replacement)->ok()) << (*replacement)->status();
}

TEST_F(NodeAgentJoinTest, AFailedJoinFreesItsLocalRankEvenWhenAnotherWaits) {
  // Two processes race for local rank 0: the second is refused while the
  // first is in flight; the first then fails at the coordinator, and a
  // third process gets the local rank.
  auto first = Join(0, 0xe1);
  auto rival = Join(0, 0xe2);
  ASSERT_TRUE(rival->has_value());
  EXPECT_EQ((*rival)->status().code(), absl::StatusCode::kAlreadyExists);
  Answer(link_.Take(0), absl::DeadlineExceededError("world not complete"));
  ASSERT_TRUE(first->has_value());
  EXPECT_FALSE((*first)->ok());
  auto third = Join(0, 0xe3);
  ASSERT_EQ(link_.held(), 1u);
  Answer(link_.Take(0), absl::OkStatus());
  ASSERT_TRUE(third->has_value());
  EXPECT_TRUE((*third)->ok()) << (*third)->status();
}

// A rank is bound to the connection its first join came on (issue 36):
// while it lives, a call for it from any other connection is refused,
// naming both; an in-process caller (the round-slot watcher) is bound to
// nothing.
TEST_F(NodeAgentJoinTest, ARankActsOnlyThroughTheConnectionItJoinedOn) {
  RankCaller mine{"unix#1", 4242, 1000};
  RankCaller other{"unix#2", 5151, 1000};
  v1::JoinRequest request;
  request.set_job_id("agent-test");
  request.set_local_rank(0);
  request.set_incarnation(0xf1);
  request.mutable_device()->set_kind("cpu");
  std::optional<absl::StatusOr<v1::JoinResponse>> joined;
  agent_->Join(
      request,
      [&](absl::StatusOr<v1::JoinResponse> r) { joined = std::move(r); }, mine);
  Answer(link_.Take(0), absl::OkStatus());
  ASSERT_TRUE(joined.has_value() && joined->ok());
  EXPECT_TRUE(agent_->CheckCaller(0, mine).ok());
  EXPECT_TRUE(agent_->CheckCaller(0, RankCaller{}).ok());
  absl::Status refused = agent_->CheckCaller(0, other);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(
      refused.message(),
      "rank 0 joined through pid 4242 (uid 1000) on the Unix socket "
      "(connection 1) and acts only through that connection; this call came "
      "from pid 5151 (uid 1000) on the Unix socket (connection 2)"))
      << refused;
  // A rank that has not joined is for the call's own checks to refuse.
  EXPECT_TRUE(agent_->CheckCaller(1, other).ok());
}

// A rank's rounds in flight on its node are bounded by count and bytes; a
// refused round still takes its number; a cancelled round is answered at
// once and gives back what it held (issue 36).
TEST_F(NodeAgentJoinTest, ARanksRoundsAreBoundedAndReleasedOnCancel) {
  auto joined = Join(0, 0xf2);
  Answer(link_.Take(0), absl::OkStatus());
  ASSERT_TRUE(joined->has_value() && (*joined)->ok());
  const v1::MemberRef member = (**joined)->member();
  // Default limit: 4 MiB, 16 frames of 65,536 words.
  std::vector<std::shared_ptr<CallCancellation>> cancels;
  std::vector<std::shared_ptr<std::optional<absl::Status>>> answers;
  auto round = [&](uint64_t number) {
    v1::AllGatherWordsRequest request;
    *request.mutable_member() = member;
    request.set_round(number);
    request.mutable_words()->Resize(65536, 1);
    request.set_timeout_ms(3'600'000);
    auto cancel = std::make_shared<CallCancellation>();
    auto answer = std::make_shared<std::optional<absl::Status>>();
    agent_->AllGatherWords(
        request,
        [answer](absl::StatusOr<v1::AllGatherWordsResponse> r) {
          *answer = r.status();
        },
        cancel);
    cancels.push_back(cancel);
    answers.push_back(answer);
    return answer;
  };
  for (uint64_t n = 1; n <= 16; ++n) {
    EXPECT_FALSE(round(n)->has_value()) << "round " << n << " waits";
  }
  auto refused = round(17);
  ASSERT_TRUE(refused->has_value());
  EXPECT_EQ((*refused)->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains((*refused)->message(),
                                "would pass the limit of 4194304 bytes per "
                                "rank (--max_round_bytes_per_rank)"))
      << **refused;
  // Round 18 is refused for the same reason, not for its number.
  auto next = round(18);
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->code(), absl::StatusCode::kResourceExhausted);
  // Cancelling round 1 answers it and makes room for one more.
  cancels[0]->Cancel();
  ASSERT_TRUE(answers[0]->has_value());
  EXPECT_EQ((*answers[0])->code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(round(19)->has_value());
  EXPECT_TRUE(round(20)->has_value());
  for (auto& c : cancels) c->Cancel();
  for (auto& a : answers) EXPECT_TRUE(a->has_value());
}

// Epochs (issue 38): once this daemon hears of a new epoch, its ranks act
// only after joining into it; a join again (same incarnation) enters it; a
// lost rank's slot takes a new incarnation, bound to its connection.
TEST_F(NodeAgentJoinTest, RanksActOnlyInTheEpochTheyJoinedInto) {
  auto joined = Join(0, 0xc1);
  Answer(link_.Take(0), absl::OkStatus());
  ASSERT_TRUE(joined->has_value() && (*joined)->ok());
  EXPECT_EQ((**joined)->session().epoch(), 1u);
  const v1::MemberRef member = (**joined)->member();
  EXPECT_TRUE(agent_->CheckMember(member).ok());

  v1::JobEvent recovering;
  recovering.set_sequence(1);
  recovering.set_kind(v1::EVENT_KIND_JOB_RECOVERING);
  recovering.add_ranks(1);
  recovering.set_epoch(2);
  recovering.set_message("epoch 1 ended: rank 1 lost");
  agent_->OnEvent(recovering);
  absl::Status fenced = agent_->CheckMember(member);
  EXPECT_EQ(fenced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(
      fenced.message(), "rank 0 joined into epoch 1 but the job is at epoch 2"))
      << fenced;
  EXPECT_EQ(ReasonOf(fenced), ErrorReason::kEpochFenced);
  EXPECT_EQ(agent_->LocalJob().epoch(), 2u);
  EXPECT_EQ(agent_->LocalJob().state(), v1::JOB_STATE_RECOVERING);

  auto again = Join(0, 0xc1);
  HeldJoinsLink::HeldJoin held = link_.Take(0);
  EXPECT_EQ(held.request.incarnation(), 0xc1u);
  v1::JoinRankResponse into2;
  into2.set_job_incarnation(0x7777);
  into2.set_epoch(2);
  held.reply(into2);
  ASSERT_TRUE(again->has_value() && (*again)->ok()) << (*again)->status();
  EXPECT_EQ((**again)->session().epoch(), 2u);
  EXPECT_TRUE(agent_->CheckMember(member).ok());

  // Rank 1 (local rank 1) joins, then its process goes away: its slot
  // takes a new incarnation through another connection.
  RankCaller first{"unix#7", 70, 1000};
  RankCaller second{"unix#8", 80, 1000};
  v1::JoinRequest request;
  request.set_job_id("agent-test");
  request.set_local_rank(1);
  request.set_incarnation(0xd1);
  request.mutable_device()->set_kind("cpu");
  std::optional<absl::StatusOr<v1::JoinResponse>> r1;
  agent_->Join(
      request, [&](absl::StatusOr<v1::JoinResponse> r) { r1 = std::move(r); },
      first);
  held = link_.Take(1);
  held.reply(into2);
  ASSERT_TRUE(r1.has_value() && r1->ok()) << r1->status();
  v1::WatchRequest watch;
  *watch.mutable_member() = (*r1)->member();
  auto id =
      agent_->Attach(watch, {[](const v1::JobEvent&) {}, [](absl::Status) {}});
  ASSERT_TRUE(id.ok()) << id.status();
  agent_->Detach(*id, /*broken=*/true, "process killed");
  EXPECT_FALSE(agent_->CheckMember((*r1)->member()).ok());
  request.set_incarnation(0xd2);
  std::optional<absl::StatusOr<v1::JoinResponse>> r2;
  agent_->Join(
      request, [&](absl::StatusOr<v1::JoinResponse> r) { r2 = std::move(r); },
      second);
  ASSERT_EQ(link_.held(), 1u) << "the replacement's join is forwarded";
  held = link_.Take(1);
  EXPECT_EQ(held.request.incarnation(), 0xd2u);
  held.reply(into2);
  ASSERT_TRUE(r2.has_value() && r2->ok()) << r2->status();
  EXPECT_TRUE(agent_->CheckCaller(1, second).ok());
  EXPECT_EQ(agent_->CheckCaller(1, first).code(),
            absl::StatusCode::kPermissionDenied);
  absl::Status stale = agent_->CheckMember((*r1)->member());
  EXPECT_TRUE(absl::StrContains(stale.message(), "stale")) << stale;
}

class NodeAgentRecoveryOffTest : public NodeAgentJoinTest {
 protected:
  bool Recovery() const override { return false; }
};

// Recovery off: a new process for a lost rank is refused by this daemon,
// as before epochs, and the lost rank's record stays.
TEST_F(NodeAgentRecoveryOffTest, ALostRanksNewProcessIsRefusedLocally) {
  RankCaller first{"unix#7", 70, 1000};
  v1::JoinRequest request;
  request.set_job_id("agent-test");
  request.set_local_rank(1);
  request.set_incarnation(0xd1);
  request.mutable_device()->set_kind("cpu");
  std::optional<absl::StatusOr<v1::JoinResponse>> r1;
  agent_->Join(
      request, [&](absl::StatusOr<v1::JoinResponse> r) { r1 = std::move(r); },
      first);
  Answer(link_.Take(1), absl::OkStatus());
  ASSERT_TRUE(r1.has_value() && r1->ok()) << r1->status();
  v1::WatchRequest watch;
  *watch.mutable_member() = (*r1)->member();
  auto id =
      agent_->Attach(watch, {[](const v1::JobEvent&) {}, [](absl::Status) {}});
  ASSERT_TRUE(id.ok()) << id.status();
  agent_->Detach(*id, /*broken=*/true, "process killed");
  for (int attempt = 0; attempt < 2; ++attempt) {
    request.set_incarnation(0xd2);
    std::optional<absl::StatusOr<v1::JoinResponse>> r2;
    agent_->Join(
        request, [&](absl::StatusOr<v1::JoinResponse> r) { r2 = std::move(r); },
        RankCaller{"unix#8", 80, 1000});
    EXPECT_EQ(link_.held(), 0u) << "not forwarded";
    ASSERT_TRUE(r2.has_value());
    EXPECT_EQ(r2->status().code(), absl::StatusCode::kFailedPrecondition)
        << r2->status();
    EXPECT_TRUE(absl::StrContains(r2->status().message(), "already ran"))
        << r2->status();
  }
}

}  // namespace
}  // namespace rankd
