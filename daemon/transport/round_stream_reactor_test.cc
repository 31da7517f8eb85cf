// Tests of daemon/transport/round_stream_reactor.h over a real gRPC server and
// client on a Unix socket, with a real WordRounds behind it: each contribution
// gets its own outcome by tag (the shared encoding plus the tag parses as one
// RoundOutcome), in the order rounds finish, with exact words; a refused
// message ends the stream with the refusal; a half-closed stream finishes
// once its last round is answered; and an outcome for a stream that is gone
// is dropped safely (under AddressSanitizer in tools/test.sh).
#include "daemon/transport/round_stream_reactor.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "daemon/coordinator/word_rounds.h"
#include "daemon/deadline_timer.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rankd/v1/peer.grpc.pb.h"

namespace rankd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint32_t kWorld = 3;

// Peer.Rounds alone, in front of a WordRounds of kWorld ranks. Node 9 is
// refused, as a node naming another node would be.
class RoundsOnlyService final
    : public v1::Peer::WithRawCallbackMethod_Rounds<v1::Peer::Service> {
 public:
  explicit RoundsOnlyService(WordRounds* rounds) : rounds_(rounds) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Rounds(
      grpc::CallbackServerContext*) override {
    WordRounds* rounds = rounds_;
    return RoundStreamReactor::Start(
        absl::OkStatus(),
        [](const v1::ContributeWordsRequest& request) {
          if (request.node().node_index() == 9) {
            return absl::PermissionDeniedError("node 9 may not do that");
          }
          return absl::OkStatus();
        },
        [rounds](const v1::ContributeWordsRequest& request,
                 WordRounds::SharedDone done) {
          rounds->ContributeShared(
              request.round(),
              std::vector<v1::RankFrame>(request.frames().begin(),
                                         request.frames().end()),
              MonotonicNow() + absl::Milliseconds(request.timeout_ms()),
              std::move(done));
        });
  }

 private:
  WordRounds* const rounds_;
};

class RoundStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat("/tmp/rankd-round-stream-", getpid(), ".sock");
    unlink(path_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + path_,
                             grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Peer::NewStub(grpc::CreateChannel(
        "unix://" + path_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->Shutdown(absl::ToChronoTime(MonotonicNow() + absl::Seconds(5)));
    unlink(path_.c_str());
  }

  static v1::ContributeWordsRequest Contribution(uint64_t tag, uint64_t round,
                                                 std::vector<uint32_t> ranks,
                                                 uint32_t timeout_ms = 20000) {
    v1::ContributeWordsRequest request;
    request.mutable_node()->set_node_index(1);
    request.set_round(round);
    request.set_tag(tag);
    request.set_timeout_ms(timeout_ms);
    for (uint32_t r : ranks) {
      auto* frame = request.add_frames();
      frame->set_rank(r);
      frame->add_words(100 * round + r);
      frame->add_words(r);
    }
    return request;
  }

  DeadlineTimer timer_;
  WordRounds rounds_{kWorld, [](uint32_t r) { return r; }, &timer_};
  RoundsOnlyService service_{&rounds_};
  std::string path_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Peer::Stub> stub_;
};

std::vector<uint32_t> Words(const v1::RoundOutcome& outcome) {
  return {outcome.result().words().begin(), outcome.result().words().end()};
}

TEST_F(RoundStreamTest, EachContributionGetsItsOwnOutcomeByTag) {
  grpc::ClientContext a_context, b_context;
  auto a = stub_->Rounds(&a_context);
  auto b = stub_->Rounds(&b_context);
  ASSERT_TRUE(a->Write(Contribution(11, 1, {0, 1})));
  // Rank 1 again in the same round: refused at once, answered before the
  // round itself, under its own tag.
  ASSERT_TRUE(a->Write(Contribution(12, 1, {1})));
  v1::RoundOutcome outcome;
  ASSERT_TRUE(a->Read(&outcome));
  EXPECT_EQ(outcome.tag(), 12u);
  EXPECT_EQ(outcome.round(), 1u);
  EXPECT_EQ(outcome.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(outcome.message(), HasSubstr("rank 1 contributed twice"));
  // The last rank completes the round: both streams get the same result.
  ASSERT_TRUE(b->Write(Contribution(7, 1, {2})));
  ASSERT_TRUE(a->Read(&outcome));
  EXPECT_EQ(outcome.tag(), 11u);
  EXPECT_EQ(outcome.code(), 0);
  EXPECT_EQ(outcome.result().words_per_rank(), 2u);
  EXPECT_THAT(Words(outcome), ElementsAre(100, 0, 101, 1, 102, 2));
  v1::RoundOutcome other;
  ASSERT_TRUE(b->Read(&other));
  EXPECT_EQ(other.tag(), 7u);
  EXPECT_EQ(other.round(), 1u);
  EXPECT_THAT(Words(other), ElementsAre(100, 0, 101, 1, 102, 2));
  // A tag of many bytes survives the merge too.
  const uint64_t big_tag = (uint64_t{1} << 63) + 5;
  ASSERT_TRUE(a->Write(Contribution(big_tag, 2, {0, 1})));
  ASSERT_TRUE(b->Write(Contribution(1, 2, {2})));
  ASSERT_TRUE(a->Read(&outcome));
  EXPECT_EQ(outcome.tag(), big_tag);
  EXPECT_THAT(Words(outcome), ElementsAre(200, 0, 201, 1, 202, 2));
  ASSERT_TRUE(b->Read(&other));
  a->WritesDone();
  b->WritesDone();
  EXPECT_TRUE(a->Finish().ok());
  EXPECT_TRUE(b->Finish().ok());
}

TEST_F(RoundStreamTest, ARefusedMessageEndsTheStreamWithTheRefusal) {
  grpc::ClientContext context;
  auto stream = stub_->Rounds(&context);
  auto request = Contribution(1, 1, {0});
  request.mutable_node()->set_node_index(9);
  ASSERT_TRUE(stream->Write(request));
  v1::RoundOutcome outcome;
  EXPECT_FALSE(stream->Read(&outcome));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("node 9 may not do that"));
  // Nothing of it reached the rounds.
  EXPECT_TRUE(rounds_.WaitingRanks().empty());
}

TEST_F(RoundStreamTest, AHalfClosedStreamFinishesOnceItsRoundIsAnswered) {
  grpc::ClientContext context;
  auto stream = stub_->Rounds(&context);
  ASSERT_TRUE(stream->Write(Contribution(3, 1, {0}, /*timeout_ms=*/300)));
  stream->WritesDone();
  v1::RoundOutcome outcome;
  ASSERT_TRUE(stream->Read(&outcome));
  EXPECT_EQ(outcome.tag(), 3u);
  EXPECT_EQ(outcome.code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(outcome.message(), HasSubstr("waiting for ranks 1-2"));
  EXPECT_FALSE(stream->Read(&outcome));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(RoundStreamTest, AnOutcomeForAStreamThatIsGoneIsDropped) {
  {
    grpc::ClientContext context;
    auto stream = stub_->Rounds(&context);
    ASSERT_TRUE(stream->Write(Contribution(1, 1, {0, 1})));
    // Wait until the contribution is in the round, then go away.
    const absl::Time deadline = MonotonicNow() + absl::Seconds(20);
    while (rounds_.WaitingRanks().size() < 2) {
      ASSERT_LT(MonotonicNow(), deadline);
      absl::SleepFor(absl::Milliseconds(5));
    }
    context.TryCancel();
    v1::RoundOutcome outcome;
    EXPECT_FALSE(stream->Read(&outcome));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // Completing the round answers a reactor gRPC may have deleted already.
  grpc::ClientContext context;
  auto stream = stub_->Rounds(&context);
  ASSERT_TRUE(stream->Write(Contribution(2, 1, {2})));
  v1::RoundOutcome outcome;
  ASSERT_TRUE(stream->Read(&outcome));
  EXPECT_EQ(outcome.tag(), 2u);
  EXPECT_THAT(Words(outcome), ElementsAre(100, 0, 101, 1, 102, 2));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace rankd
