#include "daemon/coordinator/kv_store.h"

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/monotonic_clock.h"
#include "daemon/deadline_timer.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

// Generous bound for "this should happen"; never used to assert speed.
constexpr absl::Duration kPatience = absl::Seconds(20);

absl::Time Far() { return MonotonicNow() + absl::Hours(1); }

// The outcome of one Get, shared with its callback so that a late callback
// never touches a dead test frame.
struct GetResult {
  absl::Notification done;
  std::atomic<int> calls{0};
  absl::StatusOr<std::string> value;

  bool Wait() { return done.WaitForNotificationWithTimeout(kPatience); }
};

std::shared_ptr<GetResult> StartGet(
    KvStore& kv, absl::string_view key, absl::Time deadline,
    const CancellationRef& cancellation = nullptr, KvReader reader = {}) {
  auto result = std::make_shared<GetResult>();
  kv.Get(
      key, deadline,
      [result](absl::StatusOr<std::string> v) {
        if (result->calls++ == 0) {
          result->value = std::move(v);
          result->done.Notify();
        }
      },
      cancellation, reader);
  return result;
}

#define EXPECT_STATUS(expr, code_, substring)                      \
  do {                                                             \
    const absl::Status _s = (expr);                                \
    EXPECT_EQ(_s.code(), (code_)) << _s;                           \
    EXPECT_TRUE(absl::StrContains(_s.message(), (substring)))      \
        << "missing '" << (substring) << "' in: " << _s.message(); \
  } while (0)

class KvStoreTest : public ::testing::Test {
 protected:
  ~KvStoreTest() override {
    // Stop the timer first so no expiry runs against a dead store.
    timer_.reset();
  }

  std::unique_ptr<DeadlineTimer> timer_ = std::make_unique<DeadlineTimer>();
  KvStore kv_{timer_.get()};
};

TEST_F(KvStoreTest, ValidateKey) {
  EXPECT_STATUS(KvStore::ValidateKey(""), absl::StatusCode::kInvalidArgument,
                "key must not be empty");
  EXPECT_TRUE(KvStore::ValidateKey("k").ok());
  EXPECT_TRUE(
      KvStore::ValidateKey(std::string(KvStore::kMaxKeyBytes, 'k')).ok());
  EXPECT_STATUS(
      KvStore::ValidateKey(std::string(KvStore::kMaxKeyBytes + 1, 'k')),
      absl::StatusCode::kInvalidArgument, "key is 513 bytes; the limit is 512");
}

TEST_F(KvStoreTest, ValidateValue) {
  EXPECT_TRUE(KvStore::ValidateValue("").ok());
  EXPECT_TRUE(
      KvStore::ValidateValue(std::string(KvStore::kMaxValueBytes, 'v')).ok());
  EXPECT_STATUS(
      KvStore::ValidateValue(std::string(KvStore::kMaxValueBytes + 1, 'v')),
      absl::StatusCode::kInvalidArgument,
      "value is 1048577 bytes; the limit is 1048576");
}

TEST_F(KvStoreTest, SetPeekOverwrite) {
  EXPECT_EQ(kv_.Peek("a"), std::nullopt);
  EXPECT_TRUE(kv_.Set("a", "1").ok());
  EXPECT_EQ(kv_.Peek("a"), "1");
  EXPECT_TRUE(kv_.Set("a", "two").ok());
  EXPECT_EQ(kv_.Peek("a"), "two");
  EXPECT_EQ(kv_.size(), 1u);
  // Empty values and binary bytes are kept as they are.
  EXPECT_TRUE(kv_.Set("empty", "").ok());
  EXPECT_EQ(kv_.Peek("empty"), "");
  const std::string binary("\0\x01\xff", 3);
  EXPECT_TRUE(kv_.Set("bin", binary).ok());
  EXPECT_EQ(kv_.Peek("bin"), binary);
  EXPECT_EQ(kv_.size(), 3u);
}

TEST_F(KvStoreTest, SetRejectsBadKeysAndValues) {
  EXPECT_STATUS(kv_.Set("", "v"), absl::StatusCode::kInvalidArgument,
                "key must not be empty");
  EXPECT_STATUS(kv_.Set(std::string(513, 'k'), "v"),
                absl::StatusCode::kInvalidArgument, "key is 513 bytes");
  EXPECT_STATUS(kv_.Set("k", std::string(KvStore::kMaxValueBytes + 1, 'v')),
                absl::StatusCode::kInvalidArgument,
                "value is 1048577 bytes; the limit is 1048576");
  EXPECT_EQ(kv_.size(), 0u);
  // The largest allowed key and value are accepted.
  EXPECT_TRUE(kv_.Set(std::string(KvStore::kMaxKeyBytes, 'k'),
                      std::string(KvStore::kMaxValueBytes, 'v'))
                  .ok());
}

TEST_F(KvStoreTest, GetOfExistingKeyAnswersOnTheCallingThread) {
  ASSERT_TRUE(kv_.Set("id", "nccl-unique-id").ok());
  auto r = StartGet(kv_, "id", Far());
  // Already answered when Get returned.
  ASSERT_TRUE(r->done.HasBeenNotified());
  ASSERT_TRUE(r->value.ok()) << r->value.status();
  EXPECT_EQ(*r->value, "nccl-unique-id");
}

TEST_F(KvStoreTest, GetWithPastDeadlineOfMissingKeyIsNotFound) {
  auto r = StartGet(kv_, "missing", MonotonicNow() - absl::Seconds(1));
  ASSERT_TRUE(r->done.HasBeenNotified());
  EXPECT_STATUS(r->value.status(), absl::StatusCode::kNotFound,
                "key 'missing' is not set");
}

TEST_F(KvStoreTest, GetRejectsBadKey) {
  auto r = StartGet(kv_, "", Far());
  ASSERT_TRUE(r->done.HasBeenNotified());
  EXPECT_STATUS(r->value.status(), absl::StatusCode::kInvalidArgument,
                "key must not be empty");
}

TEST_F(KvStoreTest, BlockingGetReleasedByLaterSet) {
  auto r1 = StartGet(kv_, "rendezvous", Far());
  auto r2 = StartGet(kv_, "rendezvous", Far());
  auto other = StartGet(kv_, "other", Far());
  EXPECT_FALSE(r1->done.HasBeenNotified());
  EXPECT_FALSE(r2->done.HasBeenNotified());

  std::thread setter([this] { EXPECT_TRUE(kv_.Set("rendezvous", "42").ok()); });
  ASSERT_TRUE(r1->Wait());
  ASSERT_TRUE(r2->Wait());
  setter.join();
  ASSERT_TRUE(r1->value.ok()) << r1->value.status();
  EXPECT_EQ(*r1->value, "42");
  ASSERT_TRUE(r2->value.ok()) << r2->value.status();
  EXPECT_EQ(*r2->value, "42");
  // A waiter for another key is not released.
  EXPECT_FALSE(other->done.HasBeenNotified());
  ASSERT_TRUE(kv_.Set("other", "x").ok());
  ASSERT_TRUE(other->Wait());
  EXPECT_EQ(*other->value, "x");
  EXPECT_EQ(r1->calls.load(), 1);
  EXPECT_EQ(r2->calls.load(), 1);
}

// A get waiting from epoch 1 once waited on past the loss that ended it
// (until its own deadline), and a write of epoch 2 then answered it.
TEST_F(KvStoreTest, EndEpochEndsTheGetsWaitingFromItAndNoOthers) {
  auto of_epoch1 = StartGet(kv_, "late", Far(), nullptr, KvReader{0, 1});
  auto of_epoch2 = StartGet(kv_, "late", Far(), nullptr, KvReader{0, 2});
  auto other_group = StartGet(kv_, "late", Far(), nullptr, KvReader{1, 1});
  auto unfenced = StartGet(kv_, "late", Far());
  EXPECT_EQ(kv_.waiting(), 4u);
  const absl::Status loss =
      absl::AbortedError("epoch 1 ended: rank 3 lost; recovering at epoch 2");
  KvStore::EndedGets ended = kv_.EndEpoch(0, 1, loss);
  EXPECT_EQ(ended.size(), 1u);
  EXPECT_EQ(kv_.waiting(), 3u);
  // Taken, not answered: the caller sends outside its own lock.
  EXPECT_FALSE(of_epoch1->done.HasBeenNotified());
  ended.Send();
  ASSERT_TRUE(of_epoch1->done.HasBeenNotified());
  EXPECT_EQ(of_epoch1->value.status(), loss);
  ended.Send();  // again: nothing
  EXPECT_EQ(of_epoch1->calls.load(), 1);

  // The next epoch's write answers the rest, never the ended reader.
  ASSERT_TRUE(kv_.Set("late", "of epoch 2").ok());
  for (auto& get : {of_epoch2, other_group, unfenced}) {
    ASSERT_TRUE(get->Wait());
    EXPECT_EQ(*get->value, "of epoch 2");
  }
  EXPECT_EQ(of_epoch1->calls.load(), 1);
  EXPECT_EQ(kv_.waiting(), 0u);
}

// A get admitted in epoch 1 that reaches the store after the loss ended
// epoch 1 would have read epoch 2's value, or waited to its deadline.
TEST_F(KvStoreTest, GetOfAnEndedEpochIsAnsweredWithTheLossAtOnce) {
  const absl::Status loss = absl::AbortedError("epoch 2 ended: node 1 lost");
  kv_.EndEpoch(0, 2, loss).Send();
  ASSERT_TRUE(kv_.Set("k", "of epoch 3").ok());
  for (uint64_t epoch : {1u, 2u}) {
    auto present = StartGet(kv_, "k", Far(), nullptr, KvReader{0, epoch});
    ASSERT_TRUE(present->done.HasBeenNotified());
    EXPECT_EQ(present->value.status(), loss);
    auto absent = StartGet(kv_, "absent", Far(), nullptr, KvReader{0, epoch});
    ASSERT_TRUE(absent->done.HasBeenNotified());
    EXPECT_EQ(absent->value.status(), loss);
  }
  EXPECT_EQ(kv_.waiting(), 0u);
  auto current = StartGet(kv_, "k", Far(), nullptr, KvReader{0, 3});
  ASSERT_TRUE(current->value.ok());
  EXPECT_EQ(*current->value, "of epoch 3");
  auto other_group = StartGet(kv_, "k", Far(), nullptr, KvReader{1, 2});
  ASSERT_TRUE(other_group->value.ok());

  // Ended epochs only grow: ending an older one again changes nothing.
  auto waiting = StartGet(kv_, "later", Far(), nullptr, KvReader{0, 3});
  EXPECT_EQ(kv_.EndEpoch(0, 1, absl::AbortedError("old")).size(), 0u);
  auto again = StartGet(kv_, "k", Far(), nullptr, KvReader{0, 2});
  EXPECT_EQ(again->value.status(), loss);
  EXPECT_EQ(kv_.waiting(), 1u);
  KvStore::EndedGets next =
      kv_.EndEpoch(0, 3, absl::AbortedError("epoch 3 ended"));
  EXPECT_EQ(next.size(), 1u);
  next.Send();
  ASSERT_TRUE(waiting->done.HasBeenNotified());
  EXPECT_STATUS(waiting->value.status(), absl::StatusCode::kAborted,
                "epoch 3 ended");
}

// A write admitted in epoch 1 that reaches the store after the loss ended
// epoch 1 once landed in epoch 2 (an "epoch/1/" key past its drop, a
// survivor's unscoped key after the fence): it is refused with the loss,
// set, add and delete alike, and nothing is written.
TEST_F(KvStoreTest, AWriteOfAnEndedEpochIsRefusedWithTheLoss) {
  ASSERT_TRUE(kv_.Set("kept", "v").ok());
  const absl::Status loss = absl::AbortedError("epoch 1 ended: rank 3 lost");
  kv_.EndEpoch(0, 1, loss).Send();
  const KvReader ended{0, 1}, current{0, 2}, other_group{1, 1};
  EXPECT_EQ(kv_.SetAs("late", "x", 0, {}, ended).status(), loss);
  EXPECT_EQ(kv_.Add("count", 1, 0, ended).status(), loss);
  EXPECT_EQ(kv_.Delete("kept", KvStore::kNoRank, std::nullopt, ended).status(),
            loss);
  EXPECT_FALSE(kv_.Peek("late").has_value());
  EXPECT_FALSE(kv_.Peek("count").has_value());
  EXPECT_EQ(kv_.Peek("kept"), "v");
  EXPECT_EQ(kv_.keys_of(0), 0u);
  // The current epoch, another fence group and unfenced callers write.
  EXPECT_TRUE(*kv_.SetAs("late", "x", 0, {}, current));
  EXPECT_EQ(*kv_.Add("count", 1, 0, other_group), 1);
  EXPECT_TRUE(*kv_.Delete("kept"));
}

// 2000 gets of an hour, each abandoned by its client, once stayed parked
// until a later set: a cancelled call releases its waiter at once.
TEST_F(KvStoreTest, CancelledGetIsReleasedAtOnceAndOnlyOnce) {
  auto cancellation = std::make_shared<CallCancellation>();
  auto cancelled = StartGet(kv_, "never", Far(), cancellation);
  auto other = StartGet(kv_, "never", Far());
  EXPECT_EQ(kv_.waiting(), 2u);
  EXPECT_FALSE(cancelled->done.HasBeenNotified());
  cancellation->Cancel();
  ASSERT_TRUE(cancelled->done.HasBeenNotified());  // on the cancelling thread
  EXPECT_STATUS(cancelled->value.status(), absl::StatusCode::kCancelled,
                "the wait for key 'never' was cancelled by its caller");
  EXPECT_EQ(kv_.waiting(), 1u);
  cancellation->Cancel();  // again: nothing
  ASSERT_TRUE(kv_.Set("never", "now").ok());
  ASSERT_TRUE(other->Wait());
  EXPECT_EQ(*other->value, "now");
  EXPECT_EQ(cancelled->calls.load(), 1);
  EXPECT_EQ(kv_.waiting(), 0u);

  // A call cancelled before its get parks is released as it parks; one
  // answered at once is not touched by a later cancel.
  auto early = std::make_shared<CallCancellation>();
  early->Cancel();
  auto parked = StartGet(kv_, "absent", Far(), early);
  ASSERT_TRUE(parked->done.HasBeenNotified());
  EXPECT_EQ(parked->value.status().code(), absl::StatusCode::kCancelled);
  auto late = std::make_shared<CallCancellation>();
  auto answered = StartGet(kv_, "never", Far(), late);
  late->Cancel();
  ASSERT_TRUE(answered->value.ok());
  EXPECT_EQ(answered->calls.load(), 1);
  EXPECT_EQ(kv_.waiting(), 0u);
}

TEST_F(KvStoreTest, BlockingGetReleasedByLaterAdd) {
  auto r = StartGet(kv_, "counter", Far());
  EXPECT_FALSE(r->done.HasBeenNotified());
  absl::StatusOr<int64_t> v = kv_.Add("counter", 5);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 5);
  ASSERT_TRUE(r->Wait());
  ASSERT_TRUE(r->value.ok()) << r->value.status();
  EXPECT_EQ(*r->value, "5");
}

TEST_F(KvStoreTest, BlockingGetExpiresNamingTheKey) {
  const absl::Time start = MonotonicNow();
  auto r = StartGet(kv_, "gloo/rank3", start + absl::Milliseconds(50));
  ASSERT_TRUE(r->Wait());
  EXPECT_GE(MonotonicNow(), start + absl::Milliseconds(50));
  EXPECT_STATUS(r->value.status(), absl::StatusCode::kDeadlineExceeded,
                "key 'gloo/rank3' was not set within");
  EXPECT_TRUE(absl::StrContains(r->value.status().message(), " ms"));
  // A later Set does not call it again.
  ASSERT_TRUE(kv_.Set("gloo/rank3", "late").ok());
  EXPECT_EQ(r->calls.load(), 1);
}

TEST_F(KvStoreTest, FailReleasesWaitersAndFailsLaterOperations) {
  ASSERT_TRUE(kv_.Set("kept", "v").ok());
  auto r1 = StartGet(kv_, "a", Far());
  auto r2 = StartGet(kv_, "b", Far());
  const absl::Status cause = absl::AbortedError("job failed: rank 1 lost");
  kv_.Fail(cause);
  ASSERT_TRUE(r1->Wait());
  ASSERT_TRUE(r2->Wait());
  EXPECT_EQ(r1->value.status(), cause);
  EXPECT_EQ(r2->value.status(), cause);

  EXPECT_EQ(kv_.Set("a", "v"), cause);
  EXPECT_EQ(kv_.Add("n", 1).status(), cause);
  EXPECT_EQ(kv_.Delete("kept").status(), cause);
  // Even a key that exists is not handed out any more.
  auto r3 = StartGet(kv_, "kept", Far());
  ASSERT_TRUE(r3->done.HasBeenNotified());
  EXPECT_EQ(r3->value.status(), cause);

  // The first cause wins.
  kv_.Fail(absl::UnavailableError("shutting down"));
  EXPECT_EQ(kv_.Set("a", "v"), cause);
  EXPECT_EQ(r1->calls.load(), 1);
  EXPECT_EQ(r2->calls.load(), 1);
}

TEST_F(KvStoreTest, AddTreatsAbsentAsZeroAndAccumulates) {
  EXPECT_EQ(*kv_.Add("n", 3), 3);
  EXPECT_EQ(*kv_.Add("n", 4), 7);
  EXPECT_EQ(*kv_.Add("n", -10), -3);
  EXPECT_EQ(*kv_.Add("n", 0), -3);
  EXPECT_EQ(kv_.Peek("n"), "-3");
  // A counter written by Set is accepted.
  ASSERT_TRUE(kv_.Set("m", "100").ok());
  EXPECT_EQ(*kv_.Add("m", 1), 101);
}

TEST_F(KvStoreTest, AddOnNonNumericValueIsFailedPrecondition) {
  ASSERT_TRUE(kv_.Set("name", "abc").ok());
  EXPECT_STATUS(kv_.Add("name", 1).status(),
                absl::StatusCode::kFailedPrecondition,
                "key 'name' holds a value that is not a decimal counter");
  EXPECT_EQ(kv_.Peek("name"), "abc");
  ASSERT_TRUE(kv_.Set("big", "99999999999999999999").ok());
  EXPECT_EQ(kv_.Add("big", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(kv_.Set("empty", "").ok());
  EXPECT_EQ(kv_.Add("empty", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(KvStoreTest, AddOverflowIsOutOfRangeAndLeavesValue) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  ASSERT_TRUE(kv_.Set("hi", absl::StrCat(kMax)).ok());
  EXPECT_STATUS(kv_.Add("hi", 1).status(), absl::StatusCode::kOutOfRange,
                "adding 1 to counter 'hi' (9223372036854775807) overflows "
                "int64");
  EXPECT_EQ(kv_.Peek("hi"), absl::StrCat(kMax));
  EXPECT_EQ(*kv_.Add("hi", 0), kMax);
  EXPECT_EQ(*kv_.Add("hi", -1), kMax - 1);

  ASSERT_TRUE(kv_.Set("lo", absl::StrCat(kMin)).ok());
  EXPECT_STATUS(kv_.Add("lo", -1).status(), absl::StatusCode::kOutOfRange,
                "overflows int64");
  EXPECT_EQ(kv_.Peek("lo"), absl::StrCat(kMin));
  EXPECT_EQ(*kv_.Add("lo", kMax), -1);

  // From an absent key, the extremes themselves are fine.
  EXPECT_EQ(*kv_.Add("x", kMin), kMin);
  EXPECT_EQ(*kv_.Add("y", kMax), kMax);
}

TEST_F(KvStoreTest, AddRejectsBadKey) {
  EXPECT_STATUS(kv_.Add("", 1).status(), absl::StatusCode::kInvalidArgument,
                "key must not be empty");
}

// A write for no rank (the daemon's own) leaves a key charged to its
// creator, whose byte tally must follow the new size: it once kept the old
// one, and the creator's delete then took more than it held (its tally
// wrapped, over quota for good).
TEST_F(KvStoreTest, AWriteForNoRankMovesTheCreatorsTally) {
  ASSERT_TRUE(kv_.Set("k", "x", 1).ok());
  EXPECT_EQ(kv_.bytes_of(1), 2u);
  ASSERT_TRUE(kv_.Set("k", std::string(100, 'v')).ok());
  EXPECT_EQ(kv_.bytes_of(1), 101u);
  EXPECT_EQ(kv_.keys_of(1), 1u);
  ASSERT_TRUE(kv_.Delete("k", 1).ok());
  EXPECT_EQ(kv_.bytes_of(1), 0u);
  EXPECT_EQ(kv_.keys_of(1), 0u);
}

// No key both is absent and holds a value: such a write is refused, not
// answered as a condition that did not hold.
TEST_F(KvStoreTest, CreateOnlyAndCompareAndSetTogetherAreRefused) {
  KvCondition both;
  both.if_absent = true;
  both.expected = "x";
  EXPECT_STATUS(kv_.SetAs("k", "v", 1, both).status(),
                absl::StatusCode::kInvalidArgument,
                "either create-only (if_absent) or compare-and-set");
  EXPECT_EQ(kv_.Peek("k"), std::nullopt);
}

TEST_F(KvStoreTest, Delete) {
  ASSERT_TRUE(kv_.Set("k", "v").ok());
  absl::StatusOr<bool> existed = kv_.Delete("k");
  ASSERT_TRUE(existed.ok());
  EXPECT_TRUE(*existed);
  existed = kv_.Delete("k");
  ASSERT_TRUE(existed.ok());
  EXPECT_FALSE(*existed);
  EXPECT_EQ(kv_.Peek("k"), std::nullopt);
  EXPECT_EQ(kv_.size(), 0u);
  EXPECT_EQ(kv_.Delete("").status().code(), absl::StatusCode::kInvalidArgument);
  // A deleted key can be waited for again.
  auto r = StartGet(kv_, "k", Far());
  EXPECT_FALSE(r->done.HasBeenNotified());
  ASSERT_TRUE(kv_.Set("k", "again").ok());
  ASSERT_TRUE(r->Wait());
  EXPECT_EQ(*r->value, "again");
}

TEST_F(KvStoreTest, CountCountsTheKeysWithAPrefix) {
  EXPECT_EQ(*kv_.Count(""), 0u);
  for (const char* key : {"torch/1/a", "torch/1/b", "torch/10/a", "torch/2/a",
                          "torch/1", "r0/x"}) {
    ASSERT_TRUE(kv_.Set(key, "v").ok()) << key;
  }
  ASSERT_TRUE(kv_.Add("torch/1/n", 1).ok());
  EXPECT_EQ(*kv_.Count(""), 7u);
  EXPECT_EQ(*kv_.Count("torch/1/"), 3u);
  EXPECT_EQ(*kv_.Count("torch/1"), 5u);
  EXPECT_EQ(*kv_.Count("torch/"), 6u);
  EXPECT_EQ(*kv_.Count("torch/3/"), 0u);
  EXPECT_EQ(*kv_.Count("zzz"), 0u);
  ASSERT_TRUE(*kv_.Delete("torch/1/a"));
  EXPECT_EQ(*kv_.Count("torch/1/"), 2u);
  EXPECT_EQ(*kv_.Count(""), 6u);
  EXPECT_STATUS(kv_.Count(std::string(KvStore::kMaxKeyBytes + 1, 'k')).status(),
                absl::StatusCode::kInvalidArgument, "prefix is 513 bytes");
  kv_.Fail(absl::AbortedError("job failed: rank 3 lost"));
  EXPECT_STATUS(kv_.Count("").status(), absl::StatusCode::kAborted,
                "rank 3 lost");
}

TEST_F(KvStoreTest, DropPrefixRemovesARunOfKeysAndEndsItsWaiters) {
  const std::pair<const char*, uint32_t> keys[] = {{"epoch/2/r0/a", 0},
                                                   {"epoch/2/r1/b", 1},
                                                   {"epoch/20/r0/a", 0},
                                                   {"epoch/3/r0/a", 0},
                                                   {"r0/x", 0}};
  for (const auto& [key, rank] : keys) {
    ASSERT_TRUE(kv_.Set(key, "vv", rank).ok()) << key;
  }
  const size_t rank0_keys = kv_.keys_of(0);
  const size_t rank0_bytes = kv_.bytes_of(0);
  auto dropped_wait = StartGet(kv_, "epoch/2/r1/never", Far());
  auto kept_wait = StartGet(kv_, "epoch/3/r0/later", Far());
  // Waiting just before and just after the prefix's run of keys.
  auto before_wait = StartGet(kv_, "epoch/1/r0/x", Far());
  auto after_wait = StartGet(kv_, "epoch/20/r0/x", Far());
  const absl::Status why = absl::FailedPreconditionError("epoch 2 ended");
  EXPECT_EQ(kv_.DropPrefix("epoch/2/", why), 2u);
  EXPECT_EQ(*kv_.Count(""), 3u);
  EXPECT_FALSE(kv_.Peek("epoch/2/r0/a").has_value());
  EXPECT_TRUE(kv_.Peek("epoch/20/r0/a").has_value());  // not epoch 2's
  // The owners' quota charge goes with the keys.
  EXPECT_EQ(kv_.keys_of(0), rank0_keys - 1);
  EXPECT_EQ(kv_.bytes_of(0),
            rank0_bytes - std::string("epoch/2/r0/a").size() - 2);
  EXPECT_EQ(kv_.keys_of(1), 0u);
  ASSERT_TRUE(dropped_wait->Wait());
  EXPECT_EQ(dropped_wait->value.status(), why);
  EXPECT_EQ(kv_.waiting(), 3u);            // the other epochs' Gets still wait
  EXPECT_EQ(kv_.DropPrefix("", why), 0u);  // never everything
  EXPECT_EQ(*kv_.Count(""), 3u);
  ASSERT_TRUE(kv_.Set("epoch/3/r0/later", "v").ok());
  ASSERT_TRUE(kept_wait->Wait());
  EXPECT_EQ(*kept_wait->value, "v");
  ASSERT_TRUE(kv_.Set("epoch/1/r0/x", "b").ok());
  ASSERT_TRUE(kv_.Set("epoch/20/r0/x", "a").ok());
  ASSERT_TRUE(before_wait->Wait());
  ASSERT_TRUE(after_wait->Wait());
  EXPECT_EQ(*before_wait->value, "b");
  EXPECT_EQ(*after_wait->value, "a");
}

TEST_F(KvStoreTest, KeyCountLimit) {
  for (size_t i = 0; i < kMaxKvKeys; ++i) {
    ASSERT_TRUE(kv_.Set(absl::StrCat("k", i), "").ok()) << i;
  }
  EXPECT_EQ(kv_.size(), kMaxKvKeys);
  EXPECT_STATUS(kv_.Set("one-more", "v"), absl::StatusCode::kResourceExhausted,
                "key-value broker holds 65536 keys already");
  EXPECT_STATUS(kv_.Add("one-more", 1).status(),
                absl::StatusCode::kResourceExhausted,
                "key-value broker holds 65536 keys already");
  // Existing keys can still be overwritten and counted.
  EXPECT_TRUE(kv_.Set("k0", "7").ok());
  EXPECT_EQ(*kv_.Add("k0", 1), 8);
  // Deleting makes room.
  ASSERT_TRUE(*kv_.Delete("k1"));
  EXPECT_TRUE(kv_.Set("one-more", "v").ok());
  EXPECT_EQ(kv_.size(), kMaxKvKeys);
}

// One rank cannot take the whole broker: a new key counts against the rank
// that created it until someone deletes it.
TEST_F(KvStoreTest, KeysPerRankLimit) {
  KvStore kv(timer_.get(), KvLimits{1 << 20, 100, 3});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(kv.Set(absl::StrCat("a", i), "v", /*rank=*/5).ok()) << i;
  }
  EXPECT_EQ(kv.keys_of(5), 3u);
  EXPECT_STATUS(kv.Set("a3", "v", 5), absl::StatusCode::kResourceExhausted,
                "rank 5 created 3 keys that still exist; the limit is 3 per "
                "rank (--kv_max_keys_per_rank)");
  EXPECT_STATUS(kv.Add("counter", 1, 5).status(),
                absl::StatusCode::kResourceExhausted, "rank 5 created 3 keys");
  // Its existing keys stay writable, by it (and only by it); other ranks
  // have room.
  EXPECT_TRUE(kv.Set("a0", "changed", 5).ok());
  EXPECT_EQ(kv.Set("a1", "changed", 6).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(kv.Set("b0", "v", 6).ok());
  EXPECT_EQ(kv.keys_of(5), 3u);
  EXPECT_EQ(kv.keys_of(6), 1u);
  // A delete by any rank gives the creator its room back.
  ASSERT_TRUE(*kv.Delete("a2"));
  EXPECT_EQ(kv.keys_of(5), 2u);
  EXPECT_EQ(*kv.Add("counter", 1, 5), 1);
  EXPECT_EQ(kv.keys_of(5), 3u);
  EXPECT_FALSE(kv.Peek("a3").has_value());
}

TEST_F(KvStoreTest, ConfiguredTotalsAreNamedByTheirFlags) {
  KvStore kv(timer_.get(), KvLimits{16, 2, 100});
  ASSERT_TRUE(kv.Set("k1", "v").ok());
  ASSERT_TRUE(kv.Set("k2", "v").ok());
  EXPECT_STATUS(kv.Set("k3", "v"), absl::StatusCode::kResourceExhausted,
                "holds 2 keys already (--kv_max_keys)");
  EXPECT_STATUS(kv.Set("k1", "0123456789abc"),
                absl::StatusCode::kResourceExhausted,
                "would hold more than 16 bytes of keys and values "
                "(--kv_max_bytes");
}

// 2000 values of 1 MiB once grew the coordinator to 2 GiB: the total is
// capped, overwrites and deletes give the room back.
TEST_F(KvStoreTest, TotalBytesLimit) {
  const std::string mib(KvStore::kMaxValueBytes, 'v');
  const size_t fit = kMaxKvBytes / (mib.size() + 8);
  for (size_t i = 0; i < fit; ++i) {
    ASSERT_TRUE(kv_.Set(absl::StrFormat("big%05d", i), mib).ok()) << i;
  }
  EXPECT_STATUS(kv_.Set("big-extra", mib), absl::StatusCode::kResourceExhausted,
                "key-value broker would hold more than 268435456 bytes");
  EXPECT_FALSE(kv_.Peek("big-extra").has_value());
  // Small keys still fit in what is left; a value grown past it does not.
  EXPECT_TRUE(kv_.Set("small", "x").ok());
  EXPECT_STATUS(kv_.Set("small", mib), absl::StatusCode::kResourceExhausted,
                "would hold more than");
  EXPECT_EQ(*kv_.Peek("small"), "x");
  // Shrinking a value or deleting a key makes room.
  ASSERT_TRUE(kv_.Set("big00000", "tiny").ok());
  EXPECT_TRUE(kv_.Set("big-extra", mib).ok());
  EXPECT_STATUS(kv_.Set("big-extra2", mib),
                absl::StatusCode::kResourceExhausted, "would hold more than");
  ASSERT_TRUE(*kv_.Delete("big00001"));
  EXPECT_TRUE(kv_.Set("big-extra2", mib).ok());
}

TEST_F(KvStoreTest, EveryGetIsAnsweredExactlyOnceWhenSetRacesExpiry) {
  constexpr int kWaiters = 100;
  std::vector<std::shared_ptr<GetResult>> results;
  const absl::Time base = MonotonicNow();
  for (int i = 0; i < kWaiters; ++i) {
    results.push_back(
        StartGet(kv_, "race", base + absl::Microseconds(200 * (i % 20))));
    // (Those whose deadline passed already are answered NotFound at once.)
  }
  ASSERT_TRUE(kv_.Set("race", "won").ok());
  for (auto& r : results) ASSERT_TRUE(r->Wait());
  // Stop the timer: no expiry can still be in flight after this.
  timer_.reset();
  for (auto& r : results) {
    EXPECT_EQ(r->calls.load(), 1);
    if (r->value.ok()) {
      EXPECT_EQ(*r->value, "won");
    } else {
      EXPECT_TRUE(r->value.status().code() ==
                      absl::StatusCode::kDeadlineExceeded ||
                  r->value.status().code() == absl::StatusCode::kNotFound)
          << r->value.status();
    }
  }
}

// Keys have owners (issue 36): "r<N>/" keys are rank N's from the start,
// other keys their creator's, keys under a shared prefix no one's (written
// with compare-and-set). Everyone reads.
TEST_F(KvStoreTest, EveryKeyHasAnOwner) {
  KvStore kv(timer_.get(), KvLimits{}, KvRules{4, {"shared/"}});
  // Nobody can set a rank's key first...
  EXPECT_STATUS(kv.Set("r1/nccl/uid", "poison", 0),
                absl::StatusCode::kPermissionDenied,
                "rank 0 cannot set key 'r1/nccl/uid': keys under 'r1/' "
                "belong to rank 1");
  ASSERT_TRUE(kv.Set("r1/nccl/uid", "id", 1).ok());
  // ...nor change, add to or delete it.
  EXPECT_EQ(kv.Set("r1/nccl/uid", "poison", 2).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_STATUS(kv.Delete("r1/nccl/uid", 2).status(),
                absl::StatusCode::kPermissionDenied,
                "rank 2 cannot delete key 'r1/nccl/uid'");
  ASSERT_TRUE(kv.Set("r2/count", "1", 2).ok());
  EXPECT_STATUS(kv.Add("r2/count", 1000, 3).status(),
                absl::StatusCode::kPermissionDenied,
                "rank 3 cannot add to key 'r2/count'");
  EXPECT_EQ(*kv.Peek("r1/nccl/uid"), "id");
  EXPECT_EQ(*kv.Add("r2/count", 1, 2), 2);
  // "r<N>/" must name a rank of the job, canonically.
  EXPECT_STATUS(kv.Set("r4/x", "v", 0), absl::StatusCode::kInvalidArgument,
                "names no rank of this job");
  EXPECT_EQ(kv.Set("r01/x", "v", 1).code(), absl::StatusCode::kInvalidArgument);
  // Keys like "rank0/x" or "r/x" are ordinary keys.
  EXPECT_TRUE(kv.Set("rank0/x", "v", 3).ok());

  // Any other key: its creator's until it is deleted.
  ASSERT_TRUE(kv.Set("gloo/world/addr0", "a", 0).ok());
  EXPECT_STATUS(kv.Delete("gloo/world/addr0", 3).status(),
                absl::StatusCode::kPermissionDenied,
                "rank 3 cannot delete key 'gloo/world/addr0': rank 0 created "
                "it");
  EXPECT_TRUE(*kv.Delete("gloo/world/addr0", 0));
  EXPECT_TRUE(kv.Set("gloo/world/addr0", "b", 3).ok());  // free again

  // Shared: any rank, with compare-and-set only.
  EXPECT_STATUS(kv.Set("shared/leader", "0", 0),
                absl::StatusCode::kPermissionDenied,
                "under the shared prefix 'shared/' (--kv_shared_prefixes), "
                "whose keys are written with compare-and-set");
  EXPECT_TRUE(*kv.SetAs("shared/leader", "0", 0, {std::nullopt, true}));
  EXPECT_FALSE(*kv.SetAs("shared/leader", "1", 1, {std::nullopt, true}));
  EXPECT_FALSE(*kv.SetAs("shared/leader", "1", 1, {"7", false}));
  EXPECT_TRUE(*kv.SetAs("shared/leader", "1", 1, {"0", false}));
  EXPECT_EQ(*kv.Peek("shared/leader"), "1");
  EXPECT_EQ(*kv.Add("shared/count", 1, 0), 1);
  EXPECT_EQ(*kv.Add("shared/count", 1, 2), 2);
  EXPECT_EQ(kv.Delete("shared/leader", 2).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(*kv.Delete("shared/leader", 2, std::string("0")));
  EXPECT_TRUE(*kv.Delete("shared/leader", 2, std::string("1")));
  // The daemon itself (no rank) is held to no owner.
  EXPECT_TRUE(kv.Set("r1/nccl/uid", "daemon", KvStore::kNoRank).ok());
}

// With recovery on, "epoch/<N>/<rest>" is owned as <rest> is: no rank can
// create another's rendezvous key of the next epoch first.
TEST_F(KvStoreTest, EpochScopedKeysAreOwnedByTheirRemainder) {
  KvStore kv(timer_.get(), KvLimits{}, KvRules{4, {"shared/"}, true});
  EXPECT_STATUS(kv.Set("epoch/2/r0/nccl_uid", "poison", 1),
                absl::StatusCode::kPermissionDenied,
                "keys under 'r0/' belong to rank 0");
  EXPECT_TRUE(kv.Set("epoch/2/r0/nccl_uid", "id", 0).ok());
  EXPECT_EQ(kv.Set("epoch/2/r9/x", "v", 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_STATUS(kv.Set("epoch/2/shared/leader", "0", 0),
                absl::StatusCode::kPermissionDenied, "compare-and-set");
  EXPECT_TRUE(*kv.SetAs("epoch/2/shared/leader", "0", 0, {std::nullopt, true}));
  EXPECT_TRUE(*kv.SetAs("epoch/2/shared/leader", "1", 1, {"0", false}));
  // Without recovery, epoch/ is an ordinary prefix: its creator's.
  KvStore plain(timer_.get(), KvLimits{}, KvRules{4, {"shared/"}});
  EXPECT_TRUE(plain.Set("epoch/2/r0/nccl_uid", "v", 1).ok());
}

// A rank's keys and values count against its own quota, so one rank cannot
// fill the broker and deny the others (issue 36).
TEST_F(KvStoreTest, BytesPerRankQuota) {
  KvStore kv(timer_.get(), KvLimits{1 << 20, 1000, 1000, 1000},
             KvRules{4, {"shared/"}});
  const std::string big(900, 'x');
  ASSERT_TRUE(kv.Set("r0/a", big, 0).ok());  // 904 bytes
  EXPECT_EQ(kv.bytes_of(0), 904u);
  EXPECT_STATUS(kv.Set("r0/b", std::string(100, 'y'), 0),
                absl::StatusCode::kResourceExhausted,
                "rank 0 holds 904 bytes of keys and values; setting key "
                "'r0/b' (104 bytes) would pass its quota of 1000 bytes "
                "(--kv_max_bytes_per_rank)");
  // Replacing a value counts only the difference.
  EXPECT_TRUE(kv.Set("r0/a", std::string(990, 'z'), 0).ok());
  EXPECT_EQ(kv.bytes_of(0), 994u);
  // Another rank still has its whole quota.
  EXPECT_TRUE(kv.Set("r1/a", big, 1).ok());
  // A shared key's bytes count against its last writer.
  EXPECT_TRUE(*kv.SetAs("shared/k", "v", 2, {std::nullopt, true}));
  EXPECT_EQ(kv.bytes_of(2), 9u);
  EXPECT_TRUE(*kv.SetAs("shared/k", "vv", 3, {"v", false}));
  EXPECT_EQ(kv.bytes_of(2), 0u);
  EXPECT_EQ(kv.bytes_of(3), 10u);
  EXPECT_EQ(kv.keys_of(3), 1u);
  // Deleting gives the room back.
  EXPECT_TRUE(*kv.Delete("r0/a", 0));
  EXPECT_EQ(kv.bytes_of(0), 0u);
  EXPECT_TRUE(kv.Set("r0/b", std::string(100, 'y'), 0).ok());
}

// A write for no rank (the daemon's) to a rank's key changes that rank's
// tally, so the rank's quota bounds it too. (Before, it pushed rank 0 to
// 1,004 bytes of its 1,000.)
TEST_F(KvStoreTest, AWriteForNoRankKeepsTheChargedRankInsideItsQuota) {
  KvStore kv(timer_.get(), KvLimits{1 << 20, 1000, 1000, 1000},
             KvRules{4, {"shared/"}});
  ASSERT_TRUE(kv.Set("r0/a", "x", 0).ok());
  EXPECT_STATUS(kv.Set("r0/a", std::string(1000, 'y')),
                absl::StatusCode::kResourceExhausted,
                "rank 0 holds 5 bytes of keys and values; setting key "
                "'r0/a' (1004 bytes) would pass its quota of 1000 bytes");
  EXPECT_EQ(kv.bytes_of(0), 5u);
  EXPECT_EQ(*kv.Peek("r0/a"), "x");
  EXPECT_TRUE(kv.Set("r0/a", std::string(996, 'y')).ok());
  EXPECT_EQ(kv.bytes_of(0), 1000u);
  // A key of no rank is bounded by the store's totals only.
  EXPECT_TRUE(kv.Set("daemon/k", std::string(2000, 'z')).ok());
}

}  // namespace
}  // namespace rankd
