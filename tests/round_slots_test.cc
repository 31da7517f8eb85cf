// The shared-memory round path against a real rankd daemon: ranks are
// played by this test with raw Rank stubs (no client library in the way)
// and common/round_slots.h mapped by hand, so every rule the daemon
// enforces on the slots is seen directly: who may open a file, that it is
// private and unlinked once mapped, that rounds carry the same checks and
// errors as over gRPC, that a rank scribbling on its file is cut off while
// the daemon keeps serving, and that shutting down wakes waiting ranks.
//
// One daemon with 2 local ranks; ranks open no Watch stream, so the
// cluster runs with a long --heartbeat_timeout_ms.
#include "common/round_slots.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "common/monotonic_clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rankd/v1/rank.grpc.pb.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = "slots";

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = "") {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(10));
  if (!token.empty()) {
    context->AddMetadata("authorization", "Bearer " + token);
  }
  return context;
}

// The answer to `sequence`, waiting up to `timeout`.
std::optional<SlotAnswer> Await(RoundSlots& slots, uint64_t sequence,
                                absl::Duration timeout = absl::Seconds(10)) {
  // WaitForAnswers takes a deadline on MonotonicNow's clock.
  const absl::Time deadline = MonotonicNow() + timeout;
  while (true) {
    const uint32_t bell = slots.AnswerBell();
    std::optional<SlotAnswer> answer = slots.ReadAnswer(sequence);
    if (answer.has_value() || MonotonicNow() >= deadline) return answer;
    slots.WaitForAnswers(bell, deadline);
  }
}

bool EventuallyClosed(RoundSlots& slots) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!slots.closed() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  return slots.closed();
}

class RoundSlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    options.job_id = kJob;
    options.nnodes = 1;
    options.nproc_per_node = 2;
    options.heartbeat_timeout_ms = 60000;
    cluster_ = std::make_unique<LocalCluster>(options);
    absl::Status started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started;
    unix_ = v1::Rank::NewStub(grpc::CreateChannel(
        cluster_->socket_target(0), grpc::InsecureChannelCredentials()));
    tcp_ = v1::Rank::NewStub(grpc::CreateChannel(
        cluster_->tcp_address(0), grpc::InsecureChannelCredentials()));
  }

  v1::MemberRef MustJoin(uint32_t local_rank, uint64_t incarnation) {
    v1::JoinRequest request;
    request.set_job_id(kJob);
    request.set_local_rank(local_rank);
    request.set_world_size(2);
    request.set_incarnation(incarnation);
    request.set_pid(1000 + local_rank);
    request.mutable_device()->set_kind("cpu");
    v1::JoinResponse response;
    auto context = Ctx(cluster_->rank_token(local_rank));
    grpc::Status s = unix_->Join(context.get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.member();
  }

  // With the member's own rank token unless `token` says otherwise ("":
  // none).
  grpc::Status OpenSlots(v1::Rank::Stub& stub, const v1::MemberRef& member,
                         v1::OpenRoundSlotsResponse* response,
                         std::optional<std::string> token = std::nullopt) {
    v1::OpenRoundSlotsRequest request;
    *request.mutable_member() = member;
    auto context = Ctx(token.value_or(cluster_->rank_token(member.rank())));
    return stub.OpenRoundSlots(context.get(), request, response);
  }

  // Opens and maps `member`'s slots; attaches unless told not to.
  std::unique_ptr<RoundSlots> MapSlots(const v1::MemberRef& member,
                                       bool attach = true,
                                       std::string* path = nullptr) {
    v1::OpenRoundSlotsResponse response;
    grpc::Status s = OpenSlots(*unix_, member, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    RoundSlotsGeometry geometry;
    geometry.slots = response.slots();
    geometry.frame_words = response.frame_words();
    geometry.result_words = response.result_words();
    EXPECT_EQ(geometry, RoundSlotsGeometry::ForWorld(2));
    auto slots = RoundSlots::Open(response.path(), geometry);
    EXPECT_TRUE(slots.ok()) << slots.status();
    if (!slots.ok()) return nullptr;
    if (attach) (*slots)->Attach();
    if (path != nullptr) *path = response.path();
    return *std::move(slots);
  }

  grpc::Status Words(const v1::MemberRef& member, uint64_t round,
                     std::vector<uint32_t> words,
                     v1::AllGatherWordsResponse* response) {
    v1::AllGatherWordsRequest request;
    *request.mutable_member() = member;
    request.set_round(round);
    for (uint32_t w : words) request.add_words(w);
    request.set_timeout_ms(5000);
    auto context = Ctx(cluster_->rank_token(member.rank()));
    return unix_->AllGatherWords(context.get(), request, response);
  }

  void ExpectStillServing() {
    EXPECT_TRUE(cluster_->daemon(0).running()) << cluster_->daemon(0).ReadLog();
    auto admin = AdminClient::Connect(cluster_->AdminOptions(0));
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto health = (*admin)->Health("");
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, "SERVING");
    auto job = (*admin)->GetJob();
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->failure(), "");
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::Rank::Stub> unix_;
  std::unique_ptr<v1::Rank::Stub> tcp_;
};

TEST_F(RoundSlotsTest, OnlyAJoinedMemberOnTheUnixSocketMayOpenSlots) {
  v1::MemberRef member = MustJoin(0, 0x7001);
  v1::OpenRoundSlotsResponse response;
  // Over TCP, even with its token: the rank acts only through the Unix
  // socket connection it joined on.
  grpc::Status s = OpenSlots(*tcp_, member, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(),
              HasSubstr("acts only through that connection"));

  s = OpenSlots(*tcp_, member, &response, "");  // no token
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << s.error_message();

  v1::MemberRef stranger = member;
  stranger.set_rank(1);
  s = OpenSlots(*unix_, stranger, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("rank 1 has not joined"));

  v1::MemberRef stale = member;
  stale.set_incarnation(0x7002);
  s = OpenSlots(*unix_, stale, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("incarnation 7002 is stale"));
  ExpectStillServing();
}

TEST_F(RoundSlotsTest,
       TheFileIsUnlistedOwnerAndGroupOnlyAndUnlinkedOnceMapped) {
  v1::MemberRef member = MustJoin(0, 0x7101);
  std::string path;
  std::unique_ptr<RoundSlots> slots = MapSlots(member, /*attach=*/false, &path);
  ASSERT_NE(slots, nullptr);
  const std::filesystem::path folder =
      std::filesystem::path(cluster_->socket_path(0)).parent_path() /
      ".rankd-rounds";
  EXPECT_EQ(std::filesystem::path(path).parent_path(), folder);
  struct stat st;
  ASSERT_EQ(stat(folder.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0710u);  // the group may enter, not list
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  slots->Attach();
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  while (stat(path.c_str(), &st) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_NE(stat(path.c_str(), &st), 0) << path << " still linked";
}

TEST_F(RoundSlotsTest, RoundsGetExactValuesAndTheSameErrorsAsOverGrpc) {
  v1::MemberRef r0 = MustJoin(0, 0x7201);
  v1::MemberRef r1 = MustJoin(1, 0x7202);
  std::unique_ptr<RoundSlots> s0 = MapSlots(r0);
  std::unique_ptr<RoundSlots> s1 = MapSlots(r1);
  ASSERT_NE(s0, nullptr);
  ASSERT_NE(s1, nullptr);

  s0->Post(0, 1, 5000, {1, 2});
  s1->Post(0, 1, 5000, {3, 4});
  for (RoundSlots* s : {s0.get(), s1.get()}) {
    std::optional<SlotAnswer> answer = Await(*s, 0);
    ASSERT_TRUE(answer.has_value());
    ASSERT_TRUE(answer->status.ok()) << answer->status;
    EXPECT_EQ(answer->round, 1u);
    EXPECT_EQ(answer->words_per_rank, 2u);
    EXPECT_EQ(answer->words, (std::vector<uint32_t>{1, 2, 3, 4}));
  }

  // The agent's checks, word for word.
  s0->Post(1, 3, 5000, {1, 2});
  std::optional<SlotAnswer> answer = Await(*s0, 1);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(answer->status.message(),
              HasSubstr("rank 0 sent all_gather_words round 3 but its next "
                        "round is 2"));
  s0->Post(2, 2, 0, {1, 2});
  answer = Await(*s0, 2);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer->status.message(), HasSubstr("timeout_ms must be > 0"));

  // Neither used up round 2; rank 0 runs it over gRPC, rank 1 on slots,
  // with a frame-length disagreement that names both.
  s1->Post(1, 2, 5000, {9, 9, 9});
  v1::AllGatherWordsResponse response;
  grpc::Status s = Words(r0, 2, {5, 6}, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();
  answer = Await(*s1, 1);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer->status.message(), HasSubstr("3 words from rank 1"));
  EXPECT_THAT(answer->status.message(), HasSubstr("2 words from rank 0"));
  EXPECT_EQ(s.error_message(), std::string(answer->status.message()));
  ExpectStillServing();
}

// Rounds that come back to back are taken by the daemon's poller (one
// thread for every busy rank, where the daemon may poll: single-node jobs
// on a machine with a core per rank) and handed back to each rank's
// watcher when the ranks go quiet. Bursts separated by pauses cross that
// hand-over both ways many times, and every value must be exact. (A lost
// wake-up would cost at most the watcher's 1 s member check here;
// daemon/node/round_slot_server_test.cc makes it a hang.)
TEST_F(RoundSlotsTest, BurstsAndPausesOfBothRanksGetExactValues) {
  v1::MemberRef r0 = MustJoin(0, 0x7251);
  v1::MemberRef r1 = MustJoin(1, 0x7252);
  std::unique_ptr<RoundSlots> s0 = MapSlots(r0);
  std::unique_ptr<RoundSlots> s1 = MapSlots(r1);
  ASSERT_NE(s0, nullptr);
  ASSERT_NE(s1, nullptr);
  constexpr int kBursts = 40;
  constexpr int kBurstRounds = 25;
  auto play = [](RoundSlots* slots, uint32_t rank, std::string* failure) {
    uint64_t round = 0;
    for (int burst = 0; burst < kBursts; ++burst) {
      for (int i = 0; i < kBurstRounds; ++i, ++round) {
        slots->Post(round, round + 1, 5000,
                    {rank, static_cast<uint32_t>(round)});
        std::optional<SlotAnswer> answer = Await(*slots, round);
        const std::vector<uint32_t> want = {0, static_cast<uint32_t>(round), 1,
                                            static_cast<uint32_t>(round)};
        if (!answer.has_value() || !answer->status.ok() ||
            answer->words != want) {
          *failure =
              absl::StrCat("rank ", rank, " round ", round + 1, ": ",
                           !answer.has_value() ? "no answer in 10 s"
                                               : answer->status.ToString());
          return;
        }
      }
      // Rank 0 pauses longer than the 1 ms within which a rank's next
      // round makes it busy; rank 1 mostly shorter.
      absl::SleepFor(absl::Milliseconds(rank == 0 ? 3 : burst % 3));
    }
  };
  std::string failure0, failure1;
  std::thread rank1(play, s1.get(), 1, &failure1);
  play(s0.get(), 0, &failure0);
  rank1.join();
  EXPECT_EQ(failure0, "");
  EXPECT_EQ(failure1, "");

  // A busy rank whose partner stops gets the deadline, naming the partner.
  const uint64_t next = uint64_t{kBursts} * kBurstRounds;
  for (uint64_t i = 0; i < 3; ++i) {
    s0->Post(next + i, next + i + 1, i < 2 ? 5000 : 300, {0, 0});
    if (i < 2) s1->Post(next + i, next + i + 1, 5000, {1, 1});
    std::optional<SlotAnswer> answer = Await(*s0, next + i);
    ASSERT_TRUE(answer.has_value());
    if (i < 2) {
      EXPECT_TRUE(answer->status.ok()) << answer->status;
      continue;
    }
    EXPECT_EQ(answer->status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(answer->status.message(), HasSubstr("waiting for rank 1"));
  }
}

TEST_F(RoundSlotsTest, AScribblingRankIsCutOffAndTheDaemonKeepsServing) {
  v1::MemberRef member = MustJoin(0, 0x7301);
  std::string path;
  std::unique_ptr<RoundSlots> slots = MapSlots(member, false, &path);
  ASSERT_NE(slots, nullptr);
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);

  // Request 0 written by hand, with a frame length beyond the slot: 256
  // bytes of header, then the slot's round (8 bytes), timeout (4), length
  // (4); the rank's request count is at byte 64.
  const uint64_t round = 1;
  const uint32_t timeout_ms = 5000;
  const uint32_t length = 1u << 30;
  ASSERT_EQ(::pwrite(fd, &round, 8, 256), 8);
  ASSERT_EQ(::pwrite(fd, &timeout_ms, 4, 256 + 8), 4);
  ASSERT_EQ(::pwrite(fd, &length, 4, 256 + 12), 4);
  uint64_t posted = 1;
  ASSERT_EQ(::pwrite(fd, &posted, 8, 64), 8);
  slots->Attach();  // rings the bell
  std::optional<SlotAnswer> answer = Await(*slots, 0);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer->status.message(),
              HasSubstr("-word frame; slots carry at most 256"));

  // A request count far beyond the slots: the daemon closes the file.
  posted = 1000;
  ASSERT_EQ(::pwrite(fd, &posted, 8, 64), 8);
  slots->Attach();
  EXPECT_TRUE(EventuallyClosed(*slots));
  ::close(fd);
  EXPECT_THAT(cluster_->daemon(0).ReadLog(),
              HasSubstr("rank 0 broke the protocol"));
  ExpectStillServing();
  // The rank may open new slots, and they work.
  std::unique_ptr<RoundSlots> again = MapSlots(member);
  ASSERT_NE(again, nullptr);
  EXPECT_FALSE(again->closed());
}

// A rank that shrinks the file it mapped would make the daemon's next
// touch of it fault (SIGBUS); the guarded mapping reads zeros instead, and
// the watcher closes the file and keeps serving.
TEST_F(RoundSlotsTest, ATruncatingRankIsCutOffAndTheDaemonKeepsServing) {
  v1::MemberRef member = MustJoin(0, 0x7321);
  std::string path;
  std::unique_ptr<RoundSlots> slots = MapSlots(member, false, &path);
  ASSERT_NE(slots, nullptr);
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ::close(fd);
  // This process must not touch its own mapping any more; the daemon's
  // watcher looks at the file at least once a second.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (cluster_->daemon(0).ReadLog().find("truncated its round-slots file") ==
             std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_THAT(cluster_->daemon(0).ReadLog(),
              HasSubstr("rank 0 truncated its round-slots file; closing its "
                        "round slots"));
  ExpectStillServing();
  // The rank may open new slots, and they work.
  std::unique_ptr<RoundSlots> again = MapSlots(member);
  ASSERT_NE(again, nullptr);
  EXPECT_FALSE(again->closed());
}

TEST_F(RoundSlotsTest, ARankThatReusesASlotBeforeItsAnswerIsCutOff) {
  v1::MemberRef member = MustJoin(0, 0x7351);
  std::unique_ptr<RoundSlots> slots = MapSlots(member);
  ASSERT_NE(slots, nullptr);
  const uint32_t n = slots->geometry().slots;
  // Rank 1 never comes: rounds 1..n stay open, every slot unanswered.
  for (uint64_t s = 0; s < n; ++s) slots->Post(s, s + 1, 60000, {1});
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(slots->closed());
  // One more would make the daemon hold more rounds than the rank has
  // slots.
  slots->Post(n, n + 1, 60000, {1});
  EXPECT_TRUE(EventuallyClosed(*slots));
  EXPECT_THAT(cluster_->daemon(0).ReadLog(),
              HasSubstr("before request 0 of the same slot was answered"));
  ExpectStillServing();
}

TEST_F(RoundSlotsTest, OpeningAgainClosesTheRanksPreviousFile) {
  v1::MemberRef member = MustJoin(0, 0x7401);
  std::unique_ptr<RoundSlots> first = MapSlots(member);
  std::unique_ptr<RoundSlots> second = MapSlots(member);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(EventuallyClosed(*first));
  EXPECT_FALSE(second->closed());
}

TEST_F(RoundSlotsTest, ShutdownAnswersWaitingRanksAndClosesTheirFiles) {
  v1::MemberRef member = MustJoin(0, 0x7501);
  std::unique_ptr<RoundSlots> slots = MapSlots(member);
  ASSERT_NE(slots, nullptr);
  slots->Post(0, 1, 60000, {1});  // rank 1 never comes
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time stopped = absl::Now();
  cluster_->daemon(0).Signal(SIGTERM);
  std::optional<SlotAnswer> answer = Await(*slots, 0, absl::Seconds(10));
  ASSERT_TRUE(answer.has_value());
  EXPECT_FALSE(answer->status.ok());
  EXPECT_TRUE(EventuallyClosed(*slots));
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(5));
}

}  // namespace
}  // namespace rankd::testing
