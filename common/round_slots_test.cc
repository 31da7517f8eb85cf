// Tests of the round-slots file: both ends in one process (the file and the
// futexes behave the same across processes), one test across a fork.
#include "common/round_slots.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, "-", getpid());
}

RoundSlotsGeometry Small() {
  RoundSlotsGeometry g;
  g.slots = 2;
  g.frame_words = 4;
  g.result_words = 8;
  return g;
}

TEST(RoundSlotsTest, GeometryForAWorldCapsTheFrameAtTheRoundLimit) {
  RoundSlotsGeometry g = RoundSlotsGeometry::ForWorld(8);
  EXPECT_EQ(g.slots, kRoundSlots);
  EXPECT_EQ(g.frame_words, kRoundSlotFrameWords);
  EXPECT_EQ(g.result_words, kRoundSlotFrameWords * 8);
  // Large worlds get shorter frames, so a file stays within its bound.
  EXPECT_LT(RoundSlotsGeometry::ForWorld(4096).frame_words, 256u);
  for (uint32_t world : {1u, 64u, 512u, 4096u, 65536u}) {
    EXPECT_LE(RoundSlotsGeometry::ForWorld(world).FileBytes(),
              kMaxRoundSlotsFileBytes)
        << world;
  }
  EXPECT_EQ(g.FileBytes() % 64, 0u);
}

TEST(RoundSlotsTest, RequestsAndAnswersRoundTrip) {
  const std::string path = TempPath("slots-roundtrip");
  auto daemon = RoundSlots::Create(path, 0640, Small());
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  auto rank = RoundSlots::Open(path, Small());
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_FALSE((*daemon)->attached());
  (*rank)->Attach();
  EXPECT_TRUE((*daemon)->attached());

  for (uint64_t s = 0; s < 5; ++s) {
    const uint32_t w = static_cast<uint32_t>(s);
    (*rank)->Post(s, s + 1, 1000, {w, w + 1});
    ASSERT_EQ((*daemon)->posted(), s + 1);
    auto request = (*daemon)->Take(s);
    ASSERT_TRUE(request.ok()) << request.status();
    EXPECT_EQ(request->round, s + 1);
    EXPECT_EQ(request->timeout_ms, 1000u);
    EXPECT_EQ(request->words, (std::vector<uint32_t>{w, w + 1}));
    EXPECT_EQ((*daemon)->consumed(), s);  // not before MarkTaken
    (*daemon)->MarkTaken(s);
    EXPECT_EQ((*daemon)->consumed(), s + 1);
    EXPECT_FALSE((*rank)->ReadAnswer(s).has_value());
    (*daemon)->Answer(s, s + 1, 2, {w, w + 1, 7, 8}, absl::OkStatus());
    auto answer = (*rank)->ReadAnswer(s);
    ASSERT_TRUE(answer.has_value());
    ASSERT_TRUE(answer->status.ok()) << answer->status;
    EXPECT_EQ(answer->round, s + 1);
    EXPECT_EQ(answer->words_per_rank, 2u);
    EXPECT_EQ(answer->words, (std::vector<uint32_t>{w, w + 1, 7, 8}));
    // The slot's next occupant is a different sequence.
    EXPECT_FALSE((*rank)->ReadAnswer(s + 2).has_value());
  }
  unlink(path.c_str());
}

TEST(RoundSlotsTest, ErrorsCarryCodeAndAMessageCutToTheSlot) {
  const std::string path = TempPath("slots-errors");
  auto daemon = RoundSlots::Create(path, 0600, Small());
  ASSERT_TRUE(daemon.ok());
  auto rank = RoundSlots::Open(path, Small());
  ASSERT_TRUE(rank.ok());
  (*rank)->Post(0, 1, 10, {});
  ASSERT_TRUE((*daemon)->Take(0).ok());
  (*daemon)->Answer(0, 1, 0, {},
                    absl::DeadlineExceededError(std::string(10000, 'x')));
  auto answer = (*rank)->ReadAnswer(0);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(answer->status.message().size(), kRoundSlotMessageBytes);
  EXPECT_TRUE(absl::EndsWith(answer->status.message(), "..."));
  // A result larger than the slot is refused, not written past it.
  (*rank)->Post(1, 2, 10, {});
  ASSERT_TRUE((*daemon)->Take(1).ok());
  std::vector<uint32_t> huge(9, 1);
  (*daemon)->Answer(1, 2, 9, huge, absl::OkStatus());
  answer = (*rank)->ReadAnswer(1);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kInternal);
  unlink(path.c_str());
}

TEST(RoundSlotsTest, ARankThatScribblesOnItsFileIsRefusedNotTrusted) {
  const std::string path = TempPath("slots-scribble");
  auto daemon = RoundSlots::Create(path, 0600, Small());
  ASSERT_TRUE(daemon.ok());
  auto rank = RoundSlots::Open(path, Small());
  ASSERT_TRUE(rank.ok());
  (*rank)->Post(0, 1, 10, {1, 2, 3});
  // Overwrite the length word with more than the slot holds: 256 bytes of
  // header, then round (8) and timeout (4) before the length.
  FILE* f = fopen(path.c_str(), "r+");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fseek(f, 256 + 12, SEEK_SET), 0);
  uint32_t bad = 1u << 30;
  ASSERT_EQ(fwrite(&bad, 4, 1, f), 1u);
  fclose(f);
  auto request = (*daemon)->Take(0);
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument)
      << request.status();
  unlink(path.c_str());
}

TEST(RoundSlotsTest, OpenRefusesFilesOfAnotherGeometryOrKind) {
  const std::string path = TempPath("slots-geometry");
  auto daemon = RoundSlots::Create(path, 0600, Small());
  ASSERT_TRUE(daemon.ok());
  RoundSlotsGeometry other = Small();
  other.result_words = 16;
  EXPECT_EQ(RoundSlots::Open(path, other).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RoundSlots::Create(path, 0600, Small()).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RoundSlots::Open(path + ".missing", Small()).status().code(),
            absl::StatusCode::kNotFound);
  // Same size, no header: not a round-slots file.
  const std::string plain = TempPath("slots-plain");
  FILE* f = fopen(plain.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::string zeros(Small().FileBytes(), '\0');
  fwrite(zeros.data(), 1, zeros.size(), f);
  fclose(f);
  EXPECT_EQ(RoundSlots::Open(plain, Small()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  unlink(plain.c_str());
  unlink(path.c_str());
}

TEST(RoundSlotsTest, WaitersWakeOnPostAnswerAndCloseAndHonourDeadlines) {
  const std::string path = TempPath("slots-wake");
  auto daemon = RoundSlots::Create(path, 0600, Small());
  ASSERT_TRUE(daemon.ok());
  auto rank = RoundSlots::Open(path, Small());
  ASSERT_TRUE(rank.ok());

  // A deadline bounds both waits.
  absl::Time start = MonotonicNow();
  (*daemon)->WaitForRequests((*daemon)->RequestBell(),
                             start + absl::Milliseconds(50));
  (*rank)->WaitForAnswers((*rank)->AnswerBell(),
                          start + absl::Milliseconds(100));
  EXPECT_GE(MonotonicNow() - start, absl::Milliseconds(100));

  // The daemon sleeps until a request is posted.
  std::thread watcher([&] {
    uint32_t bell = (*daemon)->RequestBell();
    while ((*daemon)->posted() == 0) {
      (*daemon)->WaitForRequests(bell, absl::InfiniteFuture());
      bell = (*daemon)->RequestBell();
    }
    ASSERT_TRUE((*daemon)->Take(0).ok());
    (*daemon)->Answer(0, 1, 1, {42}, absl::OkStatus());
  });
  absl::SleepFor(absl::Milliseconds(20));
  (*rank)->Post(0, 1, 10, {42});
  uint32_t bell = (*rank)->AnswerBell();
  while (!(*rank)->ReadAnswer(0).has_value()) {
    (*rank)->WaitForAnswers(bell, absl::InfiniteFuture());
    bell = (*rank)->AnswerBell();
  }
  watcher.join();

  // Close wakes a rank waiting for an answer that will not come.
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    (*daemon)->Close();
  });
  bell = (*rank)->AnswerBell();
  (*rank)->WaitForAnswers(bell, absl::InfiniteFuture());
  closer.join();
  EXPECT_TRUE((*rank)->closed());
  unlink(path.c_str());
}

// The daemon wakes the rank only while the rank says threads sleep on the
// answer bell: every one of several sleeping threads must wake (a count,
// not a flag that the first to wake would clear), and so must a thread that
// polls first and then sleeps.
TEST(RoundSlotsTest, EverySleepingThreadOfARankWakesOnAnAnswer) {
  const std::string path = TempPath("slots-sleepers");
  auto daemon = RoundSlots::Create(path, 0600, Small());
  ASSERT_TRUE(daemon.ok());
  auto rank = RoundSlots::Open(path, Small());
  ASSERT_TRUE(rank.ok());
  for (int trial = 0; trial < 20; ++trial) {
    const uint32_t bell = (*rank)->AnswerBell();
    const absl::Time deadline = MonotonicNow() + absl::Seconds(10);
    std::atomic<int> woken{0};
    std::vector<std::thread> waiters;
    for (int t = 0; t < 4; ++t) {
      waiters.emplace_back([&, t] {
        const absl::Duration spin =
            t == 0 ? absl::Milliseconds(1) : absl::ZeroDuration();
        while ((*rank)->AnswerBell() == bell && MonotonicNow() < deadline) {
          (*rank)->WaitForAnswers(bell, deadline, spin);
        }
        if (MonotonicNow() < deadline) ++woken;
      });
    }
    absl::SleepFor(absl::Milliseconds(trial % 2 == 0 ? 5 : 0));
    (*rank)->Post(trial, trial + 1, 10, {7});
    ASSERT_TRUE((*daemon)->Take(trial).ok());
    (*daemon)->Answer(trial, trial + 1, 1, {7}, absl::OkStatus());
    for (auto& w : waiters) w.join();
    EXPECT_EQ(woken.load(), 4) << "trial " << trial;
    ASSERT_TRUE((*rank)->ReadAnswer(trial).has_value());
  }
  unlink(path.c_str());
}

TEST(RoundSlotsTest, WorksAcrossProcesses) {
  const std::string path = TempPath("slots-fork");
  auto daemon = RoundSlots::Create(path, 0600, Small());
  ASSERT_TRUE(daemon.ok());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The rank: post 100 rounds, check every answer.
    auto rank = RoundSlots::Open(path, Small());
    if (!rank.ok()) _exit(2);
    (*rank)->Attach();
    for (uint64_t s = 0; s < 100; ++s) {
      (*rank)->Post(s, s + 1, 1000, {static_cast<uint32_t>(s)});
      uint32_t bell = (*rank)->AnswerBell();
      std::optional<SlotAnswer> answer;
      while (!(answer = (*rank)->ReadAnswer(s)).has_value()) {
        (*rank)->WaitForAnswers(bell, MonotonicNow() + absl::Seconds(10));
        bell = (*rank)->AnswerBell();
      }
      if (!answer->status.ok() || answer->words.size() != 2 ||
          answer->words[0] != s || answer->words[1] != s * 2) {
        _exit(3);
      }
    }
    _exit(0);
  }
  uint64_t next = 0;
  uint32_t bell = (*daemon)->RequestBell();
  const absl::Time deadline = MonotonicNow() + absl::Seconds(20);
  while (next < 100 && MonotonicNow() < deadline) {
    if ((*daemon)->posted() > next) {
      auto request = (*daemon)->Take(next);
      ASSERT_TRUE(request.ok());
      ASSERT_EQ(request->words.size(), 1u);
      const uint32_t w = request->words[0];
      (*daemon)->Answer(next, request->round, 1, {w, w * 2}, absl::OkStatus());
      ++next;
      continue;
    }
    (*daemon)->WaitForRequests(bell, MonotonicNow() + absl::Seconds(1));
    bell = (*daemon)->RequestBell();
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(next, 100u);
  EXPECT_TRUE((*daemon)->attached());
  unlink(path.c_str());
}

}  // namespace
}  // namespace rankd
