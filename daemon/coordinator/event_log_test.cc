#include "daemon/coordinator/event_log.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

// A subscriber that only queues what it receives, as EventLog requires.
class Collector {
 public:
  EventLog::Subscriber Sink() {
    return [this](const v1::JobEvent& e) {
      absl::MutexLock lock(&mu_);
      events_.push_back(e);
    };
  }
  std::vector<uint64_t> sequences() const {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> out;
    for (const auto& e : events_) out.push_back(e.sequence());
    return out;
  }
  std::vector<v1::JobEvent> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::JobEvent> events_;
};

std::vector<uint64_t> Sequences(const std::vector<v1::JobEvent>& events) {
  std::vector<uint64_t> out;
  for (const auto& e : events) out.push_back(e.sequence());
  return out;
}

v1::JobEvent MakeEvent(uint64_t sequence, v1::EventKind kind,
                       const std::string& message) {
  v1::JobEvent e;
  e.set_sequence(sequence);
  e.set_kind(kind);
  e.set_message(message);
  return e;
}

TEST(EventLogTest, StartsEmpty) {
  EventLog log;
  EXPECT_EQ(log.last_sequence(), 0u);
  EXPECT_TRUE(log.Since(0).empty());
}

TEST(EventLogTest, AppendNumbersConsecutivelyAndFillsFields) {
  EventLog log;
  const int64_t before = absl::ToUnixMillis(absl::Now());
  v1::JobEvent a =
      log.Append(v1::EVENT_KIND_NODE_REGISTERED, 1u, {}, "node 1 registered");
  v1::JobEvent b =
      log.Append(v1::EVENT_KIND_MEMBER_JOINED, 0u, {3}, "rank 3 joined");
  v1::JobEvent c =
      log.Append(v1::EVENT_KIND_JOB_READY, std::nullopt, {}, "all joined");
  const int64_t after = absl::ToUnixMillis(absl::Now());

  EXPECT_EQ(a.sequence(), 1u);
  EXPECT_EQ(b.sequence(), 2u);
  EXPECT_EQ(c.sequence(), 3u);
  EXPECT_EQ(log.last_sequence(), 3u);

  EXPECT_EQ(a.kind(), v1::EVENT_KIND_NODE_REGISTERED);
  ASSERT_TRUE(a.has_node_index());
  EXPECT_EQ(a.node_index(), 1u);
  EXPECT_EQ(a.ranks_size(), 0);
  EXPECT_EQ(a.message(), "node 1 registered");

  // Node index 0 is present, not absent.
  ASSERT_TRUE(b.has_node_index());
  EXPECT_EQ(b.node_index(), 0u);
  ASSERT_EQ(b.ranks_size(), 1);
  EXPECT_EQ(b.ranks(0), 3u);

  EXPECT_FALSE(c.has_node_index());

  for (const auto& e : {a, b, c}) {
    EXPECT_GE(e.time_unix_ms(), before);
    EXPECT_LE(e.time_unix_ms(), after);
  }
}

TEST(EventLogTest, SinceReturnsLaterEventsOldestFirst) {
  EventLog log;
  for (int i = 0; i < 5; ++i) {
    log.Append(v1::EVENT_KIND_MEMBER_JOINED, 0u, {static_cast<uint32_t>(i)},
               "");
  }
  EXPECT_EQ(Sequences(log.Since(0)), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(Sequences(log.Since(3)), (std::vector<uint64_t>{4, 5}));
  EXPECT_TRUE(log.Since(5).empty());
  EXPECT_TRUE(log.Since(100).empty());
  // The events are the ones appended.
  std::vector<v1::JobEvent> events = log.Since(3);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].ranks(0), 3u);
  EXPECT_EQ(events[1].ranks(0), 4u);
}

TEST(EventLogTest, CapacityDropsOldestEvents) {
  EventLog log(3);
  for (int i = 0; i < 5; ++i) {
    log.Append(v1::EVENT_KIND_MEMBER_JOINED, std::nullopt, {}, "");
  }
  EXPECT_EQ(log.last_sequence(), 5u);
  EXPECT_EQ(Sequences(log.Since(0)), (std::vector<uint64_t>{3, 4, 5}));

  // A subscriber asking for dropped events gets the oldest kept onwards.
  Collector collector;
  EventLog::SubscriptionId id = log.Subscribe(0, collector.Sink());
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{3, 4, 5}));
  log.Unsubscribe(id);
}

// A resume from an event the log dropped would miss the events between:
// refused, naming the oldest kept. From an event still kept (or its
// predecessor), or from 0, it is a subscription.
TEST(EventLogTest, ResumeRefusesAGapAndSubscribesOtherwise) {
  EventLog log(3);
  EXPECT_EQ(log.first_kept(), 1u);
  for (int i = 0; i < 5; ++i) {
    log.Append(v1::EVENT_KIND_MEMBER_JOINED, std::nullopt, {}, "");
  }
  EXPECT_EQ(log.first_kept(), 3u);
  Collector collector;
  absl::StatusOr<EventLog::SubscriptionId> gap =
      log.Resume(1, collector.Sink());
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(gap.status().message(),
            "events 2-2 are no longer kept (this daemon keeps the last 3; the "
            "oldest is #3): read the job's state (rankctl status, members) "
            "and watch from sequence 2");
  EXPECT_TRUE(collector.sequences().empty());
  absl::StatusOr<EventLog::SubscriptionId> resumed =
      log.Resume(2, collector.Sink());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{3, 4, 5}));
  log.Unsubscribe(*resumed);
  Collector from_start;
  absl::StatusOr<EventLog::SubscriptionId> all =
      log.Resume(0, from_start.Sink());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(from_start.sequences(), (std::vector<uint64_t>{3, 4, 5}));
  log.Unsubscribe(*all);
  // Past every event: nothing missed (no wrap of after + 1).
  Collector past;
  absl::StatusOr<EventLog::SubscriptionId> beyond =
      log.Resume(UINT64_MAX, past.Sink());
  ASSERT_TRUE(beyond.ok()) << beyond.status();
  EXPECT_TRUE(past.sequences().empty());
  log.Unsubscribe(*beyond);
}

// Live events are filtered by `after` as the replay is: a client that saw
// up to #10 from another daemon and watches a mirror that is at #2 gets
// #11 on, not #3-#10 again.
TEST(EventLogTest, LiveEventsUpToAfterAreNotDelivered) {
  EventLog log;
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 0u, {}, "");
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 1u, {}, "");
  Collector collector;
  EventLog::SubscriptionId id = log.Subscribe(10, collector.Sink());
  for (int i = 0; i < 10; ++i) {
    log.Append(v1::EVENT_KIND_MEMBER_JOINED, std::nullopt, {}, "");
  }
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{11, 12}));
  log.Unsubscribe(id);
}

TEST(EventLogTest, SubscribeReplaysThenDeliversLiveInOrder) {
  EventLog log;
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 0u, {}, "one");
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 1u, {}, "two");
  log.Append(v1::EVENT_KIND_MEMBER_JOINED, 0u, {0}, "three");

  Collector collector;
  EventLog::SubscriptionId id = log.Subscribe(1, collector.Sink());
  EXPECT_NE(id, 0u);
  // Replay happened before Subscribe returned.
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{2, 3}));

  // Live events arrive before Append returns.
  log.Append(v1::EVENT_KIND_MEMBER_JOINED, 1u, {2}, "four");
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{2, 3, 4}));
  log.Append(v1::EVENT_KIND_JOB_READY, std::nullopt, {}, "five");
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{2, 3, 4, 5}));

  std::vector<v1::JobEvent> got = collector.events();
  EXPECT_EQ(got[0].message(), "two");
  EXPECT_EQ(got[3].message(), "five");
  log.Unsubscribe(id);
}

TEST(EventLogTest, SubscribeAfterLastGetsOnlyLiveEvents) {
  EventLog log;
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 0u, {}, "");
  Collector collector;
  EventLog::SubscriptionId id =
      log.Subscribe(log.last_sequence(), collector.Sink());
  EXPECT_TRUE(collector.sequences().empty());
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 1u, {}, "");
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{2}));
  log.Unsubscribe(id);
}

TEST(EventLogTest, EverySubscriberGetsEveryEvent) {
  EventLog log;
  Collector a, b;
  EventLog::SubscriptionId ia = log.Subscribe(0, a.Sink());
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 0u, {}, "");
  EventLog::SubscriptionId ib = log.Subscribe(0, b.Sink());
  EXPECT_NE(ia, ib);
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 1u, {}, "");
  EXPECT_EQ(a.sequences(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(b.sequences(), (std::vector<uint64_t>{1, 2}));
  log.Unsubscribe(ia);
  log.Unsubscribe(ib);
}

TEST(EventLogTest, UnsubscribeStopsDeliveries) {
  EventLog log;
  Collector collector;
  EventLog::SubscriptionId id = log.Subscribe(0, collector.Sink());
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 0u, {}, "");
  log.Unsubscribe(id);
  log.Append(v1::EVENT_KIND_NODE_REGISTERED, 1u, {}, "");
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{1}));
  // Unknown and repeated ids are ignored.
  log.Unsubscribe(id);
  log.Unsubscribe(987654);
  EXPECT_EQ(log.last_sequence(), 2u);
}

TEST(EventLogTest, ConcurrentAppendsReachSubscriberInSequenceOrder) {
  EventLog log;
  Collector early;
  EventLog::SubscriptionId early_id = log.Subscribe(0, early.Sink());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 250;
  Collector late;
  EventLog::SubscriptionId late_id = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < kPerThread; ++i) {
        log.Append(v1::EVENT_KIND_MEMBER_JOINED, static_cast<uint32_t>(t), {},
                   "");
      }
    });
  }
  // Subscribe in the middle of the appends: replay and live must join up
  // with neither a gap nor a duplicate.
  late_id = log.Subscribe(0, late.Sink());
  for (auto& th : threads) th.join();

  std::vector<uint64_t> want;
  for (uint64_t s = 1; s <= kThreads * kPerThread; ++s) want.push_back(s);
  EXPECT_EQ(early.sequences(), want);
  EXPECT_EQ(late.sequences(), want);
  log.Unsubscribe(early_id);
  log.Unsubscribe(late_id);
}

TEST(EventLogTest, MirrorKeepsTheGivenSequenceAndDropsDuplicates) {
  EventLog mirror;
  Collector collector;
  EventLog::SubscriptionId id = mirror.Subscribe(0, collector.Sink());

  EXPECT_TRUE(
      mirror.Mirror(MakeEvent(1, v1::EVENT_KIND_NODE_REGISTERED, "one")));
  EXPECT_TRUE(
      mirror.Mirror(MakeEvent(2, v1::EVENT_KIND_NODE_REGISTERED, "two")));
  EXPECT_EQ(mirror.last_sequence(), 2u);

  // A resubscribe replays events already seen: ignored, not delivered.
  EXPECT_FALSE(
      mirror.Mirror(MakeEvent(1, v1::EVENT_KIND_NODE_REGISTERED, "one again")));
  EXPECT_FALSE(
      mirror.Mirror(MakeEvent(2, v1::EVENT_KIND_NODE_REGISTERED, "two again")));
  EXPECT_EQ(mirror.last_sequence(), 2u);

  EXPECT_TRUE(
      mirror.Mirror(MakeEvent(3, v1::EVENT_KIND_MEMBER_JOINED, "three")));
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{1, 2, 3}));
  std::vector<v1::JobEvent> got = collector.events();
  EXPECT_EQ(got[0].message(), "one");
  EXPECT_EQ(got[1].message(), "two");
  EXPECT_EQ(got[2].message(), "three");

  // Replay after mirroring works like after appending.
  EXPECT_EQ(Sequences(mirror.Since(1)), (std::vector<uint64_t>{2, 3}));
  mirror.Unsubscribe(id);
}

TEST(EventLogTest, MirrorAcceptsAGapAndAppendContinuesAfterIt) {
  EventLog mirror;
  EXPECT_TRUE(mirror.Mirror(MakeEvent(7, v1::EVENT_KIND_NODE_LOST, "lost")));
  EXPECT_EQ(mirror.last_sequence(), 7u);
  EXPECT_FALSE(mirror.Mirror(MakeEvent(5, v1::EVENT_KIND_NODE_LOST, "old")));
  v1::JobEvent next =
      mirror.Append(v1::EVENT_KIND_JOB_FAILED, std::nullopt, {}, "failed");
  EXPECT_EQ(next.sequence(), 8u);
  EXPECT_EQ(Sequences(mirror.Since(0)), (std::vector<uint64_t>{7, 8}));
}

TEST(EventLogTest, SubscriberOfMirrorSeesReplayThenMirroredEvents) {
  EventLog mirror;
  mirror.Mirror(MakeEvent(10, v1::EVENT_KIND_NODE_REGISTERED, ""));
  mirror.Mirror(MakeEvent(11, v1::EVENT_KIND_NODE_REGISTERED, ""));
  Collector collector;
  EventLog::SubscriptionId id = mirror.Subscribe(10, collector.Sink());
  mirror.Mirror(MakeEvent(11, v1::EVENT_KIND_NODE_REGISTERED, "dup"));
  mirror.Mirror(MakeEvent(12, v1::EVENT_KIND_MEMBER_JOINED, ""));
  EXPECT_EQ(collector.sequences(), (std::vector<uint64_t>{11, 12}));
  mirror.Unsubscribe(id);
}

TEST(EventLogTest, EventKindNameStripsPrefix) {
  EXPECT_EQ(EventKindName(v1::EVENT_KIND_MEMBER_LOST), "MEMBER_LOST");
  EXPECT_EQ(EventKindName(v1::EVENT_KIND_NODE_REGISTERED), "NODE_REGISTERED");
  EXPECT_EQ(EventKindName(v1::EVENT_KIND_JOB_COMPLETED), "JOB_COMPLETED");
}

TEST(EventLogTest, DescribeEvent) {
  v1::JobEvent e = MakeEvent(3, v1::EVENT_KIND_NODE_LOST, "node 1 lost");
  e.set_node_index(1);
  e.add_ranks(2);
  e.add_ranks(3);
  EXPECT_EQ(DescribeEvent(e), "#3 NODE_LOST node=1 ranks=2,3 node 1 lost");

  v1::JobEvent bare = MakeEvent(9, v1::EVENT_KIND_JOB_READY, "");
  EXPECT_EQ(DescribeEvent(bare), "#9 JOB_READY");

  v1::JobEvent node0 = MakeEvent(1, v1::EVENT_KIND_NODE_REGISTERED, "hi");
  node0.set_node_index(0);
  EXPECT_EQ(DescribeEvent(node0), "#1 NODE_REGISTERED node=0 hi");
}

}  // namespace
}  // namespace rankd
