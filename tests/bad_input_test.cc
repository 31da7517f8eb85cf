// Bad input against real rankd daemons: every request below is sent with the
// raw generated gRPC stubs (no client-library validation in the way) to a
// LocalCluster of 2 daemons x 2 local ranks over loopback TCP. Each case
// checks the exact status code and the part of the message a person acts
// on, and that the daemons keep serving afterwards (health SERVING,
// readiness SERVING, a successful GetJob, job not failed).
//
// Ranks joined here open no Watch stream, so the cluster runs with a long
// --heartbeat_timeout_ms (the lease of a joined rank without a stream).
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "common/credentials.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.grpc.pb.h"
#include "rankd/v1/peer.grpc.pb.h"
#include "rankd/v1/rank.grpc.pb.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = "badinput";
constexpr uint32_t kNprocPerNode = 2;
constexpr uint32_t kWorld = 4;  // 2 nodes x 2 local ranks

// Checks code and message fragment of a grpc::Status.
#define EXPECT_RPC_ERROR(expr, code, fragment)                               \
  do {                                                                       \
    const grpc::Status s_ = (expr);                                          \
    EXPECT_EQ(s_.error_code(), (code)) << "message: " << s_.error_message(); \
    EXPECT_THAT(s_.error_message(), HasSubstr(fragment));                    \
  } while (0)

#define ASSERT_RPC_OK(expr)                                               \
  do {                                                                    \
    const grpc::Status s_ = (expr);                                       \
    ASSERT_TRUE(s_.ok()) << s_.error_code() << " " << s_.error_message(); \
  } while (0)

std::unique_ptr<grpc::ClientContext> Ctx(int timeout_ms = 5000) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(timeout_ms));
  return context;
}

class BadInputTest : public ::testing::Test {
 protected:
  // Flags for both daemons.
  virtual std::vector<std::string> ExtraFlags() const {
    return {"--admin_kv_read=true"};
  }

  void SetUp() override {
    ClusterOptions options;
    options.job_id = kJob;
    options.nnodes = 2;
    options.nproc_per_node = 2;
    options.heartbeat_interval_ms = 100;
    options.heartbeat_timeout_ms = 60000;
    options.extra_flags = ExtraFlags();
    cluster_ = std::make_unique<LocalCluster>(options);
    absl::Status started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started;
    for (uint32_t n = 0; n < 2; ++n) {
      auto channel = grpc::CreateChannel(cluster_->tcp_address(n),
                                         grpc::InsecureChannelCredentials());
      channels_.push_back(channel);
      rank_.push_back(v1::Rank::NewStub(channel));
      peer_.push_back(v1::Peer::NewStub(channel));
      admin_.push_back(v1::Admin::NewStub(channel));
    }
  }

  // Contexts carrying each role's credential from the job's credentials
  // (docs/operations.md, "Credentials"): rank `rank`'s own token for
  // node `node`'s daemon, the operator token, and node `node`'s token.
  std::unique_ptr<grpc::ClientContext> RankCtx(uint32_t node, uint32_t rank,
                                               int timeout_ms = 5000) {
    return WithToken(Ctx(timeout_ms), cluster_->rank_token(rank, node));
  }
  std::unique_ptr<grpc::ClientContext> AdminCtx(int timeout_ms = 5000) {
    return WithToken(Ctx(timeout_ms), cluster_->operator_token());
  }
  std::unique_ptr<grpc::ClientContext> NodeCtx(uint32_t node,
                                               int timeout_ms = 5000) {
    auto key = ReadCredentialFile(cluster_->credentials_dir(), kNodeKeyFile);
    EXPECT_TRUE(key.ok()) << key.status();
    return WithToken(Ctx(timeout_ms), NodeToken(key.value_or(""), kJob, node));
  }
  static std::unique_ptr<grpc::ClientContext> WithToken(
      std::unique_ptr<grpc::ClientContext> context, const std::string& token) {
    context->AddMetadata("authorization", "Bearer " + token);
    return context;
  }

  // Blocking key-value gets waiting on the coordinator (Admin.GetJob).
  uint32_t KvWaiters() {
    v1::JobStatus job;
    auto context = AdminCtx();
    grpc::Status s =
        admin_[0]->GetJob(context.get(), v1::GetJobRequest(), &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job.kv_waiters();
  }

  // Every daemon still answers and the job is not corrupted.
  void ExpectStillServing(v1::JobState state = v1::JOB_STATE_FORMING) {
    for (uint32_t n = 0; n < 2; ++n) {
      SCOPED_TRACE(absl::StrCat("node ", n));
      EXPECT_TRUE(cluster_->daemon(n).running())
          << cluster_->daemon(n).ReadLog();
      ClientOptions options = cluster_->AdminOptions(n);
      options.connect_timeout = absl::Seconds(5);
      auto admin = AdminClient::Connect(options);
      ASSERT_TRUE(admin.ok()) << admin.status();
      auto health = (*admin)->Health("");
      ASSERT_TRUE(health.ok()) << health.status();
      EXPECT_EQ(*health, "SERVING");
      auto ready = (*admin)->Health("readiness");
      ASSERT_TRUE(ready.ok()) << ready.status();
      EXPECT_EQ(*ready, "SERVING");
      auto job = (*admin)->GetJob();
      ASSERT_TRUE(job.ok()) << job.status();
      EXPECT_EQ(job->job_id(), kJob);
      EXPECT_EQ(job->failure(), "");
      if (n == 0) {
        EXPECT_EQ(job->state(), state);
      }
    }
  }

  static v1::JoinRequest JoinReq(uint32_t local_rank, uint64_t incarnation,
                                 uint32_t pid) {
    v1::JoinRequest request;
    request.set_job_id(kJob);
    request.set_local_rank(local_rank);
    request.set_world_size(kWorld);
    request.set_incarnation(incarnation);
    request.set_pid(pid);
    request.mutable_device()->set_kind("cpu");
    return request;
  }

  grpc::Status Join(uint32_t node, const v1::JoinRequest& request,
                    v1::JoinResponse* response = nullptr) {
    v1::JoinResponse ignored;
    auto context = RankCtx(
        node, request.has_rank() ? request.rank()
                                 : node * kNprocPerNode + request.local_rank());
    return rank_[node]->Join(context.get(), request,
                             response != nullptr ? response : &ignored);
  }

  // Joins (node, local_rank) and returns its member reference.
  v1::MemberRef MustJoin(uint32_t node, uint32_t local_rank,
                         uint64_t incarnation, uint32_t pid) {
    v1::JoinResponse response;
    grpc::Status s =
        Join(node, JoinReq(local_rank, incarnation, pid), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(response.member().rank(), node * 2 + local_rank);
    return response.member();
  }

  grpc::Status KvSet(uint32_t node, const v1::MemberRef& member,
                     const std::string& key, const std::string& value) {
    v1::KvSetRequest request;
    *request.mutable_member() = member;
    request.set_key(key);
    request.set_value(value);
    v1::KvSetResponse response;
    auto context = RankCtx(node, member.rank());
    return rank_[node]->KvSet(context.get(), request, &response);
  }

  grpc::Status KvGet(uint32_t node, const v1::MemberRef& member,
                     const std::string& key, uint32_t timeout_ms,
                     std::string* value = nullptr) {
    v1::KvGetRequest request;
    *request.mutable_member() = member;
    request.set_key(key);
    request.set_timeout_ms(timeout_ms);
    v1::KvGetResponse response;
    auto context = RankCtx(node, member.rank(), timeout_ms + 5000);
    grpc::Status s = rank_[node]->KvGet(context.get(), request, &response);
    if (value != nullptr) *value = response.value();
    return s;
  }

  grpc::Status KvAdd(uint32_t node, const v1::MemberRef& member,
                     const std::string& key, int64_t delta,
                     int64_t* value = nullptr) {
    v1::KvAddRequest request;
    *request.mutable_member() = member;
    request.set_key(key);
    request.set_delta(delta);
    v1::KvAddResponse response;
    auto context = RankCtx(node, member.rank());
    grpc::Status s = rank_[node]->KvAdd(context.get(), request, &response);
    if (value != nullptr) *value = response.value();
    return s;
  }

  grpc::Status KvDelete(uint32_t node, const v1::MemberRef& member,
                        const std::string& key, bool* existed = nullptr) {
    v1::KvDeleteRequest request;
    *request.mutable_member() = member;
    request.set_key(key);
    v1::KvDeleteResponse response;
    auto context = RankCtx(node, member.rank());
    grpc::Status s = rank_[node]->KvDelete(context.get(), request, &response);
    if (existed != nullptr) *existed = response.existed();
    return s;
  }

  grpc::Status KvCount(uint32_t node, const v1::MemberRef& member,
                       const std::string& prefix, uint64_t* keys = nullptr) {
    v1::KvCountRequest request;
    *request.mutable_member() = member;
    request.set_prefix(prefix);
    v1::KvCountResponse response;
    auto context = RankCtx(node, member.rank());
    grpc::Status s = rank_[node]->KvCount(context.get(), request, &response);
    if (keys != nullptr) *keys = response.keys();
    return s;
  }

  grpc::Status Words(uint32_t node, const v1::MemberRef& member, uint64_t round,
                     std::vector<uint32_t> words, uint32_t timeout_ms,
                     v1::AllGatherWordsResponse* response = nullptr) {
    v1::AllGatherWordsRequest request;
    *request.mutable_member() = member;
    request.set_round(round);
    for (uint32_t w : words) request.add_words(w);
    request.set_timeout_ms(timeout_ms);
    v1::AllGatherWordsResponse ignored;
    auto context = RankCtx(node, member.rank(), 10000);
    return rank_[node]->AllGatherWords(
        context.get(), request, response != nullptr ? response : &ignored);
  }

  // The final status of a Watch stream (events read are discarded) after at
  // most `timeout_ms`.
  grpc::Status WatchStatus(uint32_t node, const v1::MemberRef& member,
                           int timeout_ms = 3000) {
    v1::WatchRequest request;
    *request.mutable_member() = member;
    auto context = RankCtx(node, member.rank(), timeout_ms);
    auto reader = rank_[node]->Watch(context.get(), request);
    v1::JobEvent event;
    while (reader->Read(&event)) {
    }
    return reader->Finish();
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Rank::Stub>> rank_;
  std::vector<std::unique_ptr<v1::Peer::Stub>> peer_;
  std::vector<std::unique_ptr<v1::Admin::Stub>> admin_;
};

TEST_F(BadInputTest, JoinWithWrongJobIdIsNotFound) {
  v1::JoinRequest request = JoinReq(0, 0x1001, 100);
  request.set_job_id("other-job");
  EXPECT_RPC_ERROR(
      Join(0, request), grpc::StatusCode::NOT_FOUND,
      "unknown job 'other-job'; this daemon serves job 'badinput'");
  request.set_job_id("");
  EXPECT_RPC_ERROR(Join(1, request), grpc::StatusCode::NOT_FOUND,
                   "unknown job ''; this daemon serves job 'badinput'");
  ExpectStillServing();
}

TEST_F(BadInputTest, JoinFieldsOutOfRangeAreInvalidArgument) {
  v1::JoinRequest request = JoinReq(0, 0x1002, 100);
  request.set_world_size(5);
  EXPECT_RPC_ERROR(
      Join(0, request), grpc::StatusCode::INVALID_ARGUMENT,
      "world_size 5 does not match job 'badinput', which has 4 ranks");

  request = JoinReq(2, 0x1002, 100);
  EXPECT_RPC_ERROR(
      Join(0, request), grpc::StatusCode::INVALID_ARGUMENT,
      "local_rank 2 is outside [0, 2) (the daemon's --nproc_per_node)");

  request = JoinReq(0, 0x1002, 100);
  request.set_rank(4);
  EXPECT_RPC_ERROR(Join(0, request), grpc::StatusCode::INVALID_ARGUMENT,
                   "rank 4 is outside the world of size 4");

  request = JoinReq(0, 0, 100);
  EXPECT_RPC_ERROR(
      Join(0, request), grpc::StatusCode::INVALID_ARGUMENT,
      "incarnation must be a random non-zero id chosen at process start");

  request = JoinReq(0, 0x1002, 100);
  request.mutable_device()->set_kind("tpu");
  EXPECT_RPC_ERROR(Join(0, request), grpc::StatusCode::INVALID_ARGUMENT,
                   "device kind 'tpu' is not one of \"cpu\", \"cuda\"");

  request = JoinReq(0, 0x1002, 100);
  request.set_wait_for_world_ms(3'600'001);
  EXPECT_RPC_ERROR(Join(0, request), grpc::StatusCode::INVALID_ARGUMENT,
                   "wait_for_world_ms=3600001 exceeds the limit of 3600000 ms");

  // None of it claimed a rank: the same local rank joins fine afterwards.
  MustJoin(0, 0, 0x1002, 100);
  ExpectStillServing();
}

TEST_F(BadInputTest, SecondIncarnationClaimingALocalRankNamesTheHolderPid) {
  MustJoin(0, 0, 0x1111, 31337);
  // A retry by the same process (same incarnation) is harmless.
  ASSERT_RPC_OK(Join(0, JoinReq(0, 0x1111, 31337)));
  EXPECT_RPC_ERROR(
      Join(0, JoinReq(0, 0x2222, 4242)), grpc::StatusCode::ALREADY_EXISTS,
      "local rank 0 on node 0 is already held by pid 31337 (rank 0)");
  // The same world rank claimed explicitly from the other node is caught
  // by the coordinator.
  v1::JoinRequest explicit_rank = JoinReq(0, 0x3333, 5151);
  explicit_rank.set_rank(0);
  EXPECT_RPC_ERROR(Join(1, explicit_rank), grpc::StatusCode::ALREADY_EXISTS,
                   "rank 0 is already held by pid 31337 on node 0");
  // The rejected claims left nothing behind on node 1.
  MustJoin(1, 0, 0x4444, 6161);
  ExpectStillServing();
  v1::ListMembersRequest request;
  v1::MemberList members;
  auto context = AdminCtx();
  ASSERT_RPC_OK(admin_[0]->ListMembers(context.get(), request, &members));
  ASSERT_EQ(members.members_size(), 4);
  EXPECT_EQ(members.members(0).pid(), 31337u);
  // Admin shows who holds a rank but never the incarnation that would let
  // a caller act as it.
  EXPECT_EQ(members.members(0).incarnation(), 0u);
  EXPECT_EQ(members.members(2).pid(), 6161u);
}

TEST_F(BadInputTest, OneProcessClaimingTwoLocalRanksIsRefused) {
  MustJoin(0, 0, 0x5151, 900);
  // The same process (incarnation) claims rank 0 again as local rank 1:
  // refused before anything changes, so local rank 0 still maps to it.
  v1::JoinRequest again = JoinReq(1, 0x5151, 900);
  again.set_rank(0);
  EXPECT_RPC_ERROR(Join(0, again), grpc::StatusCode::INVALID_ARGUMENT,
                   "rank 0 joined as local rank 0 on node 0; the same process "
                   "cannot join it again as local rank 1");
  EXPECT_RPC_ERROR(
      Join(0, JoinReq(0, 0x6161, 901)), grpc::StatusCode::ALREADY_EXISTS,
      "local rank 0 on node 0 is already held by pid 900 (rank 0)");
  // Nor may it take a second rank with the local rank it holds.
  v1::JoinRequest second = JoinReq(0, 0x5151, 900);
  second.set_rank(1);
  EXPECT_RPC_ERROR(Join(0, second), grpc::StatusCode::INVALID_ARGUMENT,
                   "local rank 0 on node 0 already holds rank 0; the same "
                   "process cannot join rank 1 with it");
  MustJoin(0, 1, 0x7171, 902);
  ExpectStillServing();
}

TEST_F(BadInputTest, UnknownMemberAndStaleIncarnationAreFailedPrecondition) {
  v1::MemberRef member = MustJoin(0, 0, 0xabc1, 700);
  ASSERT_EQ(member.incarnation(), 0xabc1u);

  v1::MemberRef never = member;
  never.set_rank(1);
  EXPECT_RPC_ERROR(KvSet(0, never, "k", "v"),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "rank 1 has not joined through this daemon (node 0); call "
                   "Join first");
  // Rank 0 asking the wrong daemon.
  EXPECT_RPC_ERROR(KvSet(1, member, "k", "v"),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "rank 0 has not joined through this daemon (node 1)");

  v1::MemberRef stale = member;
  stale.set_incarnation(0xabc2);
  const std::string stale_text =
      "rank 0: incarnation abc2 is stale (the rank joined with another)";
  EXPECT_RPC_ERROR(KvSet(0, stale, "k", "v"),
                   grpc::StatusCode::FAILED_PRECONDITION, stale_text);
  EXPECT_RPC_ERROR(KvGet(0, stale, "k", 0),
                   grpc::StatusCode::FAILED_PRECONDITION, stale_text);
  EXPECT_RPC_ERROR(KvAdd(0, stale, "k", 1),
                   grpc::StatusCode::FAILED_PRECONDITION, stale_text);
  EXPECT_RPC_ERROR(Words(0, stale, 1, {1, 2}, 1000),
                   grpc::StatusCode::FAILED_PRECONDITION, stale_text);
  {
    v1::GetDescriptorRequest request;
    *request.mutable_member() = stale;
    v1::SessionDescriptor descriptor;
    auto context = RankCtx(0, stale.rank());
    EXPECT_RPC_ERROR(
        rank_[0]->GetDescriptor(context.get(), request, &descriptor),
        grpc::StatusCode::FAILED_PRECONDITION, stale_text);
  }
  {
    v1::LeaveRequest request;
    *request.mutable_member() = stale;
    v1::LeaveResponse response;
    auto context = RankCtx(0, stale.rank());
    EXPECT_RPC_ERROR(rank_[0]->Leave(context.get(), request, &response),
                     grpc::StatusCode::FAILED_PRECONDITION, stale_text);
  }
  EXPECT_RPC_ERROR(WatchStatus(0, stale), grpc::StatusCode::FAILED_PRECONDITION,
                   "rank 0 (incarnation abc2) has not joined through this "
                   "daemon (node 0)");
  v1::MemberRef other_job = member;
  other_job.set_job_id("elsewhere");
  EXPECT_RPC_ERROR(
      KvSet(0, other_job, "k", "v"), grpc::StatusCode::NOT_FOUND,
      "unknown job 'elsewhere'; this daemon serves job 'badinput'");

  // The real member is untouched by the fenced calls.
  ASSERT_RPC_OK(KvSet(0, member, "k", "v"));
  std::string value;
  ASSERT_RPC_OK(KvGet(0, member, "k", 0, &value));
  EXPECT_EQ(value, "v");
  ExpectStillServing();
}

TEST_F(BadInputTest, WatchForARankThatNeverJoinedIsRefused) {
  v1::MemberRef ghost;
  ghost.set_job_id(kJob);
  ghost.set_rank(1);
  ghost.set_incarnation(7);
  EXPECT_RPC_ERROR(WatchStatus(0, ghost), grpc::StatusCode::FAILED_PRECONDITION,
                   "rank 1 (incarnation 7) has not joined through this daemon "
                   "(node 0)");
  ghost.set_rank(99);
  EXPECT_RPC_ERROR(WatchStatus(1, ghost), grpc::StatusCode::FAILED_PRECONDITION,
                   "rank 99 (incarnation 7) has not joined through this daemon "
                   "(node 1)");
  ghost.set_job_id("nope");
  EXPECT_RPC_ERROR(WatchStatus(0, ghost), grpc::StatusCode::NOT_FOUND,
                   "unknown job 'nope'");
  ExpectStillServing();
}

// A round flushed without one of the node's ranks is retired at its
// deadline instead of being held forever, and that rank's late frame goes
// to the coordinator on its own (which answers at once).
TEST_F(BadInputTest, ARoundALocalRankNeverJoinsIsRetiredAtItsDeadline) {
  v1::MemberRef early = MustJoin(0, 0, 0x5101, 510);
  v1::MemberRef late = MustJoin(0, 1, 0x5102, 511);
  // Ranks 2-3 of node 1 never come either.
  EXPECT_RPC_ERROR(Words(0, early, 1, {1}, 400),
                   grpc::StatusCode::DEADLINE_EXCEEDED, "(node 0: 1; node 1");
  auto open_rounds = [&] {
    v1::JobStatus job;
    auto context = AdminCtx();
    EXPECT_TRUE(
        admin_[0]->GetJob(context.get(), v1::GetJobRequest(), &job).ok());
    return job.open_local_rounds();
  };
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (open_rounds() != 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(open_rounds(), 0u);
  const absl::Time sent = absl::Now();
  grpc::Status s = Words(0, late, 1, {2}, 5000);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(absl::Now() - sent, absl::Seconds(3)) << s.error_message();
  EXPECT_EQ(open_rounds(), 0u);
  ExpectStillServing();
}

TEST_F(BadInputTest, AllGatherWordsRejectsBadRoundsTimeoutsAndFrames) {
  v1::MemberRef member = MustJoin(0, 0, 0x5001, 500);
  EXPECT_RPC_ERROR(
      Words(0, member, 0, {1}, 1000), grpc::StatusCode::INVALID_ARGUMENT,
      "round 0 is not a round number: rounds are numbered 1, 2, 3");
  EXPECT_RPC_ERROR(Words(0, member, 2, {1}, 1000),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "rank 0 sent all_gather_words round 2 but its next round is "
                   "1 (rounds are numbered 1, 2, 3... per rank)");
  EXPECT_RPC_ERROR(Words(0, member, 1, {1}, 0),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "timeout_ms must be > 0: every wait needs a deadline");
  EXPECT_RPC_ERROR(Words(0, member, 1, {1}, 3'600'001),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "timeout_ms=3600001 exceeds the limit of 3600000 ms");
  EXPECT_RPC_ERROR(Words(0, member, 1, std::vector<uint32_t>(65537, 7), 1000),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "frame of 65537 words exceeds the limit of 65536 words per "
                   "rank per round");
  ExpectStillServing();

  // None of the rejected calls used up round 1: with every rank joined,
  // round 1 (with a maximal frame from everyone) completes.
  std::vector<v1::MemberRef> members = {member, MustJoin(0, 1, 0x5002, 501),
                                        MustJoin(1, 0, 0x5003, 502),
                                        MustJoin(1, 1, 0x5004, 503)};
  std::vector<grpc::Status> statuses(kWorld);
  std::vector<v1::AllGatherWordsResponse> responses(kWorld);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      statuses[r] =
          Words(r / 2, members[r], 1, std::vector<uint32_t>(65536, 1000 + r),
                8000, &responses[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << r << ": " << statuses[r].error_message();
    EXPECT_EQ(responses[r].round(), 1u);
    EXPECT_EQ(responses[r].words_per_rank(), 65536u);
    ASSERT_EQ(responses[r].words_size(), 4 * 65536);
    for (uint32_t s = 0; s < kWorld; ++s) {
      EXPECT_EQ(responses[r].words(s * 65536), 1000 + s);
      EXPECT_EQ(responses[r].words(s * 65536 + 65535), 1000 + s);
    }
  }
  ExpectStillServing(v1::JOB_STATE_READY);
}

TEST_F(BadInputTest, KvSetRejectsEmptyAndOversizedKeysAndValues) {
  v1::MemberRef member = MustJoin(0, 0, 0x6001, 600);
  EXPECT_RPC_ERROR(KvSet(0, member, "", "v"),
                   grpc::StatusCode::INVALID_ARGUMENT, "key must not be empty");
  EXPECT_RPC_ERROR(KvSet(0, member, std::string(513, 'k'), "v"),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "key is 513 bytes; the limit is 512");
  EXPECT_RPC_ERROR(KvSet(0, member, "big", std::string((1 << 20) + 1, 'x')),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "value is 1048577 bytes; the limit is 1048576");
  EXPECT_RPC_ERROR(KvGet(0, member, "", 0), grpc::StatusCode::INVALID_ARGUMENT,
                   "key must not be empty");
  EXPECT_RPC_ERROR(KvAdd(0, member, std::string(600, 'k'), 1),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "key is 600 bytes; the limit is 512");
  EXPECT_RPC_ERROR(KvGet(0, member, "k", 3'600'001),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "timeout_ms=3600001 exceeds the limit of 3600000 ms");
  // The limits themselves are accepted.
  ASSERT_RPC_OK(
      KvSet(0, member, std::string(512, 'k'), std::string(1 << 20, 'x')));
  std::string value;
  ASSERT_RPC_OK(KvGet(0, member, std::string(512, 'k'), 0, &value));
  EXPECT_EQ(value.size(), 1u << 20);
  ExpectStillServing();
}

TEST_F(BadInputTest, KvGetWithoutWaitIsNotFoundAndBlockingGetIsReleasedBySet) {
  v1::MemberRef getter = MustJoin(0, 0, 0x7001, 700);
  v1::MemberRef setter = MustJoin(1, 0, 0x7002, 701);  // rank 2, other node
  EXPECT_RPC_ERROR(KvGet(0, getter, "missing", 0), grpc::StatusCode::NOT_FOUND,
                   "key 'missing' is not set");
  EXPECT_RPC_ERROR(KvGet(0, getter, "never", 300),
                   grpc::StatusCode::DEADLINE_EXCEEDED,
                   "key 'never' was not set within");

  std::atomic<bool> done{false};
  grpc::Status status;
  std::string value;
  absl::Time started = absl::Now();
  absl::Duration waited;
  std::thread waiter([&] {
    status = KvGet(0, getter, "nccl-id", 10000, &value);
    waited = absl::Now() - started;
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_FALSE(done.load())
      << "KvGet returned before the key was set: " << status.error_message();
  ASSERT_RPC_OK(KvSet(1, setter, "nccl-id", std::string("\x00\x01id", 4)));
  waiter.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(value, std::string("\x00\x01id", 4));
  EXPECT_GE(waited, absl::Milliseconds(400));
  EXPECT_LT(waited, absl::Seconds(5));
  ExpectStillServing();
}

// Blocking gets of an hour that their clients abandon are released at once
// on the coordinator, for ranks on its own node and on another node (whose
// daemon cancels the call it forwarded), instead of staying parked.
TEST_F(BadInputTest, AbandonedBlockingGetsAreReleasedAtOnce) {
  const v1::MemberRef members[2] = {MustJoin(0, 0, 0xca01, 700),
                                    MustJoin(1, 0, 0xca02, 701)};
  constexpr int kPerNode = 50;
  struct Call {
    std::unique_ptr<grpc::ClientContext> context;
    v1::KvGetRequest request;
    v1::KvGetResponse response;
    grpc::Status status;
    absl::Notification done;
  };
  std::vector<std::unique_ptr<Call>> calls;
  for (uint32_t node = 0; node < 2; ++node) {
    for (int i = 0; i < kPerNode; ++i) {
      auto call = std::make_unique<Call>();
      call->context = RankCtx(node, members[node].rank(), 60000);
      *call->request.mutable_member() = members[node];
      call->request.set_key(absl::StrCat("never-set-", i % 5));
      call->request.set_timeout_ms(kMaxTimeoutMs);
      Call* c = call.get();
      rank_[node]->async()->KvGet(c->context.get(), &c->request, &c->response,
                                  [c](grpc::Status s) {
                                    c->status = std::move(s);
                                    c->done.Notify();
                                  });
      calls.push_back(std::move(call));
    }
  }
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (KvWaiters() != 2 * kPerNode && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(KvWaiters(), 2u * kPerNode);
  for (auto& call : calls) call->context->TryCancel();
  for (auto& call : calls) {
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(call->status.error_code(), grpc::StatusCode::CANCELLED);
  }
  deadline = absl::Now() + absl::Seconds(5);
  while (KvWaiters() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(KvWaiters(), 0u);
  // The broker still serves: a get of a key set later is answered.
  ASSERT_RPC_OK(KvSet(0, members[0], "never-set-0", "now"));
  std::string value;
  ASSERT_RPC_OK(KvGet(1, members[1], "never-set-0", 1000, &value));
  EXPECT_EQ(value, "now");
  ExpectStillServing();
}

TEST_F(BadInputTest, KvAddOnANonCounterIsFailedPrecondition) {
  v1::MemberRef member = MustJoin(0, 1, 0x8001, 800);
  ASSERT_RPC_OK(KvSet(0, member, "word", "hello"));
  EXPECT_RPC_ERROR(KvAdd(0, member, "word", 1),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "key 'word' holds a value that is not a decimal counter");
  ASSERT_RPC_OK(KvSet(0, member, "max", "9223372036854775807"));
  EXPECT_RPC_ERROR(KvAdd(0, member, "max", 1), grpc::StatusCode::OUT_OF_RANGE,
                   "overflows int64");
  // Neither value changed, and counters still work.
  std::string value;
  ASSERT_RPC_OK(KvGet(0, member, "word", 0, &value));
  EXPECT_EQ(value, "hello");
  int64_t counter = 0;
  ASSERT_RPC_OK(KvAdd(0, member, "counter", 5, &counter));
  ASSERT_RPC_OK(KvAdd(0, member, "counter", -7, &counter));
  EXPECT_EQ(counter, -2);
  ExpectStillServing();
}

TEST_F(BadInputTest, KvCountCountsAPrefixFromEveryNodeAndRefusesBadInput) {
  v1::MemberRef rank0 = MustJoin(0, 0, 0x8101, 810);
  v1::MemberRef rank2 = MustJoin(1, 0, 0x8102, 811);
  ASSERT_RPC_OK(KvSet(0, rank0, "count/a", "v"));
  ASSERT_RPC_OK(KvAdd(1, rank2, "count/b", 1));
  ASSERT_RPC_OK(KvSet(1, rank2, "counted-not", "v"));
  uint64_t keys = 0;
  // Node 1 reaches the coordinator's store over Peer.KvCount.
  ASSERT_RPC_OK(KvCount(1, rank2, "count/", &keys));
  EXPECT_EQ(keys, 2u);
  ASSERT_RPC_OK(KvCount(0, rank0, "count/", &keys));
  EXPECT_EQ(keys, 2u);
  ASSERT_RPC_OK(KvCount(0, rank0, "count", &keys));
  EXPECT_EQ(keys, 3u);
  ASSERT_RPC_OK(KvCount(1, rank2, "", &keys));
  EXPECT_GE(keys, 3u);
  ASSERT_RPC_OK(KvDelete(0, rank0, "count/a"));
  ASSERT_RPC_OK(KvCount(1, rank2, "count/", &keys));
  EXPECT_EQ(keys, 1u);

  EXPECT_RPC_ERROR(KvCount(1, rank2, std::string(513, 'p')),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "prefix is 513 bytes; the limit is 512");
  ASSERT_RPC_OK(KvCount(1, rank2, std::string(512, 'p'), &keys));
  EXPECT_EQ(keys, 0u);
  v1::MemberRef stale = rank2;
  stale.set_incarnation(0x8103);
  EXPECT_RPC_ERROR(KvCount(1, stale, ""), grpc::StatusCode::FAILED_PRECONDITION,
                   "incarnation 8103 is stale");
  ExpectStillServing();
}

TEST_F(BadInputTest, PeerCallsOnANonCoordinatorNameTheCoordinator) {
  const std::string want = absl::StrCat(
      "this daemon is not the job's coordinator; the coordinator is at ",
      cluster_->tcp_address(0), " (check --coordinator)");
  {
    v1::HeartbeatRequest request;
    request.mutable_node()->set_job_id(kJob);
    request.mutable_node()->set_node_index(1);
    v1::HeartbeatResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[1]->Heartbeat(context.get(), request, &response),
                     grpc::StatusCode::FAILED_PRECONDITION, want);
  }
  {
    v1::RegisterNodeRequest request;
    request.mutable_config()->set_job_id(kJob);
    request.mutable_node()->set_node_index(1);
    request.mutable_node()->set_daemon_incarnation(99);
    v1::RegisterNodeResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[1]->RegisterNode(context.get(), request, &response),
                     grpc::StatusCode::FAILED_PRECONDITION, want);
  }
  {
    v1::KvGetRequest request;
    request.set_key("k");
    v1::KvGetResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[1]->KvGet(context.get(), request, &response),
                     grpc::StatusCode::FAILED_PRECONDITION, want);
  }
  {
    v1::SubscribeRequest request;
    auto context = NodeCtx(1);
    auto reader = peer_[1]->Subscribe(context.get(), request);
    v1::JobEventBatch event;
    EXPECT_FALSE(reader->Read(&event));
    EXPECT_RPC_ERROR(reader->Finish(), grpc::StatusCode::FAILED_PRECONDITION,
                     want);
  }
  {
    // Admin KvGet on a non-coordinator points at the coordinator too.
    v1::AdminKvGetRequest request;
    request.set_key("k");
    v1::AdminKvGetResponse response;
    auto context = AdminCtx();
    EXPECT_RPC_ERROR(admin_[1]->KvGet(context.get(), request, &response),
                     grpc::StatusCode::FAILED_PRECONDITION,
                     absl::StrCat("the key-value broker lives on the "
                                  "coordinator at ",
                                  cluster_->tcp_address(0)));
  }
  ExpectStillServing();
}

TEST_F(BadInputTest, RegisterNodeWithAMismatchedConfigNamesTheFlags) {
  auto register_node = [&](const v1::RegisterNodeRequest& request) {
    v1::RegisterNodeResponse response;
    auto context = NodeCtx(request.node().node_index());
    return peer_[0]->RegisterNode(context.get(), request, &response);
  };
  v1::RegisterNodeRequest request;
  v1::JobConfig* config = request.mutable_config();
  config->set_job_id(kJob);
  config->set_world_size(6);
  config->set_nnodes(2);
  config->set_nproc_per_node(3);
  config->mutable_topology()->set_tensor(1);
  config->mutable_topology()->set_pipeline(1);
  config->mutable_topology()->set_expert(1);
  config->mutable_topology()->set_data(6);
  request.mutable_node()->set_node_index(1);
  request.mutable_node()->set_daemon_incarnation(0xfeed);
  request.mutable_node()->set_hostname("impostor");
  EXPECT_RPC_ERROR(register_node(request),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "node 1's daemon disagrees with the coordinator about the "
                   "job: --world_size=6 (coordinator: 4), --nproc_per_node=3 "
                   "(coordinator: 2); start every daemon of a job with the "
                   "same settings");

  config->set_world_size(4);
  config->set_nproc_per_node(2);
  config->mutable_topology()->set_tensor(2);
  config->mutable_topology()->set_data(2);
  EXPECT_RPC_ERROR(register_node(request),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "--tensor_parallel=2 (coordinator: 1)");

  v1::RegisterNodeRequest wrong_job = request;
  wrong_job.mutable_config()->set_job_id("other");
  EXPECT_RPC_ERROR(
      register_node(wrong_job), grpc::StatusCode::NOT_FOUND,
      "unknown job 'other'; this coordinator serves job 'badinput' "
      "(check --job_id)");

  v1::RegisterNodeRequest out_of_range = request;
  out_of_range.mutable_node()->set_node_index(5);
  EXPECT_RPC_ERROR(register_node(out_of_range),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "node index 5 is outside [0, 2) (--nnodes=2)");

  v1::RegisterNodeRequest no_incarnation = request;
  no_incarnation.mutable_node()->set_daemon_incarnation(0);
  EXPECT_RPC_ERROR(register_node(no_incarnation),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "daemon_incarnation must be non-zero");

  // Calls from a node that is not the registered daemon are fenced.
  {
    v1::HeartbeatRequest heartbeat;
    heartbeat.mutable_node()->set_job_id(kJob);
    heartbeat.mutable_node()->set_node_index(1);
    heartbeat.mutable_node()->set_daemon_incarnation(0xfeed);
    v1::HeartbeatResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[0]->Heartbeat(context.get(), heartbeat, &response),
                     grpc::StatusCode::FAILED_PRECONDITION,
                     "node 1: daemon incarnation feed is stale");
  }
  {
    v1::JoinRankRequest join;
    join.mutable_node()->set_job_id(kJob);
    join.mutable_node()->set_node_index(1);
    join.mutable_node()->set_daemon_incarnation(0xfeed);
    join.set_rank(2);
    join.set_incarnation(5);
    v1::JoinRankResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[0]->JoinRank(context.get(), join, &response),
                     grpc::StatusCode::FAILED_PRECONDITION,
                     "node 1: daemon incarnation feed is stale");
  }

  // Node 1's real daemon is still the registered one.
  ExpectStillServing();
  v1::ListMembersRequest list;
  v1::MemberList members;
  auto context = AdminCtx();
  ASSERT_RPC_OK(admin_[0]->ListMembers(context.get(), list, &members));
  ASSERT_EQ(members.nodes_size(), 2);
  EXPECT_EQ(members.nodes(1).state(), v1::NODE_STATE_REGISTERED);
  EXPECT_NE(members.nodes(1).hostname(), "impostor");
  MustJoin(1, 1, 0x9001, 900);
}

// What a caller can make a daemon hold is bounded (common/limits.h): long
// device fields and reasons are refused, not stored and echoed to every
// rank, and an empty all_gather_words contribution cannot open, time out
// and so "complete" a round far ahead of the honest ones.
TEST_F(BadInputTest, OversizedFieldsAndEmptyContributionsAreRefused) {
  v1::JoinRequest join = JoinReq(0, 0xd001, 300);
  join.mutable_device()->set_uuid(std::string(16384, 'u'));
  EXPECT_RPC_ERROR(Join(0, join), grpc::StatusCode::INVALID_ARGUMENT,
                   "device.uuid has 16384 bytes; the limit is 256");
  v1::MemberRef member = MustJoin(1, 0, 0xd002, 301);

  // Node 1's credential, with a guessed daemon incarnation (Admin shows
  // none): what a request carries is checked before whom it claims to be.
  v1::NodeRef node;
  node.set_job_id(kJob);
  node.set_node_index(1);
  node.set_daemon_incarnation(0xfeed);
  {
    v1::ReleaseRankRequest release;
    *release.mutable_node() = node;
    release.set_rank(2);
    release.set_incarnation(0xd002);
    release.set_reason(std::string(16384, 'r'));
    v1::ReleaseRankResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[0]->ReleaseRank(context.get(), release, &response),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "reason has 16384 bytes; the limit is 1024");
  }
  {
    v1::LeaveNodeRequest leave;
    *leave.mutable_node() = node;
    leave.set_reason(std::string(16384, 'r'));
    v1::LeaveNodeResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[0]->LeaveNode(context.get(), leave, &response),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "reason has 16384 bytes; the limit is 1024");
  }
  {
    v1::ContributeWordsRequest contribute;
    *contribute.mutable_node() = node;
    contribute.set_round(10);
    contribute.set_timeout_ms(1);
    v1::AllGatherWordsResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(
        peer_[0]->ContributeWords(context.get(), contribute, &response),
        grpc::StatusCode::INVALID_ARGUMENT,
        "a contribution to all_gather_words round 10 carries no frame");
    contribute.add_frames()->set_rank(2);
    contribute.set_timeout_ms(kMaxTimeoutMs + 1);
    auto again = NodeCtx(1);
    EXPECT_RPC_ERROR(
        peer_[0]->ContributeWords(again.get(), contribute, &response),
        grpc::StatusCode::INVALID_ARGUMENT,
        "timeout_ms=3600001 exceeds the limit of 3600000 ms");
  }
  {
    v1::KvGetRequest get;
    *get.mutable_member() = member;
    get.set_key("k");
    get.set_timeout_ms(kMaxTimeoutMs + 1);
    v1::KvGetResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[0]->KvGet(context.get(), get, &response),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "timeout_ms=3600001 exceeds the limit of 3600000 ms");
  }
  {
    // A registration whose host name could not be a DNS name, before any
    // check of who registers (so the live node 1 is not disturbed).
    v1::RegisterNodeRequest reg;
    reg.mutable_config()->set_job_id(kJob);
    v1::NodeInfo* info = reg.mutable_node();
    info->set_node_index(1);
    info->set_daemon_incarnation(0xfeed);
    info->set_hostname(std::string(16384, 'h'));
    v1::RegisterNodeResponse response;
    auto context = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[0]->RegisterNode(context.get(), reg, &response),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "node.hostname has 16384 bytes; the limit is 253");
    info->set_hostname("node-1");
    info->set_boot_id(std::string(100, 'b'));
    auto again = NodeCtx(1);
    EXPECT_RPC_ERROR(peer_[0]->RegisterNode(again.get(), reg, &response),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "node.boot_id has 100 bytes; the limit is 64");
  }
  {
    // A job id is echoed only when it could be one.
    v1::JoinRequest wrong_job = JoinReq(1, 0xd003, 302);
    wrong_job.set_job_id(std::string(200000, 'j'));
    grpc::Status s = Join(0, wrong_job);
    EXPECT_RPC_ERROR(s, grpc::StatusCode::NOT_FOUND,
                     "unknown job (a 200000-byte id that is not a job id); "
                     "this daemon serves job 'badinput'");
    EXPECT_LT(s.error_message().size(), 200u);
  }
  // The job is untouched: rank 0 is still joined, nothing failed.
  ExpectStillServing();
  v1::ListMembersRequest list;
  v1::MemberList members;
  auto context = AdminCtx();
  ASSERT_RPC_OK(admin_[0]->ListMembers(context.get(), list, &members));
  EXPECT_EQ(members.members(2).state(), v1::MEMBER_STATE_JOINED);
}

// What one caller can hold open is bounded (docs/operations.md, "Limits"):
// blocking gets per rank, Watch streams per rank, WatchEvents streams per
// daemon. One more is RESOURCE_EXHAUSTED, and the job is unaffected.
TEST_F(BadInputTest, PerCallerLimitsBoundWaitingGetsAndStreams) {
  v1::MemberRef member = MustJoin(0, 0, 0xe001, 400);

  std::vector<std::thread> gets;
  std::atomic<int> released_ok{0};
  for (uint32_t i = 0; i < kMaxWaitingGetsPerRank; ++i) {
    gets.emplace_back([&] {
      if (KvGet(0, member, "later", 30000).ok()) ++released_ok;
    });
  }
  for (int i = 0; i < 200 && KvWaiters() < kMaxWaitingGetsPerRank; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(KvWaiters(), kMaxWaitingGetsPerRank);
  EXPECT_RPC_ERROR(KvGet(0, member, "later", 30000),
                   grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "rank 0 has 64 key-value gets waiting already; the limit "
                   "is 64");
  // A get that does not wait is still served, and a set releases them all.
  EXPECT_RPC_ERROR(KvGet(0, member, "absent", 0), grpc::StatusCode::NOT_FOUND,
                   "key 'absent' is not set");
  ASSERT_RPC_OK(KvSet(0, member, "later", "v"));
  for (std::thread& t : gets) t.join();
  EXPECT_EQ(released_ok.load(), static_cast<int>(kMaxWaitingGetsPerRank));
  EXPECT_EQ(KvWaiters(), 0u);

  // Watch streams of one rank: they stay open (closing the last one would
  // end the rank's lease) until the test ends.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> watches;
  v1::WatchRequest watch;
  *watch.mutable_member() = member;
  for (uint32_t i = 0; i < kMaxStreamsPerCaller; ++i) {
    contexts.push_back(RankCtx(0, member.rank(), 60000));
    watches.push_back(rank_[0]->Watch(contexts.back().get(), watch));
    v1::JobEvent event;
    ASSERT_TRUE(watches.back()->Read(&event)) << "stream " << i;
  }
  EXPECT_RPC_ERROR(WatchStatus(0, member), grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "rank 0 has 8 Watch streams open already; the limit is 8");

  // Operators' event streams, per daemon.
  v1::WatchEventsRequest events;
  for (uint32_t i = 0; i < kMaxOperatorStreams; ++i) {
    contexts.push_back(AdminCtx(60000));
    watches.push_back(admin_[1]->WatchEvents(contexts.back().get(), events));
    v1::JobEvent event;
    ASSERT_TRUE(watches.back()->Read(&event)) << "stream " << i;
  }
  {
    auto context = AdminCtx(3000);
    auto reader = admin_[1]->WatchEvents(context.get(), events);
    v1::JobEvent event;
    while (reader->Read(&event)) {
    }
    EXPECT_RPC_ERROR(reader->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED,
                     "this daemon serves 64 WatchEvents streams already (the "
                     "limit, --max_operator_streams)");
  }
  ExpectStillServing();
  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : watches) (void)reader->Finish();
}

// The same daemons with every caller limit set by its flag: each limit is
// the configured one, named in the refusal, and the job is unaffected.
class ConfiguredLimitsTest : public BadInputTest {
 protected:
  std::vector<std::string> ExtraFlags() const override {
    return {"--kv_max_keys=5", "--kv_max_keys_per_rank=3",
            "--kv_max_bytes=1000000",
            // Its quota per rank is the drills' (rank_isolation_drill_test);
            // here as large as the job's, so the job's total is reached.
            "--kv_max_bytes_per_rank=1000000", "--max_waiting_gets_per_rank=2",
            "--max_streams_per_caller=1", "--max_operator_streams=1"};
  }
};

TEST_F(ConfiguredLimitsTest, EachLimitIsTheFlagsValue) {
  v1::MemberRef rank0 = MustJoin(0, 0, 0xf001, 410);
  v1::MemberRef rank2 = MustJoin(1, 0, 0xf002, 411);

  // Keys per rank, then keys per job; deletes give the room back.
  for (int i = 0; i < 3; ++i) {
    ASSERT_RPC_OK(KvSet(0, rank0, absl::StrCat("a", i), "v"));
  }
  EXPECT_RPC_ERROR(KvSet(0, rank0, "a3", "v"),
                   grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "rank 0 created 3 keys that still exist; the limit is 3 per "
                   "rank (--kv_max_keys_per_rank)");
  EXPECT_RPC_ERROR(KvAdd(0, rank0, "counter", 1),
                   grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "--kv_max_keys_per_rank");
  ASSERT_RPC_OK(KvSet(1, rank2, "b0", "v"));
  ASSERT_RPC_OK(KvAdd(1, rank2, "b1", 1));
  EXPECT_RPC_ERROR(KvSet(1, rank2, "b2", "v"),
                   grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "key-value broker holds 5 keys already (--kv_max_keys)");
  ASSERT_RPC_OK(KvSet(0, rank0, "a0", "rewritten"));  // existing: allowed
  // Only its creator deletes rank 0's key.
  EXPECT_RPC_ERROR(KvDelete(1, rank2, "a1"),
                   grpc::StatusCode::PERMISSION_DENIED,
                   "rank 2 cannot delete key 'a1': rank 0 created it");
  bool existed = false;
  ASSERT_RPC_OK(KvDelete(0, rank0, "a1", &existed));
  EXPECT_TRUE(existed);
  ASSERT_RPC_OK(KvSet(0, rank0, "a3", "v"));
  std::string value;
  ASSERT_RPC_OK(KvGet(1, rank2, "a0", 0, &value));
  EXPECT_EQ(value, "rewritten");
  // Bytes per job: a value that fits the 1 MiB value limit but not the
  // job's 1,000,000 bytes is refused, and the old value stays.
  EXPECT_RPC_ERROR(KvSet(0, rank0, "a0", std::string(999990, 'x')),
                   grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "would hold more than 1000000 bytes of keys and values "
                   "(--kv_max_bytes");
  ASSERT_RPC_OK(KvGet(1, rank2, "a0", 0, &value));
  EXPECT_EQ(value, "rewritten");

  // Blocking gets per rank.
  std::vector<std::thread> gets;
  std::atomic<int> released_ok{0};
  for (int i = 0; i < 2; ++i) {
    gets.emplace_back([&] {
      if (KvGet(0, rank0, "later", 30000).ok()) ++released_ok;
    });
  }
  for (int i = 0; i < 200 && KvWaiters() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(KvWaiters(), 2u);
  EXPECT_RPC_ERROR(KvGet(0, rank0, "later", 30000),
                   grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "rank 0 has 2 key-value gets waiting already; the limit is "
                   "2 (--max_waiting_gets_per_rank)");
  ASSERT_RPC_OK(KvDelete(1, rank2, "b0"));  // the job holds 5 keys
  ASSERT_RPC_OK(KvSet(1, rank2, "later", "v"));
  for (std::thread& t : gets) t.join();
  EXPECT_EQ(released_ok.load(), 2);

  // Streams per caller and per daemon for operators.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> streams;
  v1::WatchRequest watch;
  *watch.mutable_member() = rank0;
  contexts.push_back(RankCtx(0, rank0.rank(), 60000));
  streams.push_back(rank_[0]->Watch(contexts.back().get(), watch));
  v1::JobEvent event;
  ASSERT_TRUE(streams.back()->Read(&event));
  EXPECT_RPC_ERROR(WatchStatus(0, rank0), grpc::StatusCode::RESOURCE_EXHAUSTED,
                   "rank 0 has 1 Watch streams open already; the limit is 1 "
                   "(--max_streams_per_caller)");
  v1::WatchEventsRequest events;
  contexts.push_back(AdminCtx(60000));
  streams.push_back(admin_[0]->WatchEvents(contexts.back().get(), events));
  ASSERT_TRUE(streams.back()->Read(&event));
  {
    auto context = AdminCtx(3000);
    auto reader = admin_[0]->WatchEvents(context.get(), events);
    while (reader->Read(&event)) {
    }
    EXPECT_RPC_ERROR(reader->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED,
                     "this daemon serves 1 WatchEvents streams already");
  }
  ExpectStillServing();
  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : streams) (void)reader->Finish();
}

TEST_F(BadInputTest, JoinAfterTheJobIsFullIsRejected) {
  MustJoin(0, 0, 0xa000, 1000);
  MustJoin(0, 1, 0xa001, 1001);
  MustJoin(1, 0, 0xa002, 1002);
  MustJoin(1, 1, 0xa003, 1003);
  ExpectStillServing(v1::JOB_STATE_READY);
  EXPECT_RPC_ERROR(
      Join(0, JoinReq(1, 0xb001, 2001)), grpc::StatusCode::ALREADY_EXISTS,
      "local rank 1 on node 0 is already held by pid 1001 (rank 1)");
  v1::JoinRequest explicit_rank = JoinReq(0, 0xb002, 2002);
  explicit_rank.set_rank(3);
  EXPECT_RPC_ERROR(
      Join(1, explicit_rank), grpc::StatusCode::ALREADY_EXISTS,
      "local rank 0 on node 1 is already held by pid 1002 (rank 2)");
  ExpectStillServing(v1::JOB_STATE_READY);
  v1::GetJobRequest request;
  v1::JobStatus job;
  auto context = AdminCtx();
  ASSERT_RPC_OK(admin_[0]->GetJob(context.get(), request, &job));
  EXPECT_EQ(job.joined_ranks(), 4u);
}

TEST_F(BadInputTest, JoinAfterTheJobCompletedIsRejected) {
  std::vector<v1::MemberRef> members = {
      MustJoin(0, 0, 0xc000, 1100), MustJoin(0, 1, 0xc001, 1101),
      MustJoin(1, 0, 0xc002, 1102), MustJoin(1, 1, 0xc003, 1103)};
  for (uint32_t r = 0; r < kWorld; ++r) {
    v1::LeaveRequest request;
    *request.mutable_member() = members[r];
    v1::LeaveResponse response;
    auto context = RankCtx(r / 2, members[r].rank());
    ASSERT_RPC_OK(rank_[r / 2]->Leave(context.get(), request, &response));
  }
  ExpectStillServing(v1::JOB_STATE_COMPLETED);
  EXPECT_RPC_ERROR(Join(0, JoinReq(0, 0xd000, 1200)),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "rank 0 already ran in this job incarnation; a restarted "
                   "process cannot rejoin: recreate the whole group");
  ExpectStillServing(v1::JOB_STATE_COMPLETED);
}

TEST_F(BadInputTest, GarbageBytesGetAnErrorAndTheDaemonKeepsServing) {
  grpc::GenericStub stub(channels_[0]);
  auto call = [&](const std::string& method, const std::string& bytes,
                  const std::string& token = "") {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    return status;
  };
  const std::vector<std::string> garbage = {
      std::string("\x0a\xff\xff\xff\xff\x0f", 6),  // length past the end
      std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11),
      std::string("\x0f", 1),  // wire type 7
      std::string("\x12\x05"
                  "ab",
                  4),  // truncated submessage
  };
  // gRPC 1.51's callback server answers a request it cannot decode with
  // UNIMPLEMENTED and no message, before any rankd code runs (see
  // grpcpp/impl/codegen/server_callback_handlers.h); what matters here is
  // that the daemon answers at all and stays up.
  for (const std::string& bytes : garbage) {
    for (const char* method :
         {"/rankd.v1.Rank/Join", "/rankd.v1.Peer/RegisterNode",
          "/rankd.v1.Rank/AllGatherWords", "/rankd.v1.Admin/KvGet"}) {
      SCOPED_TRACE(method);
      grpc::Status status = call(method, bytes);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
          << status.error_message();
    }
  }
  // A server-streaming method (Watch, the rank's lease) with garbage.
  {
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    auto stream = stub.PrepareCall(&context, "/rankd.v1.Rank/Watch", &cq);
    void* tag = nullptr;
    bool ok = false;
    stream->StartCall(reinterpret_cast<void*>(1));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    grpc::Slice slice(garbage[0]);
    grpc::ByteBuffer request(&slice, 1);
    stream->WriteLast(request, grpc::WriteOptions(),
                      reinterpret_cast<void*>(2));
    ASSERT_TRUE(cq.Next(&tag, &ok));
    grpc::Status status;
    stream->Finish(&status, reinterpret_cast<void*>(3));
    while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(3)) {
    }
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << status.error_message();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  EXPECT_EQ(call("/rankd.v1.Rank/NoSuchMethod", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  ExpectStillServing();
  // A well-formed Join through the same generic path works.
  std::string bytes;
  ASSERT_TRUE(JoinReq(0, 0xe000, 1300).SerializeToString(&bytes));
  ASSERT_RPC_OK(call("/rankd.v1.Rank/Join", bytes, cluster_->rank_token(0, 0)));
}

}  // namespace
}  // namespace rankd::testing
