// Tests of the round link's typed frames (round_link_protocol.h): how a
// frame after the handshake is built and split, and how a frame of the
// wrong type, an empty one or one over its type's bound is refused.
#include "daemon/transport/round_link_protocol.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;

TEST(RoundLinkProtocolTest, ATypedFrameIsLengthThenTypeThenMessage) {
  const std::string frame =
      RoundLinkTypedFrame(RoundLinkFrameType::kKvReply, "abc");
  ASSERT_EQ(frame.size(), kRoundLinkTypedHeaderBytes + 3);
  EXPECT_EQ(RoundLinkFrameLength(frame.data()), 4u);
  EXPECT_EQ(frame[kRoundLinkHeaderBytes], '\x05');
  EXPECT_EQ(frame.substr(0, kRoundLinkTypedHeaderBytes),
            RoundLinkTypedFrameHeader(RoundLinkFrameType::kKvReply, 3));
  RoundLinkFrameType type;
  absl::string_view message;  // points into the payload
  const std::string payload = frame.substr(kRoundLinkHeaderBytes);
  ASSERT_TRUE(ParseRoundLinkFrame(payload, "coordinator",
                                  kCoordinatorFrameTypes, &type, &message)
                  .ok());
  EXPECT_EQ(type, RoundLinkFrameType::kKvReply);
  EXPECT_EQ(message, "abc");
  EXPECT_TRUE(CheckRoundLinkFrameStart(frame.data(), "coordinator",
                                       kCoordinatorFrameTypes)
                  .ok());
  // Every node type parses on the coordinator's side, with an empty message.
  for (RoundLinkFrameType t : kNodeFrameTypes) {
    const std::string f =
        RoundLinkTypedFrame(t, "").substr(kRoundLinkHeaderBytes);
    EXPECT_TRUE(
        ParseRoundLinkFrame(f, "node", kNodeFrameTypes, &type, &message).ok());
    EXPECT_EQ(type, t);
    EXPECT_TRUE(message.empty());
  }
}

TEST(RoundLinkProtocolTest, SocketOptionsNoticeADeadPeer) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  SetRoundLinkSocketOptions(fd);
  auto option = [fd](int level, int name) {
    int value = -1;
    socklen_t len = sizeof(value);
    EXPECT_EQ(::getsockopt(fd, level, name, &value, &len), 0) << name;
    return value;
  };
  EXPECT_EQ(option(IPPROTO_TCP, TCP_NODELAY), 1);
  EXPECT_EQ(option(SOL_SOCKET, SO_KEEPALIVE), 1);
  const int idle = option(IPPROTO_TCP, TCP_KEEPIDLE);
  const int interval = option(IPPROTO_TCP, TCP_KEEPINTVL);
  const int probes = option(IPPROTO_TCP, TCP_KEEPCNT);
  // Keepalive gives up on an idle link within the dead-peer time.
  EXPECT_LE(absl::Seconds(idle + interval * probes), kRoundLinkDeadPeerTimeout);
  EXPECT_EQ(absl::Milliseconds(option(IPPROTO_TCP, TCP_USER_TIMEOUT)),
            kRoundLinkDeadPeerTimeout);
  ::close(fd);
}

TEST(RoundLinkProtocolTest, MalformedFramesAreRefusedNamingWhatIsWrong) {
  RoundLinkFrameType type;
  absl::string_view message;
  absl::Status empty =
      ParseRoundLinkFrame("", "node", kNodeFrameTypes, &type, &message);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("an empty round link frame"));
  absl::Status unknown = ParseRoundLinkFrame(
      absl::string_view("\x00x", 2), "node", kNodeFrameTypes, &type, &message);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(),
              HasSubstr("a round link frame of type 0, which the node does "
                        "not send"));
  // A type of the other direction.
  absl::Status wrong_way = ParseRoundLinkFrame(
      "\x03request", "coordinator", kCoordinatorFrameTypes, &type, &message);
  EXPECT_EQ(wrong_way.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_way.message(),
              HasSubstr("a round link frame of kv request, which the "
                        "coordinator does not send"));
  // Over its type's bound: refused on the header and type byte alone.
  const std::string big = RoundLinkTypedFrameHeader(
      RoundLinkFrameType::kKvRequest, kMaxRoundLinkKvRequestBytes);
  absl::Status over =
      CheckRoundLinkFrameStart(big.data(), "node", kNodeFrameTypes);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      over.message(),
      HasSubstr(absl::StrCat(
          "a round link kv request frame of ", kMaxRoundLinkKvRequestBytes + 1,
          " bytes (at most ", kMaxRoundLinkKvRequestBytes, ")")));
  const std::string at_bound = RoundLinkTypedFrameHeader(
      RoundLinkFrameType::kKvRequest, kMaxRoundLinkKvRequestBytes - 1);
  EXPECT_TRUE(
      CheckRoundLinkFrameStart(at_bound.data(), "node", kNodeFrameTypes).ok());
  const std::string cancel(100, '\x04');
  EXPECT_EQ(
      ParseRoundLinkFrame(cancel, "node", kNodeFrameTypes, &type, &message)
          .code(),
      absl::StatusCode::kResourceExhausted);
  const std::string zero = RoundLinkFrameHeader(0);
  EXPECT_EQ(
      CheckRoundLinkFrameStart(zero.data(), "node", kNodeFrameTypes).code(),
      absl::StatusCode::kInvalidArgument);
  // A value of the largest size fits a key-value request.
  EXPECT_GE(kMaxRoundLinkKvRequestBytes, 2 * kMaxKvValueBytes + kMaxKvKeyBytes);
}

TEST(RoundLinkProtocolTest, AKvReplysErrorKeepsCodeMessageAndReason) {
  v1::KvLinkReply reply;
  EXPECT_TRUE(KvLinkReplyStatus(reply).ok());
  SetKvLinkError(
      WithReason(absl::FailedPreconditionError("rank 2 joined into epoch 1"),
                 ErrorReason::kEpochFenced),
      &reply);
  v1::KvLinkReply received;
  ASSERT_TRUE(received.ParseFromString(reply.SerializeAsString()));
  const absl::Status fenced = KvLinkReplyStatus(received);
  EXPECT_EQ(fenced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fenced.message(), "rank 2 joined into epoch 1");
  EXPECT_EQ(ReasonOf(fenced), ErrorReason::kEpochFenced);
  // Without a reason, and with one this build does not know.
  SetKvLinkError(absl::PermissionDeniedError("not node 1's rank"), &reply);
  EXPECT_EQ(ReasonOf(KvLinkReplyStatus(reply)), ErrorReason::kUnspecified);
  reply.set_reason(static_cast<v1::ErrorReason>(57));
  EXPECT_EQ(KvLinkReplyStatus(reply),
            absl::PermissionDeniedError("not node 1's rank"));
}

}  // namespace
}  // namespace rankd
