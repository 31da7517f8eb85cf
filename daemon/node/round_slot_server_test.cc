// RoundSlotServer in process, with the node's real agent and coordinator
// (a single-node job of two ranks, as the coordinating daemon wires them),
// and the ranks' ends of the round-slots files mapped by the test. Each
// test runs with the server polling (one poller thread takes the files of
// busy ranks) and without (each rank's watcher sleeps on its file's bell),
// whatever the machine's CPU count, and under ThreadSanitizer with the
// daemon's other unit tests. Every rank counts as busy from its second
// request on (Options::back_to_back of an hour), so the poller's paths are
// taken however slow the machine; and watchers do not wake by themselves
// (Options::member_check of an hour), so a request lost between the poller
// and a watcher leaves its rank waiting, and the test fails.
#include "daemon/node/round_slot_server.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "common/round_slots.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/coordinator/job_spec.h"
#include "daemon/deadline_timer.h"
#include "daemon/node/coordinator_link.h"
#include "daemon/node/node_agent.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

constexpr char kJob[] = "slot-server-test";

// The answer to `sequence`, waiting up to 10 s (less when the file closes).
std::optional<SlotAnswer> Await(RoundSlots& slots, uint64_t sequence) {
  const absl::Time deadline = MonotonicNow() + absl::Seconds(10);
  while (true) {
    const uint32_t bell = slots.AnswerBell();
    std::optional<SlotAnswer> answer = slots.ReadAnswer(sequence);
    if (answer.has_value() || slots.closed() || MonotonicNow() >= deadline) {
      return answer;
    }
    slots.WaitForAnswers(bell, deadline, absl::Microseconds(30));
  }
}

// Plays `rounds` rounds in lockstep on both files: each rank posts, then
// both read their answers. True when every answer was the exact result.
bool Lockstep(RoundSlots& rank0, RoundSlots& rank1, uint64_t first,
              uint64_t rounds) {
  for (uint64_t s = first; s < first + rounds; ++s) {
    rank0.Post(s, s + 1, 5000, {0});
    rank1.Post(s, s + 1, 5000, {1});
    for (RoundSlots* slots : {&rank0, &rank1}) {
      std::optional<SlotAnswer> answer = Await(*slots, s);
      if (!answer.has_value() || !answer->status.ok() ||
          answer->words != std::vector<uint32_t>{0, 1}) {
        ADD_FAILURE() << "round " << s + 1 << ": "
                      << (answer.has_value() ? answer->status.ToString()
                                             : "no answer");
        return false;
      }
    }
  }
  return true;
}

// Waits until `done` holds, up to 10 s.
template <typename Done>
bool Eventually(Done done) {
  const absl::Time deadline = MonotonicNow() + absl::Seconds(10);
  while (!done() && MonotonicNow() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return done();
}

// Parameter: the server's spin (zero: no poller).
class RoundSlotServerTest : public ::testing::TestWithParam<absl::Duration> {
 protected:
  void SetUp() override {
    JobSpec spec;
    spec.job_id = kJob;
    spec.world_size = 2;
    spec.nnodes = 1;
    spec.nproc_per_node = 2;
    spec.topology = ParallelTopology{1, 1, 1, 2};
    spec.heartbeat_timeout = absl::Hours(1);  // no lease expiry in a test
    auto coordinator = Coordinator::Create(spec, timer_.get());
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    link_ = std::make_unique<LocalCoordinatorLink>(coordinator_.get(),
                                                   timer_.get(), "in-process");
    v1::NodeInfo node;
    node.set_node_index(0);
    node.set_local_ranks(2);
    node.set_daemon_incarnation(0x5107);
    auto agent = NodeAgent::Create(spec, node, link_.get(), timer_.get());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    absl::Notification started;
    absl::Status start_status;
    agent_->Start(MonotonicNow() + absl::Seconds(5), [&](absl::Status s) {
      start_status = s;
      started.Notify();
    });
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(5)));
    ASSERT_TRUE(start_status.ok()) << start_status;

    static int tests = 0;
    folder_ = absl::StrCat(getenv("TEST_TMPDIR"), "/slots-", ++tests);
    ASSERT_EQ(system(absl::StrCat("mkdir -p ", folder_).c_str()), 0);
    RoundSlotServer::Options options;
    options.spin = GetParam();
    options.back_to_back = absl::Hours(1);
    options.member_check = absl::Hours(1);
    server_ = std::make_unique<RoundSlotServer>(agent_.get(), folder_, 0600,
                                                nullptr, options);
    for (uint32_t r = 0; r < 2; ++r) {
      members_[r] = Join(r);
      slots_[r] = Map(members_[r]);
      ASSERT_NE(slots_[r], nullptr);
    }
  }

  void TearDown() override {
    // The daemon's order: the agent answers what it holds, then the
    // server closes the files.
    if (agent_ != nullptr) agent_->Shutdown("test over", absl::Seconds(1));
    if (server_ != nullptr) server_->Stop();
    server_.reset();
    agent_.reset();
    link_.reset();
    coordinator_.reset();
    timer_.reset();
  }

  v1::MemberRef Join(uint32_t local_rank) {
    v1::JoinRequest request;
    request.set_job_id(kJob);
    request.set_local_rank(local_rank);
    request.set_incarnation(0x100 + local_rank);
    request.set_pid(1000 + local_rank);
    request.mutable_device()->set_kind("cpu");
    absl::Notification joined;
    v1::MemberRef member;
    agent_->Join(request, [&](absl::StatusOr<v1::JoinResponse> response) {
      EXPECT_TRUE(response.ok()) << response.status();
      if (response.ok()) member = response->member();
      joined.Notify();
    });
    EXPECT_TRUE(joined.WaitForNotificationWithTimeout(absl::Seconds(5)));
    return member;
  }

  std::unique_ptr<RoundSlots> Map(const v1::MemberRef& member) {
    v1::OpenRoundSlotsRequest request;
    *request.mutable_member() = member;
    absl::StatusOr<v1::OpenRoundSlotsResponse> opened = server_->Open(request);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return nullptr;
    paths_[member.rank()] = opened->path();
    auto slots =
        RoundSlots::Open(opened->path(), RoundSlotsGeometry::ForWorld(2));
    EXPECT_TRUE(slots.ok()) << slots.status();
    if (!slots.ok()) return nullptr;
    (*slots)->Attach();
    return *std::move(slots);
  }

  // The poller took requests when there is one, none otherwise.
  void ExpectPolledIfPolling() {
    if (GetParam() > absl::ZeroDuration()) {
      EXPECT_GT(server_->polled_requests(), 0u);
    } else {
      EXPECT_EQ(server_->polled_requests(), 0u);
    }
  }

  std::unique_ptr<DeadlineTimer> timer_ = std::make_unique<DeadlineTimer>();
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<LocalCoordinatorLink> link_;
  std::unique_ptr<NodeAgent> agent_;
  std::string folder_;
  std::unique_ptr<RoundSlotServer> server_;
  v1::MemberRef members_[2];
  std::string paths_[2];  // each rank's latest file
  std::unique_ptr<RoundSlots> slots_[2];
};

// How many mappings of `path` this process holds (the server's and the
// test's own are both here).
int MappingsOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find(path) != std::string::npos) ++count;
  }
  return count;
}

// Bursts of rounds separated by pauses, longer than the poller's 30 us
// (rank 0) or not always (rank 1): with a poller, the files are handed to
// it and back many times; a request lost in a hand-over would leave a rank
// waiting out Await's 10 s.
TEST_P(RoundSlotServerTest, BurstsAndPausesGetExactValues) {
  constexpr int kBursts = 30;
  constexpr int kBurstRounds = 20;
  auto play = [](RoundSlots* slots, uint32_t rank, std::string* failure) {
    uint64_t round = 0;
    for (int burst = 0; burst < kBursts; ++burst) {
      for (int i = 0; i < kBurstRounds; ++i, ++round) {
        const uint32_t tag = static_cast<uint32_t>(round);
        slots->Post(round, round + 1, 5000, {rank, tag});
        std::optional<SlotAnswer> answer = Await(*slots, round);
        if (!answer.has_value() || !answer->status.ok() ||
            answer->words != std::vector<uint32_t>{0, tag, 1, tag}) {
          *failure = absl::StrCat(
              "rank ", rank, " round ", round + 1, ": ",
              !answer.has_value() ? "no answer" : answer->status.ToString());
          return;
        }
      }
      absl::SleepFor(absl::Milliseconds(rank == 0 ? 2 : burst % 2));
    }
  };
  std::string failure0, failure1;
  std::thread rank1(play, slots_[1].get(), 1, &failure1);
  play(slots_[0].get(), 0, &failure0);
  rank1.join();
  EXPECT_EQ(failure0, "");
  EXPECT_EQ(failure1, "");
  EXPECT_EQ(server_->open(), 2u);
  ExpectPolledIfPolling();
}

// Shutting down (as the daemon does: the agent, then the server) while a
// busy rank waits for its partner: the waiting round is answered with an
// error, both files close, and Stop returns.
TEST_P(RoundSlotServerTest, ShutdownAnswersABusyRankAndClosesEveryFile) {
  ASSERT_TRUE(Lockstep(*slots_[0], *slots_[1], 0, 50));
  slots_[0]->Post(50, 51, 60000, {0});  // rank 1 stays away
  ASSERT_TRUE(Eventually([&] { return slots_[0]->consumed() == 51; }));
  agent_->Shutdown("test over", absl::Seconds(1));
  server_->Stop();
  std::optional<SlotAnswer> answer = Await(*slots_[0], 50);
  ASSERT_TRUE(answer.has_value());
  EXPECT_FALSE(answer->status.ok());
  EXPECT_TRUE(slots_[0]->closed());
  EXPECT_TRUE(slots_[1]->closed());
  ExpectPolledIfPolling();
}

// A rank that breaks the protocol in the middle of a burst loses its file;
// the rounds it posted before are still the agent's, and complete when the
// other rank comes, whose file stays open.
TEST_P(RoundSlotServerTest, ARankBreakingTheProtocolInABurstIsCutOff) {
  ASSERT_TRUE(Lockstep(*slots_[0], *slots_[1], 0, 20));
  // Rounds 21.. of rank 0 with rank 1 away: its slots fill (and the daemon
  // takes them all), then one more request reuses a slot whose answer it
  // has not read.
  const uint32_t n = slots_[0]->geometry().slots;
  for (uint64_t i = 0; i < n; ++i) {
    slots_[0]->Post(20 + i, 21 + i, 60000, {0});
  }
  ASSERT_TRUE(Eventually([&] { return slots_[0]->consumed() == 20 + n; }));
  slots_[0]->Post(20 + n, 21 + n, 60000, {0});
  EXPECT_TRUE(Eventually([&] { return slots_[0]->closed(); }));
  EXPECT_FALSE(slots_[1]->closed());
  EXPECT_TRUE(Eventually([&] { return server_->open() == 1; }));
  slots_[1]->Post(20, 21, 5000, {1});
  std::optional<SlotAnswer> answer = Await(*slots_[1], 20);
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->status.ok()) << answer->status;
  EXPECT_EQ(answer->words, (std::vector<uint32_t>{0, 1}));
  ExpectPolledIfPolling();
}

// A rank that opens a new file while a round of its old one waits (up to
// an hour) once kept the old file mapped in the daemon until the round
// ended: opening over and over held 64 files' worth of shared memory. The
// old file is unmapped at once; the round still ends when its partner
// comes.
TEST_P(RoundSlotServerTest, AReplacedFileIsUnmappedWhileItsRoundWaits) {
  slots_[0]->Post(0, 1, 60000, {0});  // rank 1 stays away
  ASSERT_TRUE(Eventually([&] { return slots_[0]->consumed() == 1; }));
  const std::string old_path = paths_[0];
  EXPECT_EQ(MappingsOf(old_path), 2);  // the server's and this test's
  std::unique_ptr<RoundSlots> replaced = std::move(slots_[0]);
  slots_[0] = Map(members_[0]);
  ASSERT_NE(slots_[0], nullptr);
  EXPECT_TRUE(Eventually([&] { return MappingsOf(old_path) == 1; }))
      << MappingsOf(old_path) << " mappings of " << old_path;
  // The round is still the agent's: rank 1 completes it, and the answer
  // goes nowhere (the old file is gone from the daemon).
  slots_[1]->Post(0, 1, 5000, {1});
  std::optional<SlotAnswer> answer = Await(*slots_[1], 0);
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->status.ok()) << answer->status;
}

INSTANTIATE_TEST_SUITE_P(
    PollingAndNot, RoundSlotServerTest,
    ::testing::Values(absl::ZeroDuration(), absl::Microseconds(30)),
    [](const ::testing::TestParamInfo<absl::Duration>& info) {
      return info.param == absl::ZeroDuration() ? std::string("Watchers")
                                                : std::string("Poller");
    });

// A daemon killed between making a file and its rank mapping it leaves the
// file behind; the next daemon on the folder removes such files once they
// are older than any live daemon's, and nothing else.
TEST(RoundSlotFilesTest, OnlyStaleRoundSlotFilesAreRemoved) {
  const std::string folder =
      absl::StrCat(getenv("TEST_TMPDIR"), "/stale-slots");
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  auto make = [&](const std::string& name, absl::Duration age) {
    const std::string path = absl::StrCat(folder, "/", name);
    std::ofstream(path) << "x";
    const timespec then = absl::ToTimespec(absl::Now() - age);
    const timespec times[2] = {then, then};
    EXPECT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
    return path;
  };
  auto exists = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
  };
  const std::string stale = make(".rankd-rounds-00aa", absl::Minutes(5));
  const std::string live = make(".rankd-rounds-00bb", absl::Seconds(2));
  const std::string other = make("node0.sock.kv", absl::Minutes(5));
  ASSERT_EQ(mkdir((folder + "/.rankd-rounds-dir").c_str(), 0700), 0);
  const timespec old = absl::ToTimespec(absl::Now() - absl::Minutes(5));
  const timespec times[2] = {old, old};
  ASSERT_EQ(
      utimensat(AT_FDCWD, (folder + "/.rankd-rounds-dir").c_str(), times, 0),
      0);
  EXPECT_EQ(RoundSlotServer::RemoveStaleFiles(folder), 1u);
  EXPECT_FALSE(exists(stale));
  EXPECT_TRUE(exists(live));
  EXPECT_TRUE(exists(other));
  EXPECT_TRUE(exists(folder + "/.rankd-rounds-dir"));
  EXPECT_EQ(RoundSlotServer::RemoveStaleFiles(folder + "/missing"), 0u);
}

}  // namespace
}  // namespace rankd
