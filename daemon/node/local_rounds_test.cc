// LocalRounds: one batch per complete round, a partial batch at the flush
// time, late frames on their own (after a flush and after retirement),
// Close failing held and later frames. A real DeadlineTimer; the sender
// records what would go to the coordinator and answers it at once.
#include "daemon/node/local_rounds.h"

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

struct Sent {
  uint64_t round;
  std::vector<uint32_t> ranks;  // of the frames, in order
  absl::Time opened;
  absl::Time deadline;
};

// Records every batch and answers each waiter with a response that holds
// the batch's frames.
class Recorder {
 public:
  LocalRounds::Send sender() {
    return [this](LocalRounds::Batch batch) {
      Sent sent{batch.round, {}, batch.opened, batch.deadline};
      v1::AllGatherWordsResponse response;
      for (const v1::RankFrame& f : batch.frames) {
        sent.ranks.push_back(f.rank());
        response.add_words(f.words_size() > 0 ? f.words(0) : 0);
      }
      for (auto& w : batch.waiters) w.reply(response);
      // Recorded after the replies, so WaitFor also waits for them.
      absl::MutexLock lock(&mu_);
      sent_.push_back(sent);
    };
  }
  std::vector<Sent> sent() const {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  // Waits until `n` batches went out (or 5 s).
  bool WaitFor(size_t n) const {
    absl::MutexLock lock(&mu_);
    auto enough = [&] {
      mu_.AssertReaderHeld();
      return sent_.size() >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(5));
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Sent> sent_ ABSL_GUARDED_BY(mu_);
};

// A waiter that keeps its outcome.
struct Outcome {
  absl::Notification done;
  absl::StatusOr<v1::AllGatherWordsResponse> result;
  LocalRounds::Waiter For(uint32_t rank) {
    return {rank, [this](absl::StatusOr<v1::AllGatherWordsResponse> r) {
              result = std::move(r);
              done.Notify();
            }};
  }
};

v1::RankFrame Frame(uint32_t rank) {
  v1::RankFrame frame;
  frame.set_rank(rank);
  frame.add_words(100 + rank);
  return frame;
}

TEST(LocalRoundsTest, ACompleteRoundGoesOutAsOneBatch) {
  DeadlineTimer timer;
  Recorder recorder;
  LocalRounds rounds(3, &timer, recorder.sender());
  Outcome a, b, c;
  rounds.Contribute(1, Frame(4), a.For(4), absl::Seconds(10));
  rounds.Contribute(1, Frame(3), b.For(3), absl::Seconds(10));
  EXPECT_TRUE(recorder.sent().empty()) << "held until every local rank";
  EXPECT_EQ(rounds.open(), 1u);
  rounds.Contribute(1, Frame(5), c.For(5), absl::Seconds(10));
  ASSERT_EQ(recorder.sent().size(), 1u);
  EXPECT_EQ(recorder.sent()[0].round, 1u);
  EXPECT_EQ(recorder.sent()[0].ranks, (std::vector<uint32_t>{4, 3, 5}));
  EXPECT_EQ(rounds.open(), 0u);
  for (Outcome* o : {&a, &b, &c}) {
    ASSERT_TRUE(o->done.HasBeenNotified());
    ASSERT_TRUE(o->result.ok());
    EXPECT_EQ(o->result->words_size(), 3);
  }
  // The next round is its own.
  Outcome d;
  rounds.Contribute(2, Frame(4), d.For(4), absl::Seconds(10));
  EXPECT_EQ(recorder.sent().size(), 1u);
  EXPECT_EQ(rounds.open(), 1u);
}

TEST(LocalRoundsTest, AMissingRankFlushesThePartialBatchBeforeTheDeadline) {
  DeadlineTimer timer;
  Recorder recorder;
  LocalRounds rounds(2, &timer, recorder.sender());
  Outcome a;
  const absl::Duration timeout = absl::Milliseconds(400);
  const absl::Time start = MonotonicNow();
  rounds.Contribute(7, Frame(0), a.For(0), timeout);
  ASSERT_TRUE(recorder.WaitFor(1));
  const absl::Duration flushed_after = MonotonicNow() - start;
  // At deadline - FlushMargin (100 ms for a 400 ms timeout).
  EXPECT_GE(flushed_after, timeout - LocalRounds::FlushMargin(timeout) -
                               absl::Milliseconds(5));
  EXPECT_LT(flushed_after, timeout);
  const Sent first = recorder.sent()[0];
  EXPECT_EQ(first.ranks, (std::vector<uint32_t>{0}));
  EXPECT_GE(first.deadline, start + timeout);
  // The partial batch says when the round opened here, not when it left:
  // the coordinator's timeout message counts from then.
  EXPECT_GE(first.opened, start);
  EXPECT_EQ(first.deadline - first.opened, timeout);
  ASSERT_TRUE(a.done.HasBeenNotified());
  // Late after the flush: on its own, with the round's deadline.
  Outcome late;
  rounds.Contribute(7, Frame(1), late.For(1), timeout);
  ASSERT_EQ(recorder.sent().size(), 2u);
  EXPECT_EQ(recorder.sent()[1].ranks, (std::vector<uint32_t>{1}));
  EXPECT_EQ(recorder.sent()[1].deadline, first.deadline);
  EXPECT_EQ(recorder.sent()[1].opened, first.opened);
  // Every local rank contributed: the round is gone at once.
  EXPECT_EQ(rounds.open(), 0u);
}

TEST(LocalRoundsTest, AFlushedRoundIsRetiredAtItsDeadline) {
  DeadlineTimer timer;
  Recorder recorder;
  LocalRounds rounds(2, &timer, recorder.sender());
  Outcome a;
  const absl::Duration timeout = absl::Milliseconds(200);
  rounds.Contribute(3, Frame(0), a.For(0), timeout);
  ASSERT_TRUE(recorder.WaitFor(1));
  EXPECT_EQ(rounds.open(), 1u) << "held until its deadline";
  absl::SleepFor(timeout);
  EXPECT_EQ(rounds.open(), 0u) << "a rank that never comes keeps nothing";
  // A frame for the retired round goes on its own with its own deadline.
  Outcome late;
  const absl::Time before = MonotonicNow();
  rounds.Contribute(3, Frame(1), late.For(1), absl::Seconds(5));
  ASSERT_EQ(recorder.sent().size(), 2u);
  EXPECT_EQ(recorder.sent()[1].round, 3u);
  EXPECT_EQ(recorder.sent()[1].ranks, (std::vector<uint32_t>{1}));
  EXPECT_GE(recorder.sent()[1].deadline, before + absl::Seconds(5));
  EXPECT_EQ(rounds.open(), 0u) << "a late frame opens no round";
  // An older round that completed here is late too.
  Outcome x, y, old;
  rounds.Contribute(4, Frame(0), x.For(0), absl::Seconds(5));
  rounds.Contribute(4, Frame(1), y.For(1), absl::Seconds(5));
  rounds.Contribute(2, Frame(1), old.For(1), absl::Seconds(5));
  ASSERT_EQ(recorder.sent().size(), 4u);
  EXPECT_EQ(recorder.sent()[3].round, 2u);
  EXPECT_EQ(rounds.open(), 0u);
}

TEST(LocalRoundsTest, CloseFailsHeldAndLaterFrames) {
  DeadlineTimer timer;
  Recorder recorder;
  LocalRounds rounds(2, &timer, recorder.sender());
  Outcome held, later;
  rounds.Contribute(1, Frame(0), held.For(0), absl::Seconds(10));
  rounds.Close(absl::AbortedError("job failed: rank 3 lost"));
  ASSERT_TRUE(held.done.HasBeenNotified());
  EXPECT_EQ(held.result.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(rounds.open(), 0u);
  // Only the first Close counts.
  rounds.Close(absl::UnavailableError("shutting down"));
  rounds.Contribute(1, Frame(1), later.For(1), absl::Seconds(10));
  ASSERT_TRUE(later.done.HasBeenNotified());
  EXPECT_EQ(later.result.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(later.result.status().message(), "job failed: rank 3 lost");
  EXPECT_TRUE(recorder.sent().empty()) << "nothing went out";
}

// A new epoch (issue 38): held frames fail with the loss named, and the
// same round numbers open afresh (unlike Close, later frames are taken).
TEST(LocalRoundsTest, RestartFailsHeldFramesAndNumbersRoundsAfresh) {
  DeadlineTimer timer;
  Recorder recorder;
  LocalRounds rounds(2, &timer, recorder.sender());
  Outcome held;
  rounds.Contribute(1, Frame(0), held.For(0), absl::Seconds(10));
  rounds.Restart(2, absl::AbortedError("epoch 1 ended: rank 3 lost"));
  ASSERT_TRUE(held.done.HasBeenNotified());
  EXPECT_EQ(held.result.status().message(), "epoch 1 ended: rank 3 lost");
  EXPECT_EQ(rounds.open(), 0u);
  Outcome a, b;
  rounds.Contribute(1, Frame(0), a.For(0), absl::Seconds(10));
  // The same epoch learnt a second time (event after join) changes nothing.
  rounds.Restart(2, absl::AbortedError("epoch 1 ended"));
  EXPECT_FALSE(a.done.HasBeenNotified());
  rounds.Contribute(1, Frame(1), b.For(1), absl::Seconds(10));
  ASSERT_TRUE(recorder.WaitFor(1));
  ASSERT_TRUE(a.done.HasBeenNotified() && b.done.HasBeenNotified());
  EXPECT_TRUE(a.result.ok()) << a.result.status();
  EXPECT_EQ(recorder.sent()[0].round, 1u);
}

// Recovery by domain: a domain's held frames are answered with its loss,
// and the node's other ranks go on under the same round numbers without
// waiting for the domain's ranks, until Resume brings them back from
// their domain's entry round.
TEST(LocalRoundsTest, DropAndResumeADomainsRanks) {
  DeadlineTimer timer;
  Recorder recorder;
  LocalRounds rounds(3, &timer, recorder.sender());
  Outcome kept, dropped;
  rounds.Contribute(1, Frame(0), kept.For(0), absl::Seconds(10));
  rounds.Contribute(1, Frame(2), dropped.For(2), absl::Seconds(10));
  EXPECT_EQ(rounds.Drop({2, 3}, absl::AbortedError("domain 1 epoch 1 ended")),
            1u);
  ASSERT_TRUE(dropped.done.HasBeenNotified());
  EXPECT_EQ(dropped.result.status().message(), "domain 1 epoch 1 ended");
  // Round 1 waited only for ranks 2 and 3: it goes out now, rank 0 alone.
  ASSERT_TRUE(recorder.WaitFor(1));
  EXPECT_EQ(recorder.sent()[0].round, 1u);
  EXPECT_EQ(recorder.sent()[0].ranks, (std::vector<uint32_t>{0}));
  ASSERT_TRUE(kept.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(kept.result.ok()) << kept.result.status();
  EXPECT_EQ(rounds.open(), 0u);
  // Later rounds do not wait for them either...
  Outcome two;
  rounds.Contribute(2, Frame(0), two.For(0), absl::Seconds(10));
  ASSERT_TRUE(recorder.WaitFor(2));
  EXPECT_EQ(recorder.sent()[1].ranks, (std::vector<uint32_t>{0}));
  // ...until their domain's entry round, 4.
  rounds.Resume({2, 3}, 4);
  Outcome three;
  rounds.Contribute(3, Frame(0), three.For(0), absl::Seconds(10));
  ASSERT_TRUE(recorder.WaitFor(3));
  EXPECT_EQ(recorder.sent()[2].round, 3u);
  Outcome a, b, c;
  rounds.Contribute(4, Frame(0), a.For(0), absl::Seconds(10));
  rounds.Contribute(4, Frame(2), b.For(2), absl::Seconds(10));
  EXPECT_EQ(recorder.sent().size(), 3u);  // round 4 waits for rank 3
  rounds.Contribute(4, Frame(3), c.For(3), absl::Seconds(10));
  ASSERT_TRUE(recorder.WaitFor(4));
  EXPECT_EQ(recorder.sent()[3].ranks, (std::vector<uint32_t>{0, 2, 3}));
}

}  // namespace
}  // namespace rankd
