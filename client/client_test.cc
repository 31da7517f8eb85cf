// Unit tests of rankd::Client against the in-process fake daemon of
// fake_services.h (no real rankd needed).

#include "client/client.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/fake_services.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::ElementsAre;
using testing::FakeDaemon;
using ::testing::HasSubstr;

ClientOptions Options(const std::string& target) {
  ClientOptions options;
  options.target = target;
  options.connect_timeout = absl::Seconds(5);
  options.call_timeout = absl::Seconds(5);
  return options;
}

JoinOptions Join0(uint32_t world_size = 1) {
  JoinOptions join;
  join.job_id = "job-a";
  join.local_rank = 0;
  join.world_size = world_size;
  join.device.set_kind("cpu");
  join.wait_for_world = absl::Seconds(2);
  return join;
}

// Polls `condition` until it holds or `timeout` passes.
template <typename Condition>
bool Eventually(Condition condition,
                absl::Duration timeout = absl::Seconds(5)) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = FakeDaemon::Start();
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }

  std::unique_ptr<Client> ConnectOrDie(ClientOptions options) {
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::unique_ptr<Client> Joined(uint32_t world_size = 1) {
    daemon_->rank().SetWorldSize(world_size);
    std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
    if (client == nullptr) return nullptr;
    auto session = client->Join(Join0(world_size));
    EXPECT_TRUE(session.ok()) << session.status();
    return client;
  }

  std::unique_ptr<FakeDaemon> daemon_;
};

TEST(ClientConnectTest, MissingSocketFailsWithinConnectTimeoutNamingTarget) {
  const std::string target =
      absl::StrCat("unix:///tmp/rankd_no_such_daemon_", ::getpid(), ".sock");
  ClientOptions options;
  options.target = target;
  options.connect_timeout = absl::Milliseconds(300);
  absl::Time start = absl::Now();
  auto client = Client::Connect(options);
  absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr(target));
  EXPECT_THAT(client.status().message(), HasSubstr("No such file"));
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(ClientConnectTest, UnreachableTcpFailsWithinConnectTimeout) {
  ClientOptions options;
  options.target = "127.0.0.1:1";  // Nothing listens on port 1.
  options.connect_timeout = absl::Milliseconds(300);
  absl::Time start = absl::Now();
  auto client = Client::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr("127.0.0.1:1"));
}

TEST(ClientConnectTest, BadOptionsAreInvalidArgumentNamingTarget) {
  ClientOptions zero;
  zero.target = "unix:///tmp/x.sock";
  zero.connect_timeout = absl::ZeroDuration();
  ClientOptions tls_on_unix;
  tls_on_unix.target = "unix:///tmp/x.sock";
  tls_on_unix.tls_ca_file = "/etc/hostname";
  ClientOptions cert_without_key;
  cert_without_key.target = "host:1234";
  cert_without_key.tls_ca_file = "/etc/hostname";
  cert_without_key.tls_cert_file = "/etc/hostname";
  ClientOptions token_newline;
  token_newline.target = "host:1234";
  token_newline.bearer_token = "secret\n";
  ClientOptions missing_ca;
  missing_ca.target = "host:1234";
  missing_ca.tls_ca_file = "/nonexistent/ca.pem";
  ClientOptions bad_target;
  bad_target.target = "host-without-port";
  ClientOptions negative_spin;
  negative_spin.target = "unix:///tmp/x.sock";
  negative_spin.round_spin = absl::Microseconds(-1);
  for (const ClientOptions& o :
       {zero, tls_on_unix, cert_without_key, token_newline, missing_ca,
        bad_target, negative_spin}) {
    auto client = Client::Connect(o);
    ASSERT_FALSE(client.ok()) << o.target;
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument)
        << client.status();
    EXPECT_THAT(client.status().message(), HasSubstr(o.target));
  }
}

TEST_F(ClientTest, CallsBeforeJoinFailWithFailedPrecondition) {
  std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
  ASSERT_NE(client, nullptr);
  const std::vector<uint32_t> words = {1, 2};
  std::vector<absl::Status> results = {
      client->AllGatherWords(words, absl::Seconds(1)).status(),
      client->SubmitAllGatherWords(words, absl::Seconds(1)).status(),
      client->KvSet("k", "v"),
      client->KvGet("k", absl::ZeroDuration()).status(),
      client->KvAdd("k", 1).status(),
      client->KvDelete("k").status(),
      client->KvCount("").status(),
  };
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("call Join first"));
    EXPECT_THAT(s.message(), HasSubstr(daemon_->target()));
  }
  EXPECT_EQ(daemon_->rank().kv_calls(), 0);
  EXPECT_TRUE(daemon_->rank().rounds().empty());
  EXPECT_EQ(client->descriptor().world_size(), 0u);
  EXPECT_TRUE(client->JobHealth().ok());
  EXPECT_TRUE(client->Leave().ok());  // Nothing to leave.
}

TEST_F(ClientTest, JoinSendsIdentityAndOpensWatchStream) {
  daemon_->rank().SetWorldSize(4);
  std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
  ASSERT_NE(client, nullptr);
  JoinOptions join = Join0(4);
  join.local_rank = 2;
  join.rank = 2;
  auto session = client->Join(join);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(session->rank(), 2u);
  EXPECT_EQ(session->world_size(), 4u);
  EXPECT_EQ(client->descriptor().rank(), 2u);

  v1::JoinRequest sent = daemon_->rank().last_join();
  EXPECT_EQ(sent.job_id(), "job-a");
  EXPECT_EQ(sent.local_rank(), 2u);
  EXPECT_TRUE(sent.has_rank());
  EXPECT_EQ(sent.rank(), 2u);
  EXPECT_EQ(sent.world_size(), 4u);
  EXPECT_EQ(sent.device().kind(), "cpu");
  EXPECT_NE(sent.incarnation(), 0u);
  EXPECT_EQ(sent.incarnation(), client->incarnation());
  EXPECT_EQ(sent.pid(), static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(sent.wait_for_world_ms(), 2000u);

  v1::MemberRef member = client->member();
  EXPECT_EQ(member.job_id(), "job-a");
  EXPECT_EQ(member.rank(), 2u);
  EXPECT_EQ(member.incarnation(), client->incarnation());
  EXPECT_TRUE(daemon_->rank().WaitForOpenWatchStreams(1, absl::Seconds(5)));

  auto again = client->Join(join);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("already joined"));
}

// The daemon leases a joined rank from its join's answer until its Watch
// stream opens (the heartbeat timeout): the stream opens first, before the
// fast paths, which a loaded daemon may take longer than that to open (the
// rank was then lost right after joining).
TEST_F(ClientTest, TheWatchStreamOpensBeforeTheFastPaths) {
  std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
  ASSERT_NE(client, nullptr);
  auto session = client->Join(Join0(1));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(daemon_->rank().watch_open_at_fast_path_opens(),
            std::optional<bool>(true));
  EXPECT_THAT(client->round_path(), HasSubstr("grpc"));
  EXPECT_THAT(client->kv_path(), HasSubstr("grpc"));
}

TEST_F(ClientTest, JoinRejectionKeepsCodeAndAddsContextAndMayBeRetried) {
  daemon_->rank().SetJoinError(grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                                            "rank 0 is already claimed"));
  std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
  ASSERT_NE(client, nullptr);
  auto session = client->Join(Join0());
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(session.status().message(),
            absl::StrCat("rankd Join via ", daemon_->target(),
                         ": rank 0 is already claimed"));
  daemon_->rank().SetJoinError(grpc::Status::OK);
  EXPECT_TRUE(client->Join(Join0()).ok());
}

TEST_F(ClientTest, JoinValidatesOptionsLocally) {
  std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
  ASSERT_NE(client, nullptr);
  JoinOptions no_job = Join0();
  no_job.job_id.clear();
  EXPECT_EQ(client->Join(no_job).status().code(),
            absl::StatusCode::kInvalidArgument);
  JoinOptions forever = Join0();
  forever.wait_for_world = absl::InfiniteDuration();
  EXPECT_EQ(client->Join(forever).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(daemon_->rank().last_join().job_id(), "");  // Never sent.
}

TEST_F(ClientTest, RoundsAreNumberedAndCarryMemberRef) {
  std::unique_ptr<Client> client = Joined(/*world_size=*/3);
  ASSERT_NE(client, nullptr);
  for (uint32_t i = 1; i <= 3; ++i) {
    const std::vector<uint32_t> words = {i, 10 * i};
    auto all = client->AllGatherWords(words, absl::Seconds(2));
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_THAT(*all, ElementsAre(i, 10 * i, i, 10 * i, i, 10 * i));
  }
  auto pending = client->SubmitAllGatherWords({7}, absl::Seconds(2));
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ((*pending)->round(), 4u);
  auto four = (*pending)->Wait(absl::Seconds(5));
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_THAT(*four, ElementsAre(7u, 7u, 7u));
  EXPECT_TRUE((*pending)->IsReady());
  EXPECT_TRUE((*pending)->Wait(absl::Milliseconds(1)).ok());  // Repeatable.

  std::vector<v1::AllGatherWordsRequest> rounds = daemon_->rank().rounds();
  ASSERT_EQ(rounds.size(), 4u);
  for (size_t i = 0; i < rounds.size(); ++i) {
    EXPECT_EQ(rounds[i].round(), i + 1);
    EXPECT_EQ(rounds[i].member().job_id(), "job-a");
    EXPECT_EQ(rounds[i].member().rank(), 0u);
    EXPECT_EQ(rounds[i].member().incarnation(), client->incarnation());
    EXPECT_EQ(rounds[i].timeout_ms(), 2000u);
  }
}

TEST_F(ClientTest, EmptyFrameIsAllowed) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  auto all = client->AllGatherWords({}, absl::Seconds(2));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->empty());
}

TEST_F(ClientTest, BadTimeoutsAndFramesAreRejectedWithoutUsingARound) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  const std::vector<uint32_t> words = {1};
  for (absl::Duration bad :
       {absl::ZeroDuration(), absl::Seconds(-1), absl::InfiniteDuration()}) {
    EXPECT_EQ(client->AllGatherWords(words, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(client->SubmitAllGatherWords(words, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  const std::vector<uint32_t> huge(kMaxFrameWords + 1, 0);
  EXPECT_EQ(client->AllGatherWords(huge, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto pending = client->SubmitAllGatherWords(words, absl::Seconds(2));
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ((*pending)->round(), 1u);  // Rejected calls used no number.
  auto zero_wait = (*pending)->Wait(absl::ZeroDuration());
  EXPECT_EQ(zero_wait.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero_wait.status().message(), HasSubstr("positive"));
  EXPECT_EQ((*pending)->Wait(absl::Seconds(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*pending)->Wait(absl::Seconds(5)).ok());
}

TEST_F(ClientTest, WaitTimesOutThenSucceedsOnceTheRoundCompletes) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  daemon_->rank().HoldRounds(true);
  auto pending = client->SubmitAllGatherWords({5}, absl::Seconds(10));
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE(daemon_->rank().WaitForRounds(1, absl::Seconds(5)));
  EXPECT_FALSE((*pending)->IsReady());
  auto early = (*pending)->Wait(absl::Milliseconds(50));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(early.status().message(), HasSubstr("round 1"));
  daemon_->rank().HoldRounds(false);
  auto done = (*pending)->Wait(absl::Seconds(5));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_THAT(*done, ElementsAre(5u, 5u));
  // The earlier Wait timing out did not spoil later rounds.
  EXPECT_TRUE(client->AllGatherWords({6}, absl::Seconds(2)).ok());
}

TEST_F(ClientTest, DaemonRoundTimeoutIsReturnedAndPoisonsLaterRounds) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  daemon_->rank().HoldRounds(true);
  auto all = client->AllGatherWords({1}, absl::Milliseconds(100));
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(all.status().message(), HasSubstr("missing ranks: 1"));
  EXPECT_THAT(all.status().message(), HasSubstr("round 1"));
  daemon_->rank().HoldRounds(false);
  auto next = client->AllGatherWords({1}, absl::Seconds(1));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("round 1 failed"));
  EXPECT_EQ(daemon_->rank().rounds().size(), 1u);  // Never sent.
  // Other services still work.
  EXPECT_TRUE(client->KvSet("k", "v").ok());
}

TEST_F(ClientTest, DestroyingPendingWordsCancelsTheRound) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  daemon_->rank().HoldRounds(true);
  {
    auto pending = client->SubmitAllGatherWords({1, 2, 3}, absl::Seconds(30));
    ASSERT_TRUE(pending.ok());
    ASSERT_TRUE(daemon_->rank().WaitForRounds(1, absl::Seconds(5)));
    absl::Time start = absl::Now();
    pending->reset();  // Cancels and waits for gRPC to finish the call.
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
  EXPECT_TRUE(
      Eventually([&] { return daemon_->rank().cancelled_rounds() == 1; }));
  auto next = client->AllGatherWords({1}, absl::Seconds(1));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("cancelled by the caller"));
}

TEST_F(ClientTest, CancelReturnsCancelledAndIsIdempotent) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  daemon_->rank().HoldRounds(true);
  auto pending = client->SubmitAllGatherWords({1}, absl::Seconds(30));
  ASSERT_TRUE(pending.ok());
  (*pending)->Cancel();
  EXPECT_TRUE((*pending)->IsReady());
  EXPECT_EQ((*pending)->Wait(absl::Seconds(1)).status().code(),
            absl::StatusCode::kCancelled);
  (*pending)->Cancel();
}

TEST_F(ClientTest, PendingWordsOutlivesItsClient) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  daemon_->rank().HoldRounds(true);
  auto pending = client->SubmitAllGatherWords({9}, absl::Seconds(30));
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE(daemon_->rank().WaitForRounds(1, absl::Seconds(5)));
  client.reset();  // Leaves; the round keeps its own resources.
  EXPECT_EQ(daemon_->rank().leaves(), 1);
  daemon_->rank().HoldRounds(false);
  auto result = (*pending)->Wait(absl::Seconds(5));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(*result, ElementsAre(9u, 9u));
}

TEST_F(ClientTest, ConcurrentSubmissionsGetDistinctRounds) {
  std::unique_ptr<Client> client = Joined(1);
  ASSERT_NE(client, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        if (client->AllGatherWords({1}, absl::Seconds(5)).ok()) ++ok;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 20);
  std::vector<uint64_t> numbers;
  for (const auto& r : daemon_->rank().rounds()) numbers.push_back(r.round());
  std::sort(numbers.begin(), numbers.end());
  ASSERT_EQ(numbers.size(), 20u);
  for (size_t i = 0; i < numbers.size(); ++i) EXPECT_EQ(numbers[i], i + 1);
}

TEST_F(ClientTest, KeyValueBroker) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  auto missing = client->KvGet("nccl/1", absl::ZeroDuration());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("rankd KvGet via"));
  auto waited = client->KvGet("nccl/1", absl::Milliseconds(50));
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kDeadlineExceeded);

  const std::string binary("\0\x01\xff", 3);
  ASSERT_TRUE(client->KvSet("nccl/1", binary).ok());
  auto value = client->KvGet("nccl/1", absl::Seconds(1));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, binary);

  EXPECT_EQ(*client->KvAdd("counter", 5), 5);
  EXPECT_EQ(*client->KvAdd("counter", -2), 3);
  EXPECT_EQ(client->KvAdd("nccl/1", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*client->KvCount(""), 2u);
  EXPECT_EQ(*client->KvCount("nccl/"), 1u);
  EXPECT_EQ(*client->KvCount("count"), 1u);
  EXPECT_EQ(*client->KvCount("none/"), 0u);
  EXPECT_TRUE(*client->KvDelete("counter"));
  EXPECT_FALSE(*client->KvDelete("counter"));
  EXPECT_EQ(*client->KvCount(""), 1u);

  const int calls = daemon_->rank().kv_calls();
  EXPECT_EQ(client->KvSet("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->KvSet(std::string(kMaxKeyBytes + 1, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->KvCount(std::string(kMaxKeyBytes + 1, 'k')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->KvSet("k", std::string(kMaxValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->KvGet("k", absl::Seconds(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(daemon_->rank().kv_calls(), calls);
}

TEST_F(ClientTest, KvGetWaitsForTheKey) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(client->KvSet("late", "here").ok());
  });
  auto value = client->KvGet("late", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "here");
}

TEST_F(ClientTest, FailureEventFailsFastWithoutContactingTheDaemon) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  absl::Mutex mu;
  std::vector<v1::JobEvent> events;
  std::vector<absl::Status> failures;
  client->SetEventCallback([&](const v1::JobEvent& e) {
    absl::MutexLock lock(&mu);
    events.push_back(e);
  });
  client->SetFailureCallback([&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    failures.push_back(s);
  });

  v1::JobEvent joined;
  joined.set_sequence(1);
  joined.set_kind(v1::EVENT_KIND_MEMBER_JOINED);
  joined.add_ranks(1);
  daemon_->rank().PushEvent(joined);
  v1::JobEvent lost;
  lost.set_sequence(2);
  lost.set_kind(v1::EVENT_KIND_MEMBER_LOST);
  lost.set_node_index(0);
  lost.add_ranks(1);
  lost.set_message("rank 1 lost: connection to daemon closed");
  daemon_->rank().PushEvent(lost);

  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return events.size() == 2;
  }));
  absl::Status health = client->JobHealth();
  EXPECT_EQ(health.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(health.message(), HasSubstr("job job-a failed"));
  EXPECT_THAT(health.message(), HasSubstr("MEMBER_LOST"));
  EXPECT_THAT(health.message(), HasSubstr("rank 1"));
  EXPECT_THAT(health.message(), HasSubstr("connection to daemon closed"));
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0], health);
  }

  const int kv_calls = daemon_->rank().kv_calls();
  absl::Status set = client->KvSet("k", "v");
  EXPECT_EQ(set.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(set.message(), HasSubstr("rankd KvSet via"));
  EXPECT_THAT(set.message(), HasSubstr("rank 1"));
  EXPECT_EQ(client->AllGatherWords({1}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(daemon_->rank().kv_calls(), kv_calls);
  EXPECT_TRUE(daemon_->rank().rounds().empty());

  // A callback set after the failure hears about it at once.
  int late = 0;
  client->SetFailureCallback([&](const absl::Status&) { ++late; });
  EXPECT_EQ(late, 1);
}

// Several users of one client (a data-plane control plane, c10d stores)
// each hear of a failure: callbacks added beside the one set, once each; a
// removed one is not called; one added after the failure is called at once.
TEST_F(ClientTest, EveryAddedFailureCallbackIsCalledOnce) {
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  std::atomic<int> set{0}, first{0}, second{0}, removed{0};
  client->SetFailureCallback([&](const absl::Status&) { ++set; });
  const uint64_t a =
      client->AddFailureCallback([&](const absl::Status&) { ++first; });
  const uint64_t b =
      client->AddFailureCallback([&](const absl::Status&) { ++removed; });
  const uint64_t c =
      client->AddFailureCallback([&](const absl::Status&) { ++second; });
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  client->RemoveFailureCallback(b);
  client->RemoveFailureCallback(b);  // again: ignored

  v1::JobEvent lost;
  lost.set_sequence(1);
  lost.set_kind(v1::EVENT_KIND_MEMBER_LOST);
  lost.set_node_index(0);
  lost.add_ranks(1);
  lost.set_message("rank 1 lost");
  daemon_->rank().PushEvent(lost);
  ASSERT_TRUE(
      Eventually([&] { return set == 1 && first == 1 && second == 1; }));
  EXPECT_EQ(removed.load(), 0);
  std::atomic<int> late{0};
  client->AddFailureCallback([&](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
    ++late;
  });
  EXPECT_EQ(late.load(), 1);
  EXPECT_EQ(set.load(), 1);
  EXPECT_EQ(first.load(), 1);
}

TEST_F(ClientTest, LosingTheDaemonIsReported) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(daemon_->rank().WaitForOpenWatchStreams(1, absl::Seconds(5)));
  daemon_->Shutdown();
  ASSERT_TRUE(Eventually([&] { return !client->JobHealth().ok(); }));
  absl::Status health = client->JobHealth();
  EXPECT_EQ(health.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(health.message(),
              HasSubstr("connection to local rankd daemon lost"));
  EXPECT_THAT(health.message(), HasSubstr(daemon_->target()));
  EXPECT_EQ(client->KvSet("k", "v").code(), absl::StatusCode::kUnavailable);
  // Leave still tries, fails (no daemon), and does not hang.
  absl::Time start = absl::Now();
  EXPECT_FALSE(client->Leave().ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(6));
}

TEST_F(ClientTest, WatchStreamClosedByDaemonIsAFailure) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(daemon_->rank().WaitForOpenWatchStreams(1, absl::Seconds(5)));
  daemon_->rank().CloseWatchStreams();
  ASSERT_TRUE(Eventually([&] { return !client->JobHealth().ok(); }));
  EXPECT_THAT(client->JobHealth().message(),
              HasSubstr("the daemon closed the watch stream"));
}

TEST_F(ClientTest, LeaveIsIdempotentAndStopsTheWatchStream) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(daemon_->rank().WaitForOpenWatchStreams(1, absl::Seconds(5)));
  EXPECT_TRUE(client->Leave().ok());
  EXPECT_TRUE(client->Leave().ok());
  EXPECT_EQ(daemon_->rank().leaves(), 1);
  EXPECT_TRUE(daemon_->rank().WaitForOpenWatchStreams(0, absl::Seconds(5)));
  EXPECT_TRUE(client->JobHealth().ok());  // Leaving is not a failure.
  absl::Status after = client->KvSet("k", "v");
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(after.message(), HasSubstr("left the job"));
  EXPECT_EQ(client->Join(Join0()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  client.reset();
  EXPECT_EQ(daemon_->rank().leaves(),
            1);  // The destructor did not leave again.
}

TEST_F(ClientTest, DestructorLeaves) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  client.reset();
  EXPECT_EQ(daemon_->rank().leaves(), 1);
  EXPECT_TRUE(daemon_->rank().WaitForOpenWatchStreams(0, absl::Seconds(5)));
}

TEST_F(ClientTest, LeaveFromTheEventCallbackDoesNotDeadlock) {
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  absl::Notification left;
  absl::Status leave_status;
  client->SetEventCallback([&](const v1::JobEvent& e) {
    if (e.kind() == v1::EVENT_KIND_JOB_FAILED && !left.HasBeenNotified()) {
      leave_status = client->Leave();
      left.Notify();
    }
  });
  v1::JobEvent failed;
  failed.set_sequence(1);
  failed.set_kind(v1::EVENT_KIND_JOB_FAILED);
  failed.set_message("operator aborted the job");
  daemon_->rank().PushEvent(failed);
  ASSERT_TRUE(left.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(leave_status.ok()) << leave_status;
  EXPECT_EQ(client->JobHealth().code(), absl::StatusCode::kAborted);
  client.reset();
  EXPECT_TRUE(daemon_->rank().WaitForOpenWatchStreams(0, absl::Seconds(5)));
}

TEST_F(ClientTest, BearerTokenIsSentOnEveryCall) {
  ClientOptions options = Options(daemon_->target());
  options.bearer_token = "s3cret-token";
  std::unique_ptr<Client> client = ConnectOrDie(options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Join(Join0()).ok());
  EXPECT_EQ(daemon_->rank().last_authorization(), "Bearer s3cret-token");
  ASSERT_TRUE(client->KvSet("k", "v").ok());
  EXPECT_EQ(daemon_->rank().last_authorization(), "Bearer s3cret-token");
}

// A job event of `kind` at `epoch`, naming `rank` where it is a loss.
v1::JobEvent EpochEvent(uint64_t sequence, v1::EventKind kind, uint64_t epoch,
                        uint32_t rank = 1) {
  v1::JobEvent event;
  event.set_sequence(sequence);
  event.set_kind(kind);
  event.set_epoch(epoch);
  event.add_ranks(rank);
  event.set_message(absl::StrCat("event ", sequence));
  return event;
}

TEST_F(ClientTest, RejoinNeedsAJoinedClientAndABoundedTimeout) {
  std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->epoch(), 0u);
  auto early = client->Rejoin(1, absl::Seconds(1));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition)
      << early.status();
  EXPECT_THAT(early.status().message(), HasSubstr("rankd Rejoin via"));
  for (absl::Duration bad :
       {absl::ZeroDuration(), absl::Seconds(-1), absl::InfiniteDuration()}) {
    EXPECT_EQ(client->Rejoin(1, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  daemon_->rank().SetEpoch(1);
  ASSERT_TRUE(client->Join(Join0()).ok());
  EXPECT_EQ(client->epoch(), 1u);
  ASSERT_TRUE(client->Leave().ok());
  EXPECT_EQ(client->Rejoin(1, absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(daemon_->rank().joins(), 1);
}

TEST_F(ClientTest, RejoinEntersTheNextEpochWithTheSameIncarnation) {
  daemon_->rank().SetEpoch(1);
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  absl::Mutex mu;
  std::vector<absl::Status> failures;
  client->SetFailureCallback([&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    failures.push_back(s);
  });
  // Epoch 1: a round fails and poisons the sequence; then rank 1 is lost.
  daemon_->rank().HoldRounds(true);
  ASSERT_FALSE(client->AllGatherWords({7}, absl::Milliseconds(50)).ok());
  daemon_->rank().HoldRounds(false);
  const v1::SessionDescriptor& epoch1 = client->descriptor();
  EXPECT_EQ(epoch1.epoch(), 1u);
  daemon_->rank().PushEvent(
      EpochEvent(1, v1::EVENT_KIND_MEMBER_LOST, /*epoch=*/1));
  ASSERT_TRUE(Eventually([&] { return !client->JobHealth().ok(); }));
  EXPECT_THAT(client->JobHealth().message(), HasSubstr("rank 1"));

  // Rejoin waits for the job to move past epoch 1.
  absl::StatusOr<v1::SessionDescriptor> rejoined;
  absl::Notification done;
  std::thread rejoin([&] {
    rejoined = client->Rejoin(1, absl::Seconds(10));
    done.Notify();
  });
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  EXPECT_EQ(daemon_->rank().joins(), 1);
  daemon_->rank().SetEpoch(2);
  daemon_->rank().PushEvent(
      EpochEvent(2, v1::EVENT_KIND_JOB_RECOVERING, /*epoch=*/2));
  rejoin.join();
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->epoch(), 2u);
  EXPECT_EQ(client->epoch(), 2u);
  EXPECT_EQ(client->descriptor().epoch(), 2u);
  EXPECT_EQ(epoch1.epoch(), 1u);  // the old reference stays valid
  EXPECT_EQ(daemon_->rank().joins(), 2);
  const v1::JoinRequest join = daemon_->rank().last_join();
  EXPECT_EQ(join.incarnation(), client->incarnation());
  EXPECT_EQ(join.job_id(), "job-a");
  EXPECT_EQ(join.world_size(), 2u);
  EXPECT_GT(join.wait_for_world_ms(), 5000u);  // the time left
  EXPECT_TRUE(client->JobHealth().ok()) << client->JobHealth();

  // Rounds are numbered from 1 again, the poisoned sequence usable again.
  auto all = client->AllGatherWords({9}, absl::Seconds(5));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (std::vector<uint32_t>{9, 9}));
  ASSERT_EQ(daemon_->rank().rounds().size(), 2u);
  EXPECT_EQ(daemon_->rank().rounds()[1].round(), 1u);

  // A second Rejoin for the same ended epoch returns at once.
  auto again = client->Rejoin(1, absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch(), 2u);
  EXPECT_EQ(daemon_->rank().joins(), 2);

  // A loss that ends epoch 2 is this client's failure again, told again.
  daemon_->rank().PushEvent(
      EpochEvent(3, v1::EVENT_KIND_MEMBER_LOST, /*epoch=*/2));
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return failures.size() == 2;
  }));
  EXPECT_EQ(client->JobHealth().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(client->JobHealth().message(), HasSubstr("event 3"));
}

TEST_F(ClientTest, ReplacementDoesNotTakeEarlierEpochsLossesAsItsOwn) {
  // The stream replays the job's events from the first, epoch 1's loss
  // included; this process joined into epoch 2.
  daemon_->rank().PushEvent(
      EpochEvent(1, v1::EVENT_KIND_MEMBER_LOST, /*epoch=*/1));
  daemon_->rank().PushEvent(
      EpochEvent(2, v1::EVENT_KIND_JOB_RECOVERING, /*epoch=*/2));
  daemon_->rank().SetEpoch(2);
  std::unique_ptr<Client> client = ConnectOrDie(Options(daemon_->target()));
  ASSERT_NE(client, nullptr);
  absl::Mutex mu;
  int events = 0;
  client->SetEventCallback([&](const v1::JobEvent&) {
    absl::MutexLock lock(&mu);
    ++events;
  });
  ASSERT_TRUE(client->Join(Join0()).ok());
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return events == 2;
  }));
  EXPECT_TRUE(client->JobHealth().ok()) << client->JobHealth();
  EXPECT_EQ(client->epoch(), 2u);
  // Its Rejoin for the epoch before its own returns at once.
  EXPECT_TRUE(client->Rejoin(1, absl::Seconds(1)).ok());
  EXPECT_EQ(daemon_->rank().joins(), 1);
  // A loss of its own epoch counts.
  daemon_->rank().PushEvent(
      EpochEvent(3, v1::EVENT_KIND_NODE_LOST, /*epoch=*/2));
  ASSERT_TRUE(Eventually([&] { return !client->JobHealth().ok(); }));
}

// A failure callback runs on the watch thread, which reads the events a
// Rejoin waits for: a Rejoin there could only time out (10 s here), so it
// is refused at once, naming the thread.
TEST_F(ClientTest, RejoinOnTheWatchThreadIsRefusedAtOnce) {
  daemon_->rank().SetEpoch(1);
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  absl::Notification called;
  absl::StatusOr<v1::SessionDescriptor> rejoined =
      absl::UnknownError("not called");
  absl::Duration took;
  client->SetFailureCallback([&](const absl::Status&) {
    const absl::Time start = absl::Now();
    rejoined = client->Rejoin(1, absl::Seconds(10));
    took = absl::Now() - start;
    called.Notify();
  });
  daemon_->rank().PushEvent(
      EpochEvent(1, v1::EVENT_KIND_MEMBER_LOST, /*epoch=*/1));
  ASSERT_TRUE(called.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kFailedPrecondition)
      << rejoined.status();
  EXPECT_THAT(rejoined.status().message(), HasSubstr("on the watch thread"));
  EXPECT_LT(took, absl::Seconds(1));
  // From another thread it works as ever.
  daemon_->rank().SetEpoch(2);
  daemon_->rank().PushEvent(
      EpochEvent(2, v1::EVENT_KIND_JOB_RECOVERING, /*epoch=*/2));
  auto again = client->Rejoin(1, absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch(), 2u);
}

TEST_F(ClientTest, RejoinReturnsTheJobsFailureWithoutWaiting) {
  daemon_->rank().SetEpoch(1);
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  daemon_->rank().PushEvent(
      EpochEvent(1, v1::EVENT_KIND_MEMBER_LOST, /*epoch=*/1));
  v1::JobEvent failed = EpochEvent(2, v1::EVENT_KIND_JOB_FAILED, /*epoch=*/1);
  failed.set_message("rank 1 lost (recovery off)");
  daemon_->rank().PushEvent(failed);
  const absl::Time start = absl::Now();
  auto rejoined = client->Rejoin(1, absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kAborted)
      << rejoined.status();
  EXPECT_THAT(rejoined.status().message(), HasSubstr("rankd Rejoin via"));
  EXPECT_EQ(daemon_->rank().joins(), 1);
}

TEST_F(ClientTest, RejoinTimesOutNamingTheEpochItWaitedFor) {
  daemon_->rank().SetEpoch(1);
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  auto rejoined = client->Rejoin(1, absl::Milliseconds(300));
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kDeadlineExceeded)
      << rejoined.status();
  EXPECT_THAT(rejoined.status().message(), HasSubstr("epoch 2"));
  EXPECT_EQ(daemon_->rank().joins(), 1);
  EXPECT_EQ(client->epoch(), 1u);
}

// Concurrent Rejoins run one after another, but one waiting for another
// still ends at its own deadline (it waited for the first one's whole
// timeout before).
TEST_F(ClientTest, ARejoinWaitingForAnotherEndsAtItsOwnDeadline) {
  daemon_->rank().SetEpoch(1);
  std::unique_ptr<Client> client = Joined(2);
  ASSERT_NE(client, nullptr);
  std::thread first([&] {
    auto long_one = client->Rejoin(1, absl::Seconds(5));
    EXPECT_EQ(long_one.status().code(), absl::StatusCode::kDeadlineExceeded);
  });
  // The first one waits by now (it only has to start and take the flag;
  // a second of head start for a loaded machine).
  absl::SleepFor(absl::Seconds(1));
  const absl::Time start = absl::Now();
  auto short_one = client->Rejoin(1, absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  first.join();
  EXPECT_EQ(short_one.status().code(), absl::StatusCode::kDeadlineExceeded)
      << short_one.status();
  EXPECT_THAT(short_one.status().message(), HasSubstr("another Rejoin"));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST_F(ClientTest, RejoinAfterTheWatchStreamIsLostFailsAtOnce) {
  daemon_->rank().SetEpoch(1);
  std::unique_ptr<Client> client = Joined();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(daemon_->rank().WaitForOpenWatchStreams(1, absl::Seconds(5)));
  daemon_->rank().CloseWatchStreams();
  ASSERT_TRUE(Eventually([&] { return !client->JobHealth().ok(); }));
  auto rejoined = client->Rejoin(1, absl::Seconds(30));
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kUnavailable)
      << rejoined.status();
}

TEST(ClientTcpTest, KeepaliveConnectionStaysHealthy) {
  auto daemon = FakeDaemon::Start(FakeDaemon::Transport::kTcp);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ClientOptions options = Options((*daemon)->target());
  options.keepalive_time = absl::Milliseconds(500);
  options.keepalive_timeout = absl::Milliseconds(500);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(Join0()).ok());
  // Several keepalive periods with no traffic but the idle watch stream; a
  // server that refused the pings would close the connection (too_many_pings).
  absl::SleepFor(absl::Seconds(2));
  EXPECT_TRUE((*client)->JobHealth().ok()) << (*client)->JobHealth();
  EXPECT_TRUE((*client)->AllGatherWords({1}, absl::Seconds(1)).ok());
  EXPECT_TRUE((*client)->Leave().ok());
}

// Documents what the daemon must configure: a server with gRPC's default
// ping policy answers the client's keepalive pings with GOAWAY
// "too_many_pings", which breaks the watch stream (the rank's lease).
TEST(ClientTcpTest, DaemonMustPermitKeepalivePings) {
  auto daemon = FakeDaemon::Start(FakeDaemon::Transport::kTcp,
                                  /*permit_keepalive=*/false);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ClientOptions options = Options((*daemon)->target());
  options.keepalive_time = absl::Milliseconds(200);
  options.keepalive_timeout = absl::Milliseconds(500);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(Join0()).ok());
  ASSERT_TRUE(Eventually([&] { return !(*client)->JobHealth().ok(); },
                         absl::Seconds(30)));
  EXPECT_THAT((*client)->JobHealth().message(),
              HasSubstr("connection to local rankd daemon lost"));
}

}  // namespace
}  // namespace rankd
