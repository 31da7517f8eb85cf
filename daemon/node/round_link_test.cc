// Tests of the round link: RoundLinkServer and RoundLink over real TCP
// sockets on loopback, with the coordinator stood in for by handlers, and
// raw sockets playing a misbehaving node.
#include "daemon/node/round_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/credentials.h"
#include "common/limits.h"
#include "common/monotonic_clock.h"
#include "daemon/coordinator/word_rounds.h"
#include "daemon/node/pending_rounds.h"
#include "daemon/transport/round_link_protocol.h"
#include "daemon/transport/round_link_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "node-1.secret-of-node-one";

v1::NodeRef Node(uint32_t index) {
  v1::NodeRef node;
  node.set_job_id("job");
  node.set_node_index(index);
  node.set_daemon_incarnation(7);
  return node;
}

// A coordinator stand-in: node 1 must prove kToken; every contribution is
// answered with its own frames' words (or, with `hold`, kept unanswered).
struct FakeCoordinator {
  bool hold = false;
  bool prove_wrongly = false;
  absl::Mutex mu;
  std::vector<WordRounds::SharedDone> held ABSL_GUARDED_BY(mu);
  std::atomic<int> contributions{0};
  // Key-value calls: a store of its own; a get of a missing key with a
  // timeout waits until released (its cancellation, or a set of the key).
  std::map<std::string, std::string> store ABSL_GUARDED_BY(mu);
  std::map<std::string, RoundLinkServer::KvDone> waiting ABSL_GUARDED_BY(mu);
  std::atomic<int> kv_calls{0};
  std::atomic<int> released{0};  // waits released by their cancellation

  static v1::KvLinkReply Refused(absl::Status s) {
    v1::KvLinkReply reply;
    reply.set_code(static_cast<int>(s.code()));
    reply.set_message(std::string(s.message()));
    return reply;
  }

  void Kv(std::optional<uint32_t> node, const v1::KvLinkRequest& request,
          const CancellationRef& cancellation, RoundLinkServer::KvDone done) {
    ++kv_calls;
    v1::KvLinkReply reply;
    absl::MutexLock lock(&mu);
    switch (request.call_case()) {
      case v1::KvLinkRequest::kKvSet: {
        if (node.has_value() && request.kv_set().member().rank() != *node) {
          reply = Refused(absl::PermissionDeniedError("not node 1's rank"));
          break;
        }
        store[request.kv_set().key()] = request.kv_set().value();
        reply.mutable_kv_set()->set_stored(true);
        auto w = waiting.find(request.kv_set().key());
        if (w != waiting.end()) {
          v1::KvLinkReply got;
          got.mutable_kv_get()->set_value(request.kv_set().value());
          w->second(got);
          waiting.erase(w);
        }
        break;
      }
      case v1::KvLinkRequest::kKvAdd:
        reply.mutable_kv_add()->set_value(request.kv_add().delta() + 1);
        break;
      case v1::KvLinkRequest::kKvGet: {
        const std::string& key = request.kv_get().key();
        auto it = store.find(key);
        if (it != store.end()) {
          reply.mutable_kv_get()->set_value(it->second);
        } else if (request.kv_get().timeout_ms() == 0) {
          reply = Refused(absl::NotFoundError("no key " + key));
        } else {
          waiting[key] = std::move(done);
          cancellation->OnCancel([this, key] {
            RoundLinkServer::KvDone released_done;
            {
              absl::MutexLock lock(&mu);
              auto w = waiting.find(key);
              if (w == waiting.end()) return;
              released_done = std::move(w->second);
              waiting.erase(w);
            }
            ++released;
            released_done(Refused(absl::CancelledError("wait released")));
          });
          return;
        }
        break;
      }
      default:
        reply = Refused(absl::UnimplementedError("not in this fake"));
    }
    done(reply);
  }

  RoundLinkServer::Handlers Handlers() {
    RoundLinkServer::Handlers h;
    h.admit = [this](const v1::RoundLinkHello& hello,
                     absl::string_view node_transcript,
                     absl::string_view coordinator_transcript)
        -> absl::StatusOr<RoundLinkServer::Admission> {
      if (hello.node().node_index() != 1 ||
          !SecretsEqual(hello.proof(), TokenProof(kToken, node_transcript))) {
        return absl::UnauthenticatedError("not node 1's token");
      }
      return RoundLinkServer::Admission{
          1u,
          TokenProof(prove_wrongly ? "other" : kToken, coordinator_transcript)};
    };
    h.authorize = [](std::optional<uint32_t> node,
                     const v1::ContributeWordsRequest& request) {
      if (node.has_value() && request.node().node_index() != *node) {
        return absl::PermissionDeniedError("node 1 cannot act as another");
      }
      return absl::OkStatus();
    };
    h.contribute = [this](const v1::ContributeWordsRequest& request,
                          WordRounds::SharedDone done) {
      ++contributions;
      if (hold) {
        absl::MutexLock lock(&mu);
        held.push_back(std::move(done));
        return;
      }
      v1::AllGatherWordsResponse result;
      result.set_round(request.round());
      result.set_words_per_rank(1);
      for (const auto& frame : request.frames()) {
        for (uint32_t w : frame.words()) result.add_words(w);
      }
      done(std::make_shared<WordRounds::Outcome>(request.round(), result));
    };
    h.kv = [this](std::optional<uint32_t> node,
                  const v1::KvLinkRequest& request,
                  const CancellationRef& cancellation,
                  RoundLinkServer::KvDone done) {
      Kv(node, request, cancellation, std::move(done));
    };
    return h;
  }
};

RoundLink::Options LinkOptions(int port, std::string token = kToken) {
  RoundLink::Options o;
  o.host = "127.0.0.1";
  o.port = static_cast<uint16_t>(port);
  o.coordinator_address = "127.0.0.1:1";
  o.node = Node(1);
  o.node_token = std::move(token);
  return o;
}

v1::ContributeWordsRequest Contribution(uint64_t round, uint32_t node,
                                        uint32_t word) {
  v1::ContributeWordsRequest r;
  *r.mutable_node() = Node(node);
  r.set_round(round);
  auto* frame = r.add_frames();
  frame->set_rank(node);
  frame->add_words(word);
  return r;
}

// Collects one reply.
struct Answer {
  absl::Notification done;
  absl::StatusOr<v1::AllGatherWordsResponse> result =
      absl::UnknownError("unset");
  PendingRounds::RoundReply reply() {
    return [this](absl::StatusOr<v1::AllGatherWordsResponse> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

std::unique_ptr<RoundLinkServer> StartServer(FakeCoordinator& coordinator) {
  auto server = RoundLinkServer::Start("127.0.0.1", 0, coordinator.Handlers());
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(RoundLinkTest, ANodeSendsRoundsAndGetsEachOutcomeByTag) {
  FakeCoordinator coordinator;
  auto server = StartServer(coordinator);
  ASSERT_NE(server, nullptr);
  RoundLink link(LinkOptions(server->port()));
  ASSERT_TRUE(link.WaitOpen(absl::Seconds(10)).ok());
  EXPECT_EQ(server->open_links(), 1u);
  std::vector<std::unique_ptr<Answer>> answers;
  for (uint64_t round = 1; round <= 50; ++round) {
    answers.push_back(std::make_unique<Answer>());
    auto reply = answers.back()->reply();
    ASSERT_TRUE(link.Send(Contribution(round, 1, 1000 + round), reply,
                          absl::InfiniteFuture()));
    EXPECT_FALSE(reply) << "Send takes the reply";
  }
  for (uint64_t round = 1; round <= 50; ++round) {
    Answer& a = *answers[round - 1];
    ASSERT_TRUE(a.Wait());
    ASSERT_TRUE(a.result.ok()) << a.result.status();
    EXPECT_EQ(a.result->round(), round);
    EXPECT_THAT(a.result->words(), ::testing::ElementsAre(1000 + round));
  }
}

TEST(RoundLinkTest, OutcomesCarryTheirWordsAsFourBytesEach) {
  // Large words: 4 bytes each is less than their varints.
  v1::AllGatherWordsResponse words;
  words.set_round(7);
  words.set_words_per_rank(2);
  for (uint32_t w : {0xa0000000u, 0x90000000u, 0x80000000u, 0xffffffffu}) {
    words.add_words(w);
  }
  WordRounds::Outcome outcome(7, words);
  v1::RoundOutcome sent;
  ASSERT_TRUE(sent.ParseFromString(outcome.LinkEncoded() +
                                   WordRounds::Outcome::TagSuffix(3)));
  EXPECT_EQ(sent.tag(), 3u);
  EXPECT_EQ(sent.words_le().size(), 16u);
  EXPECT_EQ(sent.result().words_size(), 0);
  EXPECT_LT(outcome.LinkEncoded().size(), outcome.Encoded().size());
  absl::StatusOr<v1::AllGatherWordsResponse> got = TakeOutcomeWords(sent);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->round(), 7u);
  EXPECT_EQ(got->words_per_rank(), 2u);
  EXPECT_THAT(got->words(), ::testing::ElementsAre(0xa0000000u, 0x90000000u,
                                                   0x80000000u, 0xffffffffu));

  // Words that are not whole 4-byte words, or words sent both ways.
  v1::RoundOutcome torn;
  torn.set_round(8);
  torn.set_words_le("abcde");
  EXPECT_EQ(TakeOutcomeWords(torn).status().code(),
            absl::StatusCode::kInternal);
  v1::RoundOutcome both;
  both.set_words_le("abcd");
  both.mutable_result()->add_words(1);
  EXPECT_EQ(TakeOutcomeWords(both).status().code(),
            absl::StatusCode::kInternal);
  // Small words stay varints, and a failed round's encoding is the same on
  // both paths.
  v1::AllGatherWordsResponse small;
  small.set_round(8);
  for (uint32_t w : {1u, 2u, 300u, 0x0fffffffu}) small.add_words(w);
  WordRounds::Outcome small_outcome(8, small);
  EXPECT_EQ(small_outcome.LinkEncoded(), small_outcome.Encoded());
  WordRounds::Outcome failed(9, absl::DeadlineExceededError("late"));
  EXPECT_EQ(failed.LinkEncoded(), failed.Encoded());
}

TEST(RoundLinkTest, AWrongTokenIsRefusedWithTheCoordinatorsReason) {
  FakeCoordinator coordinator;
  auto server = StartServer(coordinator);
  ASSERT_NE(server, nullptr);
  RoundLink link(LinkOptions(server->port(), "node-1.forged"));
  absl::Status open = link.WaitOpen(absl::Seconds(10));
  EXPECT_EQ(open.code(), absl::StatusCode::kUnauthenticated) << open;
  EXPECT_THAT(open.message(), HasSubstr("refused: not node 1's token"));
  PendingRounds::RoundReply reply =
      [](absl::StatusOr<v1::AllGatherWordsResponse>) {};
  EXPECT_FALSE(link.Send(Contribution(1, 1, 1), reply, absl::InfiniteFuture()));
  EXPECT_TRUE(reply) << "a refused Send leaves the reply to the caller";
  EXPECT_EQ(server->open_links(), 0u);
}

TEST(RoundLinkTest, ACoordinatorThatCannotProveTheNodeKeyIsNotTrusted) {
  FakeCoordinator coordinator;
  coordinator.prove_wrongly = true;
  auto server = StartServer(coordinator);
  ASSERT_NE(server, nullptr);
  RoundLink link(LinkOptions(server->port()));
  absl::Status open = link.WaitOpen(absl::Seconds(10));
  EXPECT_EQ(open.code(), absl::StatusCode::kPermissionDenied) << open;
  EXPECT_THAT(open.message(), HasSubstr("could not prove"));
}

TEST(RoundLinkTest, AContributionForAnotherNodeEndsTheLinkSayingWhy) {
  FakeCoordinator coordinator;
  auto server = StartServer(coordinator);
  ASSERT_NE(server, nullptr);
  RoundLink link(LinkOptions(server->port()));
  ASSERT_TRUE(link.WaitOpen(absl::Seconds(10)).ok());
  Answer a;
  auto reply = a.reply();
  ASSERT_TRUE(link.Send(Contribution(1, 2, 5), reply, absl::InfiniteFuture()));
  ASSERT_TRUE(a.Wait());
  EXPECT_EQ(a.result.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(a.result.status().message(),
              HasSubstr("closed by the coordinator: node 1 cannot act as"));
  EXPECT_EQ(coordinator.contributions.load(), 0);
  // The link stays ended; the caller falls back to another path.
  PendingRounds::RoundReply next =
      [](absl::StatusOr<v1::AllGatherWordsResponse>) {};
  EXPECT_FALSE(link.Send(Contribution(2, 1, 5), next, absl::InfiniteFuture()));
}

// One node's round 1 waiting at a coordinator that holds it.
class WaitingRoundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coordinator_.hold = true;
    server_ = StartServer(coordinator_);
    ASSERT_NE(server_, nullptr);
    link_ = std::make_unique<RoundLink>(LinkOptions(server_->port()));
    ASSERT_TRUE(link_->WaitOpen(absl::Seconds(10)).ok());
    auto reply = answer_.reply();
    ASSERT_TRUE(
        link_->Send(Contribution(1, 1, 5), reply, absl::InfiniteFuture()));
    while (coordinator_.contributions.load() == 0) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  // Finishes the held round; its outcome must be dropped quietly.
  void FinishLate() {
    absl::MutexLock lock(&coordinator_.mu);
    for (auto& done : coordinator_.held) {
      done(std::make_shared<WordRounds::Outcome>(
          1, absl::UnavailableError("late")));
    }
  }

  FakeCoordinator coordinator_;
  std::unique_ptr<RoundLinkServer> server_;
  std::unique_ptr<RoundLink> link_;
  Answer answer_;
};

TEST_F(WaitingRoundTest, StoppingTheNodeFailsItAsShutdown) {
  link_->Stop();
  ASSERT_TRUE(answer_.Wait());
  EXPECT_EQ(answer_.result.status().code(), absl::StatusCode::kCancelled);
  link_.reset();
  FinishLate();  // after the node has gone
}

TEST_F(WaitingRoundTest, TheCoordinatorStoppingFailsItNamingTheCoordinator) {
  server_->Stop();
  ASSERT_TRUE(answer_.Wait());
  EXPECT_EQ(answer_.result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(answer_.result.status().message(),
              HasSubstr("round link to coordinator at 127.0.0.1:1 ended"));
  server_.reset();
  FinishLate();  // after the server stopped
}

TEST(RoundLinkTest, OverdueRoundsFailNamingTheRound) {
  FakeCoordinator coordinator;
  coordinator.hold = true;
  auto server = StartServer(coordinator);
  ASSERT_NE(server, nullptr);
  RoundLink link(LinkOptions(server->port()));
  ASSERT_TRUE(link.WaitOpen(absl::Seconds(10)).ok());
  Answer a;
  auto reply = a.reply();
  ASSERT_TRUE(link.Send(Contribution(9, 1, 5), reply,
                        MonotonicNow() + absl::Milliseconds(1)));
  link.ExpireOverdue(MonotonicNow() + absl::Seconds(1));
  ASSERT_TRUE(a.Wait());
  EXPECT_EQ(a.result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(a.result.status().message(),
              HasSubstr("did not answer all_gather_words round 9"));
}

// A raw TCP client speaking (or not) the protocol.
class RawNode {
 public:
  // Connects to the server on loopback; from `source` (another loopback
  // address, "127.0.0.2": another address group) when given.
  explicit RawNode(int port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &from.sin_addr);
      EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from)),
                0)
          << source;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ =
        ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    timeval t{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
  }
  // The next connection `listener` accepts, played by hand (a raw
  // coordinator); null when none comes within 10 s.
  static std::unique_ptr<RawNode> Accept(int listener) {
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return nullptr;
    auto peer = std::unique_ptr<RawNode>(new RawNode());
    peer->fd_ = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    peer->connected_ = peer->fd_ >= 0;
    timeval t{10, 0};
    ::setsockopt(peer->fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
    return peer;
  }
  ~RawNode() { ::close(fd_); }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  // Ends both directions (a sender blocked in send returns).
  void Shutdown() { ::shutdown(fd_, SHUT_RDWR); }

  void Send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  void SendFrame(const std::string& payload) { Send(RoundLinkFrame(payload)); }
  void SendTyped(RoundLinkFrameType type, const std::string& message) {
    Send(RoundLinkTypedFrame(type, message));
  }
  // The message of the next typed frame, which must be of `type`.
  std::optional<std::string> ReadTyped(RoundLinkFrameType type) {
    std::optional<std::string> payload = ReadFrame();
    if (!payload.has_value() || payload->empty()) return std::nullopt;
    EXPECT_EQ(static_cast<int>((*payload)[0]), static_cast<int>(type));
    return payload->substr(1);
  }
  // One frame's payload, or nullopt when the connection ended first.
  std::optional<std::string> ReadFrame() {
    char header[kRoundLinkHeaderBytes];
    if (!ReadExactly(header, sizeof(header))) return std::nullopt;
    std::string payload(RoundLinkFrameLength(header), '\0');
    if (!ReadExactly(payload.data(), payload.size())) return std::nullopt;
    return payload;
  }
  // True when something (or the end) arrives within `timeout`.
  bool Readable(absl::Duration timeout) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1,
                  static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1;
  }
  // True when the peer closed (after whatever frames were pending).
  bool ClosedByPeer() {
    std::string sink(64 << 10, '\0');
    while (true) {
      ssize_t n = ::recv(fd_, sink.data(), sink.size(), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }
  // Shakes hands as node `node` without authentication.
  v1::RoundLinkWelcome Hello(uint32_t node) {
    std::optional<std::string> greeting = ReadFrame();
    EXPECT_TRUE(greeting.has_value());
    v1::RoundLinkHello hello;
    *hello.mutable_node() = Node(node);
    hello.set_nonce(std::string(kRoundLinkNonceBytes, 'n'));
    SendFrame(hello.SerializeAsString());
    v1::RoundLinkWelcome welcome;
    std::optional<std::string> frame = ReadFrame();
    EXPECT_TRUE(frame.has_value() && welcome.ParseFromString(*frame));
    return welcome;
  }

 private:
  RawNode() = default;
  bool ReadExactly(char* out, size_t size) {
    size_t got = 0;
    while (got < size) {
      ssize_t n = ::recv(fd_, out + got, size - got, 0);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
};

// Without authentication every node is admitted as itself.
RoundLinkServer::Handlers OpenHandlers(FakeCoordinator& coordinator) {
  RoundLinkServer::Handlers h = coordinator.Handlers();
  h.admit =
      [](const v1::RoundLinkHello&, absl::string_view,
         absl::string_view) -> absl::StatusOr<RoundLinkServer::Admission> {
    return RoundLinkServer::Admission{std::nullopt, ""};
  };
  return h;
}

// The coordinator's last outcome on `node`'s link says `code` and `why`,
// then it closes.
void ExpectLastWords(RawNode& node, absl::StatusCode code,
                     const std::string& why) {
  v1::RoundOutcome last;
  auto frame = node.ReadTyped(RoundLinkFrameType::kOutcome);
  ASSERT_TRUE(frame.has_value() && last.ParseFromString(*frame));
  EXPECT_EQ(last.tag(), 0u);
  EXPECT_EQ(last.code(), static_cast<int>(code));
  EXPECT_THAT(last.message(), HasSubstr(why));
  EXPECT_TRUE(node.ClosedByPeer());
}

TEST(RoundLinkTest, GarbageAndOversizedFramesAreRefusedAndServingGoesOn) {
  FakeCoordinator coordinator;
  auto server =
      RoundLinkServer::Start("127.0.0.1", 0, OpenHandlers(coordinator));
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  {
    // A hello that is not one.
    RawNode node(port);
    ASSERT_TRUE(node.ReadFrame().has_value());
    node.SendFrame("not a protobuf \xff\xff\xff");
    v1::RoundLinkWelcome welcome;
    auto frame = node.ReadFrame();
    ASSERT_TRUE(frame.has_value() && welcome.ParseFromString(*frame));
    EXPECT_EQ(welcome.code(),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(welcome.message(), HasSubstr("RoundLinkHello"));
    EXPECT_TRUE(node.ClosedByPeer());
  }
  {
    // A handshake frame over its bound.
    RawNode node(port);
    ASSERT_TRUE(node.ReadFrame().has_value());
    node.Send(RoundLinkFrameHeader(1 << 20));
    EXPECT_TRUE(node.ClosedByPeer());
  }
  {
    // After the handshake: a 1 GiB frame, then garbage.
    RawNode node(port);
    EXPECT_EQ(node.Hello(1).code(), 0);
    node.Send(RoundLinkFrameHeader(1u << 30));
    ExpectLastWords(node, absl::StatusCode::kResourceExhausted,
                    "frame of 1073741824 bytes");
  }
  {
    RawNode node(port);
    EXPECT_EQ(node.Hello(1).code(), 0);
    node.SendTyped(RoundLinkFrameType::kContribution,
                   "\x0a\xff\xff\xff\xff\xff");
    ExpectLastWords(node, absl::StatusCode::kInvalidArgument,
                    "not a ContributeWordsRequest");
  }
  // Typed frames that are not what a node may send.
  v1::KvLinkRequest no_call;
  no_call.set_id(4);
  const struct {
    std::string bytes;  // after the handshake
    absl::StatusCode code;
    std::string why;
  } bad[] = {
      {RoundLinkFrame(""), absl::StatusCode::kInvalidArgument,
       "an empty round link frame"},
      {RoundLinkTypedFrame(RoundLinkFrameType::kOutcome, ""),
       absl::StatusCode::kInvalidArgument,
       "a round link frame of outcome, which the node does not send"},
      {RoundLinkFrameHeader(2) + "\x63x", absl::StatusCode::kInvalidArgument,
       "a round link frame of type 99"},
      // A key-value request over its bound is refused on its header.
      {RoundLinkTypedFrameHeader(RoundLinkFrameType::kKvRequest,
                                 kMaxRoundLinkKvRequestBytes),
       absl::StatusCode::kResourceExhausted,
       "a round link kv request frame of"},
      {RoundLinkTypedFrame(RoundLinkFrameType::kKvRequest,
                           no_call.SerializeAsString()),
       absl::StatusCode::kInvalidArgument,
       "not a KvLinkRequest with an id and a call"},
      {RoundLinkTypedFrame(RoundLinkFrameType::kKvCancel, "\x08"),
       absl::StatusCode::kInvalidArgument, "not a KvLinkCancel"},
  };
  for (const auto& frame : bad) {
    SCOPED_TRACE(frame.why);
    RawNode node(port);
    EXPECT_EQ(node.Hello(1).code(), 0);
    node.Send(frame.bytes);
    ExpectLastWords(node, frame.code, frame.why);
  }
  EXPECT_EQ(coordinator.contributions.load(), 0);
  // And a well-behaved node is still served.
  RawNode node(port);
  EXPECT_EQ(node.Hello(1).code(), 0);
  v1::ContributeWordsRequest request = Contribution(3, 1, 42);
  request.set_tag(77);
  node.SendTyped(RoundLinkFrameType::kContribution,
                 request.SerializeAsString());
  v1::RoundOutcome outcome;
  auto frame = node.ReadTyped(RoundLinkFrameType::kOutcome);
  ASSERT_TRUE(frame.has_value() && outcome.ParseFromString(*frame));
  EXPECT_EQ(outcome.tag(), 77u);
  EXPECT_EQ(outcome.round(), 3u);
  EXPECT_THAT(outcome.result().words(), ::testing::ElementsAre(42u));
}

// Issue 36 item 11: connections that never answer their greeting cannot
// keep a node's link from opening. Each is greeted at once, however many
// wait; past kMaxHandshakes the oldest is closed; the rest expire.
TEST(RoundLinkTest, SilentConnectionsNeitherWaitUngreetedNorKeepANodeOut) {
  // Both ends live in this process: room for both sides' descriptors.
  const size_t needed = 2 * (RoundLinkServer::kMaxHandshakes + 400) + 64;
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < needed) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, needed);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  }
  if (files.rlim_cur < needed) {
    GTEST_SKIP() << "needs " << needed << " file descriptors; the hard "
                 << "limit is " << files.rlim_max;
  }
  FakeCoordinator coordinator;
  auto server = StartServer(coordinator);
  ASSERT_NE(server, nullptr);
  const absl::Time start = MonotonicNow();
  std::vector<std::unique_ptr<RawNode>> silent;
  for (size_t i = 0; i < RoundLinkServer::kMaxHandshakes + 400; ++i) {
    silent.push_back(std::make_unique<RawNode>(server->port()));
    ASSERT_TRUE(silent.back()->connected()) << i;
  }
  // The newest is greeted at once (the server waited for none of the
  // others), and the oldest were closed to make room.
  ASSERT_TRUE(silent.back()->Readable(absl::Seconds(2)));
  std::optional<std::string> greeting = silent.back()->ReadFrame();
  ASSERT_TRUE(greeting.has_value());
  std::string nonce;
  EXPECT_TRUE(ParseRoundLinkGreeting(*greeting, &nonce).ok());
  EXPECT_TRUE(silent.front()->ClosedByPeer());
  EXPECT_LT(MonotonicNow() - start, kRoundLinkHandshakeTimeout);
  // A node behind them all opens its link within its open timeout, well
  // before any silent one expired.
  RoundLink link(LinkOptions(server->port()));
  EXPECT_TRUE(link.WaitOpen(absl::Seconds(4)).ok());
  EXPECT_LT(MonotonicNow() - start, kRoundLinkHandshakeTimeout);
  Answer answer;
  auto reply = answer.reply();
  ASSERT_TRUE(link.Send(Contribution(1, 1, 5), reply,
                        MonotonicNow() + absl::Seconds(5)));
  ASSERT_TRUE(answer.Wait());
  EXPECT_TRUE(answer.result.ok()) << answer.result.status();
  // The silent ones still open are dropped once their deadline passes.
  EXPECT_TRUE(silent.back()->ClosedByPeer());
  EXPECT_GE(MonotonicNow() - start,
            kRoundLinkHandshakeTimeout - absl::Seconds(1));
  EXPECT_EQ(server->open_links(), 1u);
}

// A server on loopback with handshake limits `max` in all and
// `per_address` of one address group.
std::unique_ptr<RoundLinkServer> StartWithLimits(FakeCoordinator& coordinator,
                                                 size_t max,
                                                 size_t per_address = 8) {
  RoundLinkServer::Limits limits;
  limits.max_handshakes = max;
  limits.max_handshakes_per_address = per_address;
  auto server =
      RoundLinkServer::Start("127.0.0.1", 0, coordinator.Handlers(), limits);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// Handshakes are bounded per address group: one more from an address at
// its bound closes that address's oldest, never another address's.
TEST(RoundLinkTest, OneAddressHoldsAtMostItsShareOfHandshakes) {
  FakeCoordinator coordinator;
  auto server = StartWithLimits(coordinator, 64, 3);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  std::vector<std::unique_ptr<RawNode>> flood;
  for (int i = 0; i < 4; ++i) {
    flood.push_back(std::make_unique<RawNode>(port, "127.0.0.2"));
    ASSERT_TRUE(flood.back()->connected());
    ASSERT_TRUE(flood.back()->ReadFrame().has_value()) << i;  // greeted
  }
  RawNode other(port, "127.0.0.3");
  ASSERT_TRUE(other.ReadFrame().has_value());
  // The fourth from 127.0.0.2 closed that address's first.
  EXPECT_TRUE(flood[0]->ClosedByPeer());
  for (int i = 1; i < 4; ++i) {
    EXPECT_FALSE(flood[i]->Readable(absl::Milliseconds(50))) << i;
  }
  EXPECT_FALSE(other.Readable(absl::Milliseconds(50)));
  // A node from a third address opens its link.
  RoundLink link(LinkOptions(port));
  EXPECT_TRUE(link.WaitOpen(absl::Seconds(4)).ok());
  EXPECT_FALSE(other.Readable(absl::Milliseconds(50)));
}

// At the bound on all handshakes, the address group holding the most
// makes room, so many connections from a few addresses cannot push out a
// node's handshake or another address's.
TEST(RoundLinkTest, AtTheHandshakeBoundTheBusiestAddressMakesRoom) {
  FakeCoordinator coordinator;
  auto server = StartWithLimits(coordinator, 4, 8);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  RawNode lone(port, "127.0.0.3");
  ASSERT_TRUE(lone.ReadFrame().has_value());
  std::vector<std::unique_ptr<RawNode>> busy;
  for (int i = 0; i < 3; ++i) {
    busy.push_back(std::make_unique<RawNode>(port, "127.0.0.2"));
    ASSERT_TRUE(busy.back()->ReadFrame().has_value()) << i;
  }
  // Full: a node's connection (127.0.0.1) closes 127.0.0.2's oldest, not
  // the older handshake of 127.0.0.3.
  RoundLink link(LinkOptions(port));
  EXPECT_TRUE(link.WaitOpen(absl::Seconds(4)).ok());
  EXPECT_TRUE(busy[0]->ClosedByPeer());
  EXPECT_FALSE(lone.Readable(absl::Milliseconds(50)));
  EXPECT_FALSE(busy[1]->Readable(absl::Milliseconds(50)));
  EXPECT_EQ(server->open_links(), 1u);
}

// A node that sends without pause (cheap cancel frames, faster than they
// are handled) gets at most kMaxReadBytesPerWake read per turn: another
// node's round is answered meanwhile. (Read until EAGAIN, the flood kept
// the server's thread to itself.)
TEST(RoundLinkTest, ANodeSendingWithoutPauseCannotKeepTheThreadToItself) {
  FakeCoordinator coordinator;
  auto server =
      RoundLinkServer::Start("127.0.0.1", 0, OpenHandlers(coordinator));
  ASSERT_TRUE(server.ok()) << server.status();
  RawNode node((*server)->port());
  ASSERT_EQ(node.Hello(1).code(), 0);
  RawNode flooder((*server)->port());
  ASSERT_EQ(flooder.Hello(2).code(), 0);
  v1::KvLinkCancel cancel;
  cancel.set_id(12345);  // never in flight: nothing to cancel
  const std::string one = RoundLinkTypedFrame(RoundLinkFrameType::kKvCancel,
                                              cancel.SerializeAsString());
  std::string batch;
  while (batch.size() < (1 << 20)) batch += one;
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    while (!stop) {
      if (::send(flooder.fd(), batch.data(), batch.size(), MSG_NOSIGNAL) < 0) {
        return;
      }
    }
  });
  absl::SleepFor(absl::Milliseconds(300));  // the flood under way
  v1::ContributeWordsRequest request = Contribution(1, 1, 5);
  request.set_tag(9);
  node.SendTyped(RoundLinkFrameType::kContribution,
                 request.SerializeAsString());
  // The outcome comes within 3 s (the flood goes on for as long).
  const bool answered = node.Readable(absl::Seconds(3));
  stop = true;
  flooder.Shutdown();
  flood.join();
  ASSERT_TRUE(answered) << "no outcome within 3 s of a flood";
  v1::RoundOutcome outcome;
  auto frame = node.ReadTyped(RoundLinkFrameType::kOutcome);
  ASSERT_TRUE(frame.has_value() && outcome.ParseFromString(*frame));
  EXPECT_EQ(outcome.tag(), 9u);
  EXPECT_EQ(outcome.code(), 0);
}

// Many address groups holding one handshake each (the bound filled from
// many addresses): the oldest handshake makes room, not the group whose
// address sorts first, so a node's new handshake is never the one closed.
TEST(RoundLinkTest, AtTheBoundAmongEqualGroupsTheOldestMakesRoom) {
  FakeCoordinator coordinator;
  auto server = StartWithLimits(coordinator, 3);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  // One handshake each, older ones from addresses that sort later (so that
  // "first by address" and "oldest" differ).
  RawNode oldest(port, "127.0.0.9");
  ASSERT_TRUE(oldest.ReadFrame().has_value());
  RawNode second(port, "127.0.0.8");
  ASSERT_TRUE(second.ReadFrame().has_value());
  RawNode third(port, "127.0.0.7");
  ASSERT_TRUE(third.ReadFrame().has_value());
  // The node's connection (127.0.0.1) closes the oldest and opens.
  RoundLink link(LinkOptions(port));
  EXPECT_TRUE(link.WaitOpen(absl::Seconds(4)).ok());
  ASSERT_TRUE(oldest.Readable(absl::Seconds(2)));
  EXPECT_TRUE(oldest.ClosedByPeer());
  EXPECT_FALSE(third.Readable(absl::Milliseconds(50)));
  // A fourth address fills the bound again, and a fifth closes the oldest
  // left (127.0.0.8).
  RawNode fourth(port, "127.0.0.6");
  ASSERT_TRUE(fourth.ReadFrame().has_value());
  RawNode fifth(port, "127.0.0.5");
  ASSERT_TRUE(fifth.ReadFrame().has_value());
  ASSERT_TRUE(second.Readable(absl::Seconds(2)));
  EXPECT_TRUE(second.ClosedByPeer());
  EXPECT_FALSE(third.Readable(absl::Milliseconds(50)));
  EXPECT_FALSE(fourth.Readable(absl::Milliseconds(50)));
  EXPECT_EQ(server->open_links(), 1u);
}

TEST(RoundLinkTest, LimitsOutOfRangeAreRefused) {
  FakeCoordinator coordinator;
  RoundLinkServer::Limits limits;
  limits.max_handshakes = RoundLinkServer::kMaxHandshakes + 1;
  auto server =
      RoundLinkServer::Start("127.0.0.1", 0, coordinator.Handlers(), limits);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  limits.max_handshakes = 4;
  limits.max_handshakes_per_address = 0;
  server =
      RoundLinkServer::Start("127.0.0.1", 0, coordinator.Handlers(), limits);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RoundLinkTest, ANodeThatStopsReadingIsCutOffAtTheQueueBound) {
  FakeCoordinator coordinator;
  coordinator.hold = true;
  auto server =
      RoundLinkServer::Start("127.0.0.1", 0, OpenHandlers(coordinator));
  ASSERT_TRUE(server.ok());
  ::testing::internal::CaptureStderr();  // the coordinator's log
  RawNode node((*server)->port());
  EXPECT_EQ(node.Hello(1).code(), 0);
  node.SendTyped(RoundLinkFrameType::kContribution,
                 Contribution(1, 1, 1).SerializeAsString());
  while (coordinator.contributions.load() == 0) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  WordRounds::SharedDone done;
  {
    absl::MutexLock lock(&coordinator.mu);
    done = coordinator.held.front();
  }
  // A big outcome, delivered far more often than the node reads.
  v1::AllGatherWordsResponse big;
  big.set_round(1);
  big.set_words_per_rank(1);
  for (int i = 0; i < 16384; ++i) big.add_words(0xffffffffu);
  auto outcome = std::make_shared<WordRounds::Outcome>(1, big);
  for (size_t i = 0; i < RoundLinkServer::kMaxQueuedOutcomes + 2048; ++i) {
    done(outcome);
  }
  // The node, reading at last, finds the link closed after what was sent.
  EXPECT_TRUE(node.ClosedByPeer());
  const absl::Time give_up = MonotonicNow() + absl::Seconds(10);
  while ((*server)->open_links() != 0 && MonotonicNow() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ((*server)->open_links(), 0u);
  (*server)->Stop();  // its thread, which logs the close, has ended
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("round link of a node closed: RESOURCE_EXHAUSTED: "
                        "its node stopped reading; 4096 outcomes queued"));
}

// ---------------------------------------------------------- key-value calls

v1::KvLinkRequest KvSet(const std::string& key, const std::string& value,
                        uint32_t rank = 1) {
  v1::KvLinkRequest r;
  r.mutable_kv_set()->mutable_member()->set_rank(rank);
  r.mutable_kv_set()->set_key(key);
  r.mutable_kv_set()->set_value(value);
  return r;
}

v1::KvLinkRequest KvGet(const std::string& key, uint32_t timeout_ms) {
  v1::KvLinkRequest r;
  r.mutable_kv_get()->mutable_member()->set_rank(1);
  r.mutable_kv_get()->set_key(key);
  r.mutable_kv_get()->set_timeout_ms(timeout_ms);
  return r;
}

// Collects one key-value reply.
struct KvAnswer {
  absl::Notification done;
  absl::StatusOr<v1::KvLinkReply> result = absl::UnknownError("unset");
  PendingKvCalls::KvReply reply() {
    return [this](absl::StatusOr<v1::KvLinkReply> r) {
      result = std::move(r);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(10)); }
};

// Sends `request` on `link` and waits for its answer.
absl::StatusOr<v1::KvLinkReply> Call(RoundLink& link,
                                     v1::KvLinkRequest request) {
  KvAnswer a;
  auto reply = a.reply();
  if (!link.SendKv(std::move(request), reply, absl::InfiniteFuture(),
                   nullptr)) {
    return absl::FailedPreconditionError("the link refused the call");
  }
  if (!a.Wait()) return absl::DeadlineExceededError("no answer in 10 s");
  return a.result;
}

// A node's link open to a coordinator stand-in.
class RoundLinkKvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer(coordinator_);
    ASSERT_NE(server_, nullptr);
    link_ = std::make_unique<RoundLink>(LinkOptions(server_->port()));
    ASSERT_TRUE(link_->WaitOpen(absl::Seconds(10)).ok());
  }

  // Sends a get of a key nobody sets, answered into `waiting`, and returns
  // once it waits at the coordinator.
  void SendAGetThatWaits(KvAnswer& waiting) {
    auto reply = waiting.reply();
    ASSERT_TRUE(link_->SendKv(KvGet("never", 60000), reply,
                              absl::InfiniteFuture(), nullptr));
    while (coordinator_.kv_calls.load() == 0) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

  FakeCoordinator coordinator_;
  std::unique_ptr<RoundLinkServer> server_;
  std::unique_ptr<RoundLink> link_;
};

TEST_F(RoundLinkKvTest, CallsAreAnsweredByIdWithTheCoordinatorsCodeAndText) {
  auto set = Call(*link_, KvSet("k", "v"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->code(), 0);
  EXPECT_TRUE(set->kv_set().stored());
  auto got = Call(*link_, KvGet("k", 0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kv_get().value(), "v");
  v1::KvLinkRequest add;
  add.mutable_kv_add()->mutable_member()->set_rank(1);
  add.mutable_kv_add()->set_delta(41);
  auto added = Call(*link_, add);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->kv_add().value(), 42);
  // The coordinator's refusals come back as they are, the link stays.
  auto refused = Call(*link_, KvSet("k", "v", /*rank=*/3));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(refused->message(), "not node 1's rank");
  auto missing = Call(*link_, KvGet("nothing", 0));
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->code(), static_cast<int>(absl::StatusCode::kNotFound));
  // Many at once, each matched to its own reply.
  std::vector<std::unique_ptr<KvAnswer>> answers;
  for (int i = 0; i < 100; ++i) {
    answers.push_back(std::make_unique<KvAnswer>());
    auto reply = answers.back()->reply();
    v1::KvLinkRequest r;
    r.mutable_kv_add()->mutable_member()->set_rank(1);
    r.mutable_kv_add()->set_delta(i);
    ASSERT_TRUE(link_->SendKv(r, reply, absl::InfiniteFuture(), nullptr));
    EXPECT_FALSE(reply) << "SendKv takes the reply";
  }
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(answers[i]->Wait());
    ASSERT_TRUE(answers[i]->result.ok());
    EXPECT_EQ(answers[i]->result->kv_add().value(), i + 1);
  }
  EXPECT_EQ(link_->waiting_kv_calls(), 0u);
  EXPECT_EQ(server_->open_links(), 1u);
}

// The coordinator closes a link that sends a request over its bound, and
// with it every local rank's calls: one rank's oversized call (a 3 MiB
// expected value reaches the node over gRPC) is refused alone, and the
// link carries on.
TEST_F(RoundLinkKvTest, AnOversizedCallIsRefusedAloneAndTheLinkStays) {
  v1::KvLinkRequest big = KvSet("k", "v");
  big.mutable_kv_set()->set_expected(std::string(3 << 20, 'x'));
  KvAnswer a;
  auto reply = a.reply();
  ASSERT_TRUE(link_->SendKv(big, reply, absl::InfiniteFuture(), nullptr));
  EXPECT_FALSE(reply) << "SendKv takes the reply";
  ASSERT_TRUE(a.Wait());
  EXPECT_EQ(a.result.status().code(), absl::StatusCode::kInvalidArgument)
      << a.result.status();
  EXPECT_TRUE(absl::StrContains(a.result.status().message(),
                                "larger than the round link carries"))
      << a.result.status();
  auto set = Call(*link_, KvSet("k", "v"));
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->code(), 0);
  EXPECT_EQ(server_->open_links(), 1u);
}

TEST_F(RoundLinkKvTest, AWaitingGetDoesNotHoldUpTheLinkAndItsCancelReleasesIt) {
  // Two gets wait in the coordinator; a set answers one of them, and the
  // link's other traffic goes on meanwhile.
  KvAnswer first, second;
  auto cancellation = std::make_shared<CallCancellation>();
  auto reply1 = first.reply();
  auto reply2 = second.reply();
  ASSERT_TRUE(link_->SendKv(KvGet("later", 60000), reply1,
                            absl::InfiniteFuture(), nullptr));
  ASSERT_TRUE(link_->SendKv(KvGet("never", 60000), reply2,
                            absl::InfiniteFuture(), cancellation));
  auto set = Call(*link_, KvSet("later", "z"));
  ASSERT_TRUE(set.ok() && set->code() == 0);
  ASSERT_TRUE(first.Wait());
  ASSERT_TRUE(first.result.ok());
  EXPECT_EQ(first.result->kv_get().value(), "z");
  EXPECT_FALSE(second.done.HasBeenNotified());
  // The rank cancels: the coordinator's wait is released, and its answer
  // ends the call.
  cancellation->Cancel();
  ASSERT_TRUE(second.Wait());
  ASSERT_TRUE(second.result.ok()) << second.result.status();
  EXPECT_EQ(second.result->code(),
            static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(coordinator_.released.load(), 1);
  EXPECT_EQ(link_->waiting_kv_calls(), 0u);
  // A cancellation after the answer sends nothing the coordinator minds.
  auto late = std::make_shared<CallCancellation>();
  KvAnswer third;
  auto reply3 = third.reply();
  ASSERT_TRUE(
      link_->SendKv(KvGet("later", 0), reply3, absl::InfiniteFuture(), late));
  ASSERT_TRUE(third.Wait());
  late->Cancel();
  EXPECT_TRUE(Call(*link_, KvGet("later", 0)).ok());
  EXPECT_EQ(server_->open_links(), 1u);
}

TEST_F(RoundLinkKvTest, TheLinksEndFailsWaitingCallsAndReleasesTheirWaits) {
  KvAnswer waiting;
  ASSERT_NO_FATAL_FAILURE(SendAGetThatWaits(waiting));
  server_->Stop();
  ASSERT_TRUE(waiting.Wait());
  EXPECT_EQ(waiting.result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(waiting.result.status().message(),
              HasSubstr("round link to coordinator at 127.0.0.1:1 ended: "));
  EXPECT_THAT(waiting.result.status().message(),
              HasSubstr("(before the coordinator answered this key-value "
                        "call, which may have been applied)"));
  // The coordinator dropped the link's waiter.
  EXPECT_EQ(coordinator_.released.load(), 1);
  {
    absl::MutexLock lock(&coordinator_.mu);
    EXPECT_TRUE(coordinator_.waiting.empty());
  }
  // Once ended, the link refuses calls, which the caller sends another way.
  PendingKvCalls::KvReply next = [](absl::StatusOr<v1::KvLinkReply>) {};
  EXPECT_FALSE(
      link_->SendKv(KvSet("k", "v"), next, absl::InfiniteFuture(), nullptr));
  EXPECT_TRUE(next) << "a refused SendKv leaves the reply to the caller";
}

// A coordinator declared lost may keep its connection open (a hung
// process on a live host): End fails what waits on the link with the
// loss's words, without the coordinator's help, and Stop still joins.
TEST_F(RoundLinkKvTest, EndingTheLinkFailsWaitingCallsWithTheGivenCause) {
  KvAnswer waiting;
  ASSERT_NO_FATAL_FAILURE(SendAGetThatWaits(waiting));
  link_->End(absl::UnavailableError("the coordinator was lost: silent"));
  ASSERT_TRUE(waiting.Wait());
  EXPECT_EQ(waiting.result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(waiting.result.status().message(),
              HasSubstr("the coordinator was lost: silent (before the "
                        "coordinator answered this key-value call"));
  PendingKvCalls::KvReply next = [](absl::StatusOr<v1::KvLinkReply>) {};
  EXPECT_FALSE(
      link_->SendKv(KvSet("k", "v"), next, absl::InfiniteFuture(), nullptr));
  link_->Stop();
}

TEST_F(RoundLinkKvTest, OverdueCallsFailAndStoppingCancelsTheRest) {
  KvAnswer overdue, stopped;
  auto reply1 = overdue.reply();
  auto reply2 = stopped.reply();
  ASSERT_TRUE(link_->SendKv(KvGet("a", 60000), reply1,
                            MonotonicNow() + absl::Milliseconds(1), nullptr));
  ASSERT_TRUE(link_->SendKv(KvGet("b", 60000), reply2, absl::InfiniteFuture(),
                            nullptr));
  link_->ExpireOverdue(MonotonicNow() + absl::Seconds(1));
  ASSERT_TRUE(overdue.Wait());
  EXPECT_EQ(overdue.result.status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(overdue.result.status().message(),
              HasSubstr("did not answer a key-value call within its timeout"));
  // The coordinator is told: its wait is released (it would otherwise count
  // against the link until its own deadline), the other's is not.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (coordinator_.released.load() < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(coordinator_.released.load(), 1);
  link_->Stop();
  ASSERT_TRUE(stopped.Wait());
  EXPECT_EQ(stopped.result.status().code(), absl::StatusCode::kCancelled);
}

TEST(RoundLinkKvBoundTest, CallsInFlightAreBoundedOnTheNode) {
  FakeCoordinator coordinator;
  auto server = StartServer(coordinator);
  ASSERT_NE(server, nullptr);
  RoundLink::Options options = LinkOptions(server->port());
  options.max_kv_calls = 2;
  RoundLink link(std::move(options));
  ASSERT_TRUE(link.WaitOpen(absl::Seconds(10)).ok());
  KvAnswer a, b;
  auto ra = a.reply();
  auto rb = b.reply();
  ASSERT_TRUE(
      link.SendKv(KvGet("x", 60000), ra, absl::InfiniteFuture(), nullptr));
  ASSERT_TRUE(
      link.SendKv(KvGet("y", 60000), rb, absl::InfiniteFuture(), nullptr));
  auto third = Call(link, KvSet("x", "1"));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.status().message(),
              HasSubstr("2 key-value calls of this node are already waiting "
                        "for the coordinator (the limit, "
                        "kMaxKvCallsPerRoundLink)"));
  EXPECT_EQ(link.waiting_kv_calls(), 2u);
  link.Stop();
}

TEST(RoundLinkKvBoundTest, ANodeOverTheBoundOrReusingAnIdIsCutOff) {
  FakeCoordinator coordinator;
  auto server =
      RoundLinkServer::Start("127.0.0.1", 0, OpenHandlers(coordinator));
  ASSERT_TRUE(server.ok());
  {
    RawNode node((*server)->port());
    EXPECT_EQ(node.Hello(1).code(), 0);
    v1::KvLinkRequest get = KvGet("never", 60000);
    get.set_id(5);
    node.SendTyped(RoundLinkFrameType::kKvRequest, get.SerializeAsString());
    node.SendTyped(RoundLinkFrameType::kKvRequest, get.SerializeAsString());
    ExpectLastWords(node, absl::StatusCode::kInvalidArgument,
                    "a kv request with id 5, which a call in flight has");
  }
  {
    RawNode node((*server)->port());
    EXPECT_EQ(node.Hello(1).code(), 0);
    std::string frames;
    for (uint64_t id = 1; id <= kMaxKvCallsPerRoundLink + 1; ++id) {
      v1::KvLinkRequest get = KvGet(absl::StrCat("never", id), 60000);
      get.set_id(id);
      frames += RoundLinkTypedFrame(RoundLinkFrameType::kKvRequest,
                                    get.SerializeAsString());
    }
    node.Send(frames);
    ExpectLastWords(node, absl::StatusCode::kResourceExhausted,
                    "key-value calls in flight on one round link "
                    "(kMaxKvCallsPerRoundLink)");
  }
  // Every wait of the closed links was released (after the links closed).
  const int all = static_cast<int>(kMaxKvCallsPerRoundLink) + 1;
  const absl::Time give_up = MonotonicNow() + absl::Seconds(10);
  while (coordinator.released.load() < all && MonotonicNow() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::MutexLock lock(&coordinator.mu);
  EXPECT_TRUE(coordinator.waiting.empty());
  EXPECT_EQ(coordinator.released.load(), all);
}

TEST(RoundLinkKvBoundTest, ALinkServingNoKeyValueCallsSaysSo) {
  FakeCoordinator coordinator;
  RoundLinkServer::Handlers rounds_only = OpenHandlers(coordinator);
  rounds_only.kv = nullptr;
  auto server = RoundLinkServer::Start("127.0.0.1", 0, rounds_only);
  ASSERT_TRUE(server.ok());
  RawNode node((*server)->port());
  EXPECT_EQ(node.Hello(1).code(), 0);
  v1::KvLinkRequest get = KvGet("k", 0);
  get.set_id(1);
  node.SendTyped(RoundLinkFrameType::kKvRequest, get.SerializeAsString());
  ExpectLastWords(node, absl::StatusCode::kUnimplemented,
                  "serves no key-value calls");
}

TEST(RoundLinkNodeTest, AFrameTheCoordinatorMayNotSendEndsTheLinkSayingWhy) {
  const struct {
    std::string frame;
    std::string why;
  } bad[] = {
      {RoundLinkTypedFrame(RoundLinkFrameType::kKvRequest, ""),
       "a round link frame of kv request, which the coordinator does not "
       "send"},
      {RoundLinkFrame(""), "an empty round link frame"},
      {RoundLinkTypedFrame(RoundLinkFrameType::kKvReply, "\x08"),
       "a kv reply frame that is not a KvLinkReply"},
  };
  for (const auto& frame : bad) {
    SCOPED_TRACE(frame.why);
    // A coordinator played by hand, on a port of its own.
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(a);
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::listen(listener, 1), 0);
    ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &size),
              0);
    absl::Notification ended;
    absl::Status why;
    RoundLink::Options options = LinkOptions(ntohs(a.sin_port), /*token=*/"");
    options.on_end = [&](const absl::Status& s) {
      why = s;
      ended.Notify();
    };
    RoundLink link(std::move(options));
    std::unique_ptr<RawNode> coordinator = RawNode::Accept(listener);
    ::close(listener);
    ASSERT_NE(coordinator, nullptr);
    coordinator->SendFrame(
        RoundLinkGreeting(std::string(kRoundLinkNonceBytes, 'c')));
    ASSERT_TRUE(coordinator->ReadFrame().has_value());  // the hello
    coordinator->SendFrame(v1::RoundLinkWelcome().SerializeAsString());
    ASSERT_TRUE(link.WaitOpen(absl::Seconds(10)).ok());
    KvAnswer waiting;
    auto reply = waiting.reply();
    ASSERT_TRUE(
        link.SendKv(KvGet("k", 1000), reply, absl::InfiniteFuture(), nullptr));
    coordinator->Send(frame.frame);
    ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
    EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable) << why;
    EXPECT_THAT(why.message(), HasSubstr(frame.why));
    ASSERT_TRUE(waiting.Wait());
    EXPECT_EQ(waiting.result.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(waiting.result.status().message(), HasSubstr(frame.why));
  }
}

}  // namespace
}  // namespace rankd
