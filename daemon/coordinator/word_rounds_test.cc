#include "daemon/coordinator/word_rounds.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

// One contributor's outcome, shared with its callback.
struct Outcome {
  absl::Notification done;
  std::atomic<int> calls{0};
  absl::StatusOr<v1::AllGatherWordsResponse> value;

  bool Wait() { return done.WaitForNotificationWithTimeout(kPatience); }
  bool Ready() const { return done.HasBeenNotified(); }
  absl::Status status() const { return value.status(); }
};

using Frames = std::vector<std::pair<uint32_t, std::vector<uint32_t>>>;

std::vector<v1::RankFrame> MakeFrames(const Frames& frames) {
  std::vector<v1::RankFrame> out;
  for (const auto& [rank, words] : frames) {
    v1::RankFrame f;
    f.set_rank(rank);
    for (uint32_t w : words) f.add_words(w);
    out.push_back(std::move(f));
  }
  return out;
}

std::shared_ptr<Outcome> Contribute(
    WordRounds& rounds, uint64_t round, const Frames& frames,
    absl::Time deadline, absl::Duration waited = absl::ZeroDuration()) {
  auto outcome = std::make_shared<Outcome>();
  rounds.Contribute(
      round, MakeFrames(frames), deadline,
      [outcome](absl::StatusOr<v1::AllGatherWordsResponse> v) {
        if (outcome->calls++ == 0) {
          outcome->value = std::move(v);
          outcome->done.Notify();
        }
      },
      waited);
  return outcome;
}

std::vector<uint32_t> Words(const v1::AllGatherWordsResponse& r) {
  return std::vector<uint32_t>(r.words().begin(), r.words().end());
}

#define EXPECT_STATUS(expr, code_, substring)                      \
  do {                                                             \
    const absl::Status _s = (expr);                                \
    EXPECT_EQ(_s.code(), (code_)) << _s;                           \
    EXPECT_TRUE(absl::StrContains(_s.message(), (substring)))      \
        << "missing '" << (substring) << "' in: " << _s.message(); \
  } while (0)

class WordRoundsTest : public ::testing::Test {
 protected:
  ~WordRoundsTest() override {
    // Stop the timer before the rounds go away.
    timer_.reset();
  }

  // World of `world` ranks, two per node.
  void Make(uint32_t world) {
    rounds_ = std::make_unique<WordRounds>(
        world, [](uint32_t rank) { return rank / 2; }, timer_.get());
  }

  std::unique_ptr<DeadlineTimer> timer_ = std::make_unique<DeadlineTimer>();
  std::unique_ptr<WordRounds> rounds_;
};

// The bytes one rank's frames hold in open rounds are bounded (issue 36):
// a contribution past the limit is refused naming the rank and the flag,
// and a round that ends gives its frames' bytes back.
TEST_F(WordRoundsTest, BytesPerRankInOpenRoundsAreBounded) {
  rounds_ = std::make_unique<WordRounds>(
      2, [](uint32_t rank) { return rank; }, timer_.get(),
      /*max_bytes_per_rank=*/40);
  const std::vector<uint32_t> four(4, 7);  // 16 bytes
  auto r1 = Contribute(*rounds_, 1, {{1, four}}, Far());
  auto r2 = Contribute(*rounds_, 2, {{1, four}}, Far());
  auto r3 = Contribute(*rounds_, 3, {{1, four}}, Far());
  ASSERT_TRUE(r3->Ready());
  EXPECT_EQ(r3->status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(
      r3->status().message(),
      "rank 1's frames in open all_gather_words rounds hold 32 bytes on the "
      "coordinator; round 3's 16 more would pass the limit of 40 bytes per "
      "rank (--max_round_bytes_per_rank)"))
      << r3->status();
  // Rank 0 has its own room; round 1 completes and gives rank 1's back.
  auto r0 = Contribute(*rounds_, 1, {{0, four}}, Far());
  ASSERT_TRUE(r1->Wait() && r0->Wait());
  EXPECT_TRUE(r1->status().ok()) << r1->status();
  auto again = Contribute(*rounds_, 4, {{1, four}}, Far());
  EXPECT_FALSE(again->Ready());  // waiting: admitted
}

TEST_F(WordRoundsTest, OneRoundAssemblesRankMajorForEveryContributor) {
  Make(4);
  // Node 1 first, then node 0: the result is still rank-major.
  auto node1 = Contribute(*rounds_, 1, {{3, {30, 31}}, {2, {20, 21}}}, Far());
  EXPECT_FALSE(node1->Ready());
  EXPECT_EQ(rounds_->completed_rounds(), 0u);
  auto node0 = Contribute(*rounds_, 1, {{0, {0, 1}}, {1, {10, 11}}}, Far());
  ASSERT_TRUE(node0->Wait());
  ASSERT_TRUE(node1->Wait());
  for (const auto& o : {node0, node1}) {
    ASSERT_TRUE(o->value.ok()) << o->status();
    EXPECT_EQ(o->value->round(), 1u);
    EXPECT_EQ(o->value->words_per_rank(), 2u);
    EXPECT_EQ(Words(*o->value),
              (std::vector<uint32_t>{0, 1, 10, 11, 20, 21, 30, 31}));
    EXPECT_EQ(o->calls.load(), 1);
  }
  EXPECT_EQ(rounds_->completed_rounds(), 1u);
  EXPECT_TRUE(rounds_->WaitingRanks().empty());
}

TEST_F(WordRoundsTest, PerRankContributionsAndEmptyFrames) {
  Make(2);
  auto r0 = Contribute(*rounds_, 1, {{0, {}}}, Far());
  auto r1 = Contribute(*rounds_, 1, {{1, {}}}, Far());
  ASSERT_TRUE(r0->Wait());
  ASSERT_TRUE(r1->Wait());
  ASSERT_TRUE(r0->value.ok()) << r0->status();
  EXPECT_EQ(r0->value->words_per_rank(), 0u);
  EXPECT_EQ(r0->value->words_size(), 0);
}

TEST_F(WordRoundsTest, SingleRankWorldCompletesAtOnce) {
  Make(1);
  auto r = Contribute(*rounds_, 1, {{0, {7, 8, 9}}}, Far());
  ASSERT_TRUE(r->Ready());
  ASSERT_TRUE(r->value.ok()) << r->status();
  EXPECT_EQ(Words(*r->value), (std::vector<uint32_t>{7, 8, 9}));
}

TEST_F(WordRoundsTest, ConsecutiveRounds) {
  Make(2);
  for (uint64_t round = 1; round <= 5; ++round) {
    auto a = Contribute(*rounds_, round, {{0, {static_cast<uint32_t>(round)}}},
                        Far());
    auto b = Contribute(*rounds_, round,
                        {{1, {static_cast<uint32_t>(round * 100)}}}, Far());
    ASSERT_TRUE(a->Wait());
    ASSERT_TRUE(b->Wait());
    ASSERT_TRUE(a->value.ok()) << a->status();
    EXPECT_EQ(a->value->round(), round);
    EXPECT_EQ(Words(*a->value),
              (std::vector<uint32_t>{static_cast<uint32_t>(round),
                                     static_cast<uint32_t>(round * 100)}));
    EXPECT_EQ(rounds_->completed_rounds(), round);
  }
}

TEST_F(WordRoundsTest, FrameLengthMismatchNamesRanksOnEveryContributor) {
  Make(4);
  auto a = Contribute(*rounds_, 1, {{0, {1, 2}}, {1, {1, 2}}}, Far());
  auto b = Contribute(*rounds_, 1, {{2, {1, 2}}}, Far());
  auto c = Contribute(*rounds_, 1, {{3, {1, 2, 3}}}, Far());
  for (const auto& o : {a, b, c}) {
    ASSERT_TRUE(o->Wait());
    EXPECT_STATUS(o->status(), absl::StatusCode::kInvalidArgument,
                  "all_gather_words round 1: frame lengths disagree (every "
                  "rank must send the same length): 2 words from ranks 0-2; "
                  "3 words from rank 3");
    EXPECT_EQ(o->calls.load(), 1);
  }
  // The round is over: a late duplicate gets the same error.
  auto late = Contribute(*rounds_, 1, {{0, {1, 2}}}, Far());
  ASSERT_TRUE(late->Ready());
  EXPECT_STATUS(late->status(), absl::StatusCode::kInvalidArgument,
                "frame lengths disagree");
  // The next round works.
  auto x = Contribute(*rounds_, 2, {{0, {}}, {1, {}}, {2, {}}, {3, {}}}, Far());
  ASSERT_TRUE(x->Ready());
  EXPECT_TRUE(x->value.ok()) << x->status();
}

// A node's partial batch arrives just before the deadline, saying how long
// the round had waited there: the message counts from then.
TEST_F(WordRoundsTest, TimeoutCountsFromTheEarliestContributionsStart) {
  Make(2);
  auto a = Contribute(*rounds_, 1, {{0, {1}}},
                      MonotonicNow() + absl::Milliseconds(50),
                      /*waited=*/absl::Milliseconds(950));
  ASSERT_TRUE(a->Wait());
  EXPECT_STATUS(a->status(), absl::StatusCode::kDeadlineExceeded,
                "all_gather_words round 1 timed out after ");
  EXPECT_STATUS(a->status(), absl::StatusCode::kDeadlineExceeded,
                " ms waiting for rank 1");
  // 1000 ms less the time between reading the clock here and there.
  int64_t ms = -1;
  const std::string message(a->status().message());
  const size_t at = message.find("after ") + 6;
  ASSERT_TRUE(
      absl::SimpleAtoi(message.substr(at, message.find(" ms", at) - at), &ms))
      << message;
  EXPECT_GE(ms, 990) << message;
  EXPECT_LE(ms, 1000) << message;
}

TEST_F(WordRoundsTest, TimeoutNamesMissingRanksAndTheirNodes) {
  Make(6);
  const absl::Time start = MonotonicNow();
  auto a = Contribute(*rounds_, 1, {{0, {1}}, {1, {1}}},
                      start + absl::Milliseconds(80));
  auto b = Contribute(*rounds_, 1, {{3, {1}}}, Far());
  ASSERT_TRUE(a->Wait());
  ASSERT_TRUE(b->Wait());
  EXPECT_GE(MonotonicNow(), start + absl::Milliseconds(80));
  for (const auto& o : {a, b}) {
    EXPECT_STATUS(o->status(), absl::StatusCode::kDeadlineExceeded,
                  "all_gather_words round 1 timed out after ");
    EXPECT_STATUS(o->status(), absl::StatusCode::kDeadlineExceeded,
                  " ms waiting for ranks 2, 4-5 (node 1: 2; node 2: 4-5)");
  }
  // A straggler for the expired round gets the same error at once.
  auto late = Contribute(*rounds_, 1, {{2, {1}}}, Far());
  ASSERT_TRUE(late->Ready());
  EXPECT_STATUS(late->status(), absl::StatusCode::kDeadlineExceeded,
                "waiting for ranks 2, 4-5");
  EXPECT_EQ(rounds_->completed_rounds(), 1u);
}

TEST_F(WordRoundsTest, TimeoutWithOneMissingRankUsesSingular) {
  Make(2);
  auto a = Contribute(*rounds_, 1, {{0, {1}}},
                      MonotonicNow() + absl::Milliseconds(20));
  ASSERT_TRUE(a->Wait());
  EXPECT_STATUS(a->status(), absl::StatusCode::kDeadlineExceeded,
                " ms waiting for rank 1 (node 0: 1)");
}

TEST_F(WordRoundsTest, EarlierDeadlineOfALaterContributorApplies) {
  Make(3);
  auto a = Contribute(*rounds_, 1, {{0, {1}}}, Far());
  auto b = Contribute(*rounds_, 1, {{1, {1}}},
                      MonotonicNow() + absl::Milliseconds(20));
  ASSERT_TRUE(a->Wait());
  ASSERT_TRUE(b->Wait());
  EXPECT_STATUS(a->status(), absl::StatusCode::kDeadlineExceeded,
                "waiting for rank 2 (node 1: 2)");
}

TEST_F(WordRoundsTest, RoundZeroIsInvalid) {
  Make(2);
  auto r = Contribute(*rounds_, 0, {{0, {1}}}, Far());
  ASSERT_TRUE(r->Ready());
  EXPECT_STATUS(r->status(), absl::StatusCode::kInvalidArgument,
                "round numbers start at 1");
}

TEST_F(WordRoundsTest, CompletedRoundSentAgainIsFailedPrecondition) {
  Make(1);
  ASSERT_TRUE(Contribute(*rounds_, 1, {{0, {1}}}, Far())->value.ok());
  ASSERT_TRUE(Contribute(*rounds_, 2, {{0, {1}}}, Far())->value.ok());
  for (uint64_t round : {1u, 2u}) {
    auto again = Contribute(*rounds_, round, {{0, {1}}}, Far());
    ASSERT_TRUE(again->Ready());
    EXPECT_STATUS(again->status(), absl::StatusCode::kFailedPrecondition,
                  absl::StrCat("all_gather_words round ", round,
                               " has already completed"));
  }
  EXPECT_EQ(rounds_->completed_rounds(), 2u);
}

TEST_F(WordRoundsTest, RankContributingTwiceToARoundIsRejected) {
  Make(3);
  auto first = Contribute(*rounds_, 1, {{1, {5}}}, Far());
  auto twice = Contribute(*rounds_, 1, {{0, {5}}, {1, {6}}}, Far());
  ASSERT_TRUE(twice->Ready());
  EXPECT_STATUS(twice->status(), absl::StatusCode::kInvalidArgument,
                "rank 1 contributed twice to all_gather_words round 1");
  // The rejected contribution did not count rank 0 either; the first one
  // still waits, and the round completes with the original frame.
  EXPECT_FALSE(first->Ready());
  EXPECT_EQ(rounds_->WaitingRanks(), (std::map<uint32_t, uint64_t>{{1, 1}}));
  auto rest = Contribute(*rounds_, 1, {{0, {4}}, {2, {7}}}, Far());
  ASSERT_TRUE(first->Wait());
  ASSERT_TRUE(first->value.ok()) << first->status();
  EXPECT_EQ(Words(*first->value), (std::vector<uint32_t>{4, 5, 7}));
  EXPECT_EQ(twice->calls.load(), 1);
}

TEST_F(WordRoundsTest, RankTwiceInOneContributionIsRejected) {
  Make(3);
  auto r = Contribute(*rounds_, 1, {{2, {1}}, {2, {1}}}, Far());
  ASSERT_TRUE(r->Ready());
  EXPECT_STATUS(r->status(), absl::StatusCode::kInvalidArgument,
                "rank 2 appears twice in one contribution to round 1");
  EXPECT_TRUE(rounds_->WaitingRanks().empty());
}

TEST_F(WordRoundsTest, RankOutsideWorldIsRejected) {
  Make(3);
  auto r = Contribute(*rounds_, 1, {{3, {1}}}, Far());
  ASSERT_TRUE(r->Ready());
  EXPECT_STATUS(r->status(), absl::StatusCode::kInvalidArgument,
                "rank 3 is outside the world of size 3");
}

TEST_F(WordRoundsTest, FrameSizeLimit) {
  Make(2);
  std::vector<uint32_t> too_big(WordRounds::kMaxWordsPerRank + 1, 1);
  auto r = Contribute(*rounds_, 1, {{1, too_big}}, Far());
  ASSERT_TRUE(r->Ready());
  EXPECT_STATUS(r->status(), absl::StatusCode::kInvalidArgument,
                "rank 1 in round 1: frame of 65537 words exceeds the limit of "
                "65536 words per rank per round");
  EXPECT_TRUE(rounds_->WaitingRanks().empty());

  // Exactly the limit is fine.
  std::vector<uint32_t> max(WordRounds::kMaxWordsPerRank, 2);
  auto a = Contribute(*rounds_, 1, {{0, max}}, Far());
  auto b = Contribute(*rounds_, 1, {{1, max}}, Far());
  ASSERT_TRUE(a->Wait());
  ASSERT_TRUE(a->value.ok()) << a->status();
  EXPECT_EQ(a->value->words_per_rank(), WordRounds::kMaxWordsPerRank);
  EXPECT_EQ(a->value->words_size(),
            static_cast<int>(2 * WordRounds::kMaxWordsPerRank));
}

// A round's result must fit one reply: in a world of 4096 ranks each may
// send at most 8 Mi / 4096 = 2048 words.
TEST_F(WordRoundsTest, ResultSizeLimitShrinksFramesInLargeWorlds) {
  Make(4096);
  EXPECT_EQ(MaxFrameWords(4096), 2048u);
  std::vector<uint32_t> too_big(2049, 1);
  auto r = Contribute(*rounds_, 1, {{7, too_big}}, Far());
  ASSERT_TRUE(r->Ready());
  EXPECT_STATUS(r->status(), absl::StatusCode::kInvalidArgument,
                "rank 7 in round 1: frame of 2049 words exceeds the limit of "
                "2048 words per rank per round in a world of 4096 ranks (a "
                "round's result holds at most 8388608 words)");
  EXPECT_TRUE(rounds_->WaitingRanks().empty());
  auto fits = Contribute(*rounds_, 1, {{7, std::vector<uint32_t>(2048, 1)}},
                         MonotonicNow() + absl::Milliseconds(1));
  EXPECT_TRUE(fits->Wait());
  EXPECT_EQ(fits->status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(WordRoundsTest, RoundsMayRunAheadByAtMostMaxOpenRounds) {
  Make(2);
  static_assert(WordRounds::kMaxOpenRounds == 64);
  // Nothing open, nothing completed: round 1 is next, 64 is the furthest.
  auto too_far = Contribute(*rounds_, 65, {{0, {1}}}, Far());
  ASSERT_TRUE(too_far->Ready());
  EXPECT_STATUS(too_far->status(), absl::StatusCode::kFailedPrecondition,
                "all_gather_words round 65 is more than 64 rounds ahead of "
                "round 1, the oldest one still open");

  auto r1 = Contribute(*rounds_, 1, {{0, {1}}}, Far());
  auto r64 = Contribute(*rounds_, 64, {{0, {1}}}, Far());
  EXPECT_FALSE(r1->Ready());
  EXPECT_FALSE(r64->Ready());
  auto r65 = Contribute(*rounds_, 65, {{0, {1}}}, Far());
  ASSERT_TRUE(r65->Ready());
  EXPECT_STATUS(r65->status(), absl::StatusCode::kFailedPrecondition,
                "round 65 is more than 64 rounds ahead of round 1");

  // Completing round 1 moves the window; rank 1 joins an open round 64 even
  // though it is far ahead (open rounds are always accepted).
  auto r1b = Contribute(*rounds_, 1, {{1, {2}}}, Far());
  ASSERT_TRUE(r1->Wait());
  ASSERT_TRUE(r1->value.ok()) << r1->status();
  auto r64b = Contribute(*rounds_, 64, {{1, {2}}}, Far());
  ASSERT_TRUE(r64->Wait());
  EXPECT_TRUE(r64->value.ok()) << r64->status();
  // Rounds 2-63 have not happened: round 64 counts once they have.
  EXPECT_EQ(rounds_->completed_rounds(), 1u);
}

// A round opened far ahead (by a node that is authenticated but wrong) that
// expires neither advances the completed-round counter nor blocks the rounds
// before it; honest ranks that reach it get its failure, naming who was
// missing, and the rounds after it go on.
TEST_F(WordRoundsTest, AnExpiredRoundFarAheadNeitherCountsNorBlocks) {
  Make(2);
  for (uint64_t n = 1; n <= 3; ++n) {
    auto a = Contribute(*rounds_, n, {{0, {1}}}, Far());
    auto b = Contribute(*rounds_, n, {{1, {2}}}, Far());
    ASSERT_TRUE(a->Wait() && b->Wait());
  }
  auto ahead = Contribute(*rounds_, 13, {{0, {9}}},
                          MonotonicNow() + absl::Milliseconds(1));
  ASSERT_TRUE(ahead->Wait());
  EXPECT_STATUS(ahead->status(), absl::StatusCode::kDeadlineExceeded,
                "round 13 timed out");
  EXPECT_EQ(rounds_->completed_rounds(), 3u);
  for (uint64_t n = 4; n <= 12; ++n) {
    auto a = Contribute(*rounds_, n, {{0, {1}}}, Far());
    auto b = Contribute(*rounds_, n, {{1, {2}}}, Far());
    ASSERT_TRUE(a->Wait() && b->Wait());
    ASSERT_TRUE(a->value.ok()) << "round " << n << ": " << a->status();
    EXPECT_EQ(rounds_->completed_rounds(), n < 12 ? n : 13u);
  }
  auto late = Contribute(*rounds_, 13, {{1, {2}}}, Far());
  ASSERT_TRUE(late->Ready());
  EXPECT_STATUS(late->status(), absl::StatusCode::kDeadlineExceeded,
                "round 13 timed out after ");
  EXPECT_STATUS(late->status(), absl::StatusCode::kDeadlineExceeded,
                "waiting for rank 1 (node 0: 1)");
  auto a = Contribute(*rounds_, 14, {{0, {1}}}, Far());
  auto b = Contribute(*rounds_, 14, {{1, {2}}}, Far());
  ASSERT_TRUE(a->Wait() && b->Wait());
  EXPECT_TRUE(a->value.ok()) << a->status();
  EXPECT_EQ(rounds_->completed_rounds(), 14u);
}

TEST_F(WordRoundsTest, WaitingRanksReportsOldestOpenRound) {
  Make(4);
  auto a = Contribute(*rounds_, 1, {{0, {1}}, {1, {1}}}, Far());
  auto b = Contribute(*rounds_, 2, {{0, {1}}}, Far());
  auto c = Contribute(*rounds_, 2, {{3, {1}}}, Far());
  EXPECT_EQ(rounds_->WaitingRanks(),
            (std::map<uint32_t, uint64_t>{{0, 1}, {1, 1}, {3, 2}}));
  rounds_->Fail(absl::CancelledError("test over"));
}

TEST_F(WordRoundsTest, FailReleasesOpenRoundsAndLaterContributions) {
  Make(3);
  auto a = Contribute(*rounds_, 1, {{0, {1}}}, Far());
  auto b = Contribute(*rounds_, 2, {{1, {1}}}, Far());
  const absl::Status cause = absl::AbortedError("job failed: node 1 lost");
  rounds_->Fail(cause);
  ASSERT_TRUE(a->Wait());
  ASSERT_TRUE(b->Wait());
  EXPECT_EQ(a->status(), cause);
  EXPECT_EQ(b->status(), cause);
  EXPECT_TRUE(rounds_->WaitingRanks().empty());

  auto later = Contribute(*rounds_, 1, {{2, {1}}}, Far());
  ASSERT_TRUE(later->Ready());
  EXPECT_EQ(later->status(), cause);

  // The first cause wins.
  rounds_->Fail(absl::UnavailableError("shutting down"));
  auto even_later = Contribute(*rounds_, 3, {{2, {1}}}, Far());
  ASSERT_TRUE(even_later->Ready());
  EXPECT_EQ(even_later->status(), cause);
  EXPECT_EQ(a->calls.load(), 1);
}

TEST_F(WordRoundsTest, ConcurrentContributorsAllGetTheSameResult) {
  constexpr uint32_t kWorld = 16;
  constexpr uint64_t kRounds = 20;
  Make(kWorld);
  std::vector<std::vector<std::shared_ptr<Outcome>>> outcomes(kWorld);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([this, r, &outcomes] {
      for (uint64_t round = 1; round <= kRounds; ++round) {
        auto o = Contribute(*rounds_, round,
                            {{r, {r, static_cast<uint32_t>(round)}}}, Far());
        // Like a real rank: the next round only after this one.
        ASSERT_TRUE(o->Wait());
        outcomes[r].push_back(o);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_EQ(outcomes[r].size(), kRounds);
    for (uint64_t i = 0; i < kRounds; ++i) {
      const auto& o = outcomes[r][i];
      ASSERT_TRUE(o->value.ok()) << o->status();
      std::vector<uint32_t> want;
      for (uint32_t k = 0; k < kWorld; ++k) {
        want.push_back(k);
        want.push_back(static_cast<uint32_t>(i + 1));
      }
      EXPECT_EQ(Words(*o->value), want);
    }
  }
  EXPECT_EQ(rounds_->completed_rounds(), kRounds);
}

// A new epoch (issue 38): open rounds fail with the cause, numbering
// starts again at 1, and a contribution admitted in the ended epoch is
// refused naming both epochs.
TEST_F(WordRoundsTest, RestartEndsTheEpochAndNumbersRoundsAfresh) {
  Make(2);
  auto done = Contribute(*rounds_, 1, {{0, {1}}, {1, {2}}}, Far());
  ASSERT_TRUE(done->Wait() && done->value.ok());
  auto open = Contribute(*rounds_, 2, {{0, {1}}}, Far());
  ASSERT_FALSE(open->Ready());
  rounds_->Restart(2, absl::AbortedError("epoch 1 ended: rank 1 lost"));
  ASSERT_TRUE(open->Wait());
  EXPECT_STATUS(open->status(), absl::StatusCode::kAborted, "epoch 1 ended");
  EXPECT_EQ(rounds_->completed_rounds(), 0u);
  // Round 1 again, in epoch 2.
  auto again = std::make_shared<Outcome>();
  rounds_->ContributeShared(
      1, MakeFrames({{0, {5}}, {1, {6}}}), Far(),
      [again](std::shared_ptr<const WordRounds::Outcome> o) {
        again->value = o->result();
        again->done.Notify();
      },
      absl::ZeroDuration(), /*epoch=*/2);
  ASSERT_TRUE(again->Wait());
  ASSERT_TRUE(again->value.ok()) << again->status();
  EXPECT_EQ(Words(*again->value), (std::vector<uint32_t>{5, 6}));
  auto stale = std::make_shared<Outcome>();
  rounds_->ContributeShared(
      2, MakeFrames({{0, {5}}}), Far(),
      [stale](std::shared_ptr<const WordRounds::Outcome> o) {
        stale->value = o->result();
        stale->done.Notify();
      },
      absl::ZeroDuration(), /*epoch=*/1);
  ASSERT_TRUE(stale->Wait());
  EXPECT_STATUS(stale->status(), absl::StatusCode::kFailedPrecondition,
                "round 2 of epoch 1 is refused: the job is at epoch 2");
}

TEST_F(WordRoundsTest, RestartToAnEarlierEpochIsIgnored) {
  Make(2);
  // Two losses on different threads may restart out of order: 3, then 2.
  rounds_->Restart(3, absl::AbortedError("epoch 2 ended: rank 0 lost"));
  rounds_->Restart(2, absl::AbortedError("epoch 1 ended: rank 1 lost"));
  auto current = std::make_shared<Outcome>();
  rounds_->ContributeShared(
      1, MakeFrames({{0, {5}}, {1, {6}}}), Far(),
      [current](std::shared_ptr<const WordRounds::Outcome> o) {
        current->value = o->result();
        current->done.Notify();
      },
      absl::ZeroDuration(), /*epoch=*/3);
  ASSERT_TRUE(current->Wait());
  ASSERT_TRUE(current->value.ok()) << current->status();
  EXPECT_EQ(Words(*current->value), (std::vector<uint32_t>{5, 6}));
}

// Recovery by domain (docs/contract.md, "Data-parallel domains"): a world
// of 4 ranks in 2 domains of 2, rank r on node r / 2.
class DomainRoundsTest : public WordRoundsTest {
 protected:
  void SetUp() override {
    rounds_ = std::make_unique<WordRounds>(
        4, [](uint32_t rank) { return rank / 2; }, timer_.get(),
        /*max_bytes_per_rank=*/0, /*domain_size=*/2);
  }

  // A contribution admitted at the job's epoch counter `epoch`.
  std::shared_ptr<Outcome> ContributeAt(uint64_t epoch, uint64_t round,
                                        const Frames& frames,
                                        absl::Time deadline = Far()) {
    auto outcome = std::make_shared<Outcome>();
    rounds_->ContributeShared(
        round, MakeFrames(frames), deadline,
        [outcome](std::shared_ptr<const WordRounds::Outcome> o) {
          if (outcome->calls++ == 0) {
            outcome->value = o->result();
            outcome->done.Notify();
          }
        },
        absl::ZeroDuration(), epoch);
    return outcome;
  }

  static std::vector<std::pair<uint32_t, uint64_t>> View(
      const v1::AllGatherWordsResponse& r) {
    std::vector<std::pair<uint32_t, uint64_t>> view;
    for (const auto& d : r.domains()) view.push_back({d.domain(), d.epoch()});
    return view;
  }
};

TEST_F(DomainRoundsTest, AWholeRoundSaysItSpansEveryDomain) {
  auto a = ContributeAt(1, 1, {{0, {10}}, {1, {11}}});
  auto b = ContributeAt(1, 1, {{2, {12}}, {3, {13}}});
  ASSERT_TRUE(a->Wait() && b->Wait());
  ASSERT_TRUE(a->value.ok()) << a->status();
  EXPECT_EQ(Words(*a->value), (std::vector<uint32_t>{10, 11, 12, 13}));
  EXPECT_FALSE(a->value->partial());
  EXPECT_EQ(View(*a->value),
            (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}, {1, 1}}));
}

TEST_F(DomainRoundsTest, OtherDomainsKeepServingWhileOneRecovers) {
  // Round 1 is in flight at domain 1's loss: it fails on every
  // contributor, domain 0's included, and so does a late contribution.
  auto early = ContributeAt(1, 1, {{0, {10}}, {2, {12}}});
  auto owed = rounds_->LoseDomain(
      1, 2, absl::AbortedError("domain 1 epoch 1 ended: rank 3 lost"));
  ASSERT_TRUE(owed.ok()) << owed.status();
  // The answers wait for the caller to send them (it may hold its lock).
  EXPECT_FALSE(early->Ready());
  owed->Send();
  ASSERT_TRUE(early->Ready());
  EXPECT_STATUS(early->status(), absl::StatusCode::kAborted, "rank 3 lost");
  auto late = ContributeAt(2, 1, {{1, {11}}});
  ASSERT_TRUE(late->Ready());
  EXPECT_STATUS(late->status(), absl::StatusCode::kAborted, "rank 3 lost");

  // Round 2 spans domain 0 alone, and says so.
  auto r2 = ContributeAt(2, 2, {{0, {20}}, {1, {21}}});
  ASSERT_TRUE(r2->Wait());
  ASSERT_TRUE(r2->value.ok()) << r2->status();
  EXPECT_EQ(Words(*r2->value), (std::vector<uint32_t>{20, 21}));
  EXPECT_TRUE(r2->value->partial());
  EXPECT_EQ(View(*r2->value),
            (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}}));
  // The recovering domain's frames are refused, naming it.
  auto refused = ContributeAt(2, 3, {{2, {30}}});
  ASSERT_TRUE(refused->Ready());
  EXPECT_STATUS(refused->status(), absl::StatusCode::kFailedPrecondition,
                "domain 1 is recovering at epoch 2");
  EXPECT_EQ(rounds_->completed_rounds(), 2u);
}

TEST_F(DomainRoundsTest, ARecoveredDomainReentersAtItsEntryRound) {
  ASSERT_TRUE(
      rounds_->LoseDomain(1, 2, absl::AbortedError("rank 2 lost")).ok());
  auto r1 = ContributeAt(2, 1, {{0, {10}}, {1, {11}}});
  ASSERT_TRUE(r1->Wait() && r1->value.ok());
  auto r2 = ContributeAt(2, 2, {{0, {20}}});  // open: rank 1 not yet in
  // Round 2 was opened without domain 1: an entry at or before it is
  // refused (it would change an open round's membership).
  EXPECT_STATUS(rounds_->AdmitDomain(1, 2, 2),
                absl::StatusCode::kFailedPrecondition, "round 2 was opened");
  ASSERT_TRUE(rounds_->AdmitDomain(1, 2, 3).ok());
  EXPECT_STATUS(rounds_->AdmitDomain(1, 2, 4),
                absl::StatusCode::kFailedPrecondition, "it is serving");
  // Round 2 still completes with domain 0 alone.
  auto r2b = ContributeAt(2, 2, {{1, {21}}});
  ASSERT_TRUE(r2->Wait() && r2b->Wait());
  ASSERT_TRUE(r2->value.ok()) << r2->status();
  EXPECT_TRUE(r2->value->partial());
  // Domain 1 below its entry round is refused, naming the entry round.
  auto early = ContributeAt(2, 2, {{2, {22}}});
  ASSERT_TRUE(early->Ready());
  EXPECT_STATUS(early->status(), absl::StatusCode::kFailedPrecondition,
                "from round 3 on");
  // Round 3 needs both domains again: domain 0 alone does not complete it.
  auto a = ContributeAt(2, 3, {{0, {30}}, {1, {31}}});
  EXPECT_FALSE(a->Ready());
  auto b = ContributeAt(2, 3, {{2, {32}}, {3, {33}}});
  ASSERT_TRUE(a->Wait() && b->Wait());
  ASSERT_TRUE(a->value.ok()) << a->status();
  EXPECT_EQ(Words(*a->value), (std::vector<uint32_t>{30, 31, 32, 33}));
  EXPECT_FALSE(a->value->partial());
  EXPECT_EQ(View(*a->value),
            (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}, {1, 2}}));
}

TEST_F(DomainRoundsTest, ADomainEntersBeyondTheWindowOfTheOldestOpenRound) {
  // While domain 1 recovers, rank 0 runs the full window ahead (rounds
  // 1..64 open) and rank 1 has sent none: the entry round past every round
  // admitted is 65, more than the window past round 1, the oldest open.
  ASSERT_TRUE(
      rounds_->LoseDomain(1, 2, absl::AbortedError("rank 2 lost")).ok());
  const uint64_t window = WordRounds::kMaxOpenRounds;
  std::vector<std::shared_ptr<Outcome>> ahead;
  for (uint64_t n = 1; n <= window; ++n) {
    ahead.push_back(ContributeAt(2, n, {{0, {static_cast<uint32_t>(n)}}}));
  }
  const uint64_t entry = window + 1;
  ASSERT_TRUE(rounds_->AdmitDomain(1, 2, entry).ok());
  // The entering domain's first rounds are taken (its own window starts at
  // its entry round), not refused as too far ahead of round 1.
  auto entered = ContributeAt(2, entry, {{2, {100}}, {3, {101}}});
  auto next = ContributeAt(2, entry + 1, {{2, {102}}, {3, {103}}});
  EXPECT_FALSE(entered->Ready()) << entered->status();
  EXPECT_FALSE(next->Ready()) << next->status();
  // Far beyond its own window is still refused.
  auto far = ContributeAt(2, entry + window, {{2, {1}}});
  ASSERT_TRUE(far->Ready());
  EXPECT_STATUS(far->status(), absl::StatusCode::kFailedPrecondition,
                "rounds ahead of round 65");
  // Rank 1 catches up; rank 0 sends the entry round: it completes over
  // both domains.
  for (uint64_t n = 1; n <= window; ++n) {
    ContributeAt(2, n, {{1, {static_cast<uint32_t>(n)}}});
  }
  for (auto& o : ahead) ASSERT_TRUE(o->Wait() && o->value.ok()) << o->status();
  auto mine = ContributeAt(2, entry, {{0, {98}}, {1, {99}}});
  ASSERT_TRUE(mine->Wait() && entered->Wait());
  ASSERT_TRUE(entered->value.ok()) << entered->status();
  EXPECT_EQ(Words(*entered->value), (std::vector<uint32_t>{98, 99, 100, 101}));
  EXPECT_EQ(View(*entered->value),
            (std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}, {1, 2}}));
}

TEST_F(DomainRoundsTest, AContributionAdmittedBeforeALossFailsItsRound) {
  ASSERT_TRUE(
      rounds_->LoseDomain(1, 2, absl::AbortedError("rank 2 lost")).ok());
  // Rank 0 admitted after the loss opens round 1; rank 1's frame was
  // admitted at epoch 1, before it: round 1 was in flight at the loss.
  auto after = ContributeAt(2, 1, {{0, {10}}});
  auto before = ContributeAt(1, 1, {{1, {11}}});
  ASSERT_TRUE(after->Wait() && before->Wait());
  EXPECT_STATUS(after->status(), absl::StatusCode::kAborted, "rank 2 lost");
  EXPECT_STATUS(before->status(), absl::StatusCode::kAborted, "rank 2 lost");
  // Round 2 goes on over domain 0.
  auto r2 = ContributeAt(2, 2, {{0, {20}}, {1, {21}}});
  ASSERT_TRUE(r2->Wait());
  EXPECT_TRUE(r2->value.ok()) << r2->status();
}

// A contribution of the epoch before a loss whose round is far beyond the
// window was never admitted then: it is refused as too far ahead, and does
// not move the rounds' mark (before, it failed "round UINT64_MAX" and set
// the highest round to it, so the recovered domain's entry at round 2 was
// refused as opened already, failing the job).
TEST_F(DomainRoundsTest, AFarAheadRoundOfTheEpochBeforeALossIsRefused) {
  ASSERT_TRUE(
      rounds_->LoseDomain(1, 2, absl::AbortedError("rank 2 lost")).ok());
  for (uint64_t number : {uint64_t{1000}, UINT64_MAX}) {
    auto far = ContributeAt(1, number, {{0, {10}}});
    ASSERT_TRUE(far->Ready());
    EXPECT_STATUS(far->status(), absl::StatusCode::kFailedPrecondition,
                  "rounds ahead of round 1");
  }
  auto r1 = ContributeAt(2, 1, {{0, {10}}, {1, {11}}});
  ASSERT_TRUE(r1->Wait() && r1->value.ok()) << r1->status();
  EXPECT_TRUE(rounds_->AdmitDomain(1, 2, 2).ok());
}

TEST_F(DomainRoundsTest, ATimeoutNamesOnlyTheServingDomainsRanks) {
  ASSERT_TRUE(
      rounds_->LoseDomain(0, 2, absl::AbortedError("rank 0 lost")).ok());
  auto r =
      ContributeAt(2, 1, {{2, {1}}}, MonotonicNow() + absl::Milliseconds(50));
  ASSERT_TRUE(r->Wait());
  EXPECT_STATUS(r->status(), absl::StatusCode::kDeadlineExceeded,
                "waiting for rank 3 (node 1: 3)");
}

TEST_F(WordRoundsTest, WithoutDomainsThereIsNoViewAndNoDomainCalls) {
  Make(2);
  EXPECT_EQ(rounds_->LoseDomain(0, 2, absl::AbortedError("x")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rounds_->AdmitDomain(0, 2, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  auto a = Contribute(*rounds_, 1, {{0, {1}}, {1, {2}}}, Far());
  ASSERT_TRUE(a->Wait() && a->value.ok());
  EXPECT_FALSE(a->value->partial());
  EXPECT_EQ(a->value->domains_size(), 0);
}

}  // namespace
}  // namespace rankd
