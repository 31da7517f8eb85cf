// Tests of common/kv_frame.h: frames round-trip, and bad, truncated or
// oversized input gets a precise error.
#include "common/kv_frame.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;

KvFrame ReadOne(KvFrameReader& reader) {
  absl::StatusOr<std::optional<KvFrame>> frame = reader.Next();
  EXPECT_TRUE(frame.ok()) << frame.status();
  EXPECT_TRUE(frame.ok() && frame->has_value());
  return frame.ok() && frame->has_value() ? **frame : KvFrame{};
}

TEST(KvFrameTest, FramesRoundTripWhenFedByteByByte) {
  const std::string value(kMaxKvValueBytes, 'v');
  const std::string stream =
      EncodeKvFrame(KvFrameKind::kSet, 7, value) +
      EncodeKvFrame(KvFrameKind::kCount, ~uint64_t{0}, "") +
      EncodeKvFrame(KvFrameKind::kHello, 0, "ticket");
  KvFrameReader reader;
  std::vector<KvFrame> frames;
  for (char c : stream) {
    reader.Append(&c, 1);
    absl::StatusOr<std::optional<KvFrame>> frame = reader.Next();
    ASSERT_TRUE(frame.ok()) << frame.status();
    if (frame->has_value()) frames.push_back(**frame);
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].kind, KvFrameKind::kSet);
  EXPECT_EQ(frames[0].id, 7u);
  EXPECT_EQ(frames[0].payload, value);
  EXPECT_EQ(frames[1].kind, KvFrameKind::kCount);
  EXPECT_EQ(frames[1].id, ~uint64_t{0});
  EXPECT_EQ(frames[1].payload, "");
  EXPECT_EQ(frames[2].payload, "ticket");
  EXPECT_EQ(reader.pending_bytes(), 0u);
}

TEST(KvFrameTest, TruncatedFrameWaitsAndCountsPendingBytes) {
  const std::string frame = EncodeKvFrame(KvFrameKind::kGet, 3, "abcdef");
  KvFrameReader reader;
  reader.Append(frame.data(), frame.size() - 1);
  absl::StatusOr<std::optional<KvFrame>> next = reader.Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  EXPECT_EQ(reader.pending_bytes(), frame.size() - 1);
  reader.Append(frame.data() + frame.size() - 1, 1);
  EXPECT_EQ(ReadOne(reader).payload, "abcdef");
}

TEST(KvFrameTest, OversizedFrameIsRefusedFromItsHeaderAlone) {
  std::string header =
      EncodeKvFrame(KvFrameKind::kSet, 1, "").substr(0, kKvFrameHeaderBytes);
  const uint32_t too_long = kMaxKvFramePayloadBytes + 1;
  for (int i = 0; i < 4; ++i)
    header[i] = static_cast<char>(too_long >> (8 * i));
  KvFrameReader reader;
  reader.Append(header.data(), header.size());
  absl::StatusOr<std::optional<KvFrame>> next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      next.status().message(),
      absl::StrCat("key-value KvSet frame announces ", too_long,
                   " bytes; at most ", kMaxKvFramePayloadBytes, " allowed"));
}

TEST(KvFrameTest, ALimitedReaderRefusesALongerFrameFromItsHeader) {
  // As the daemon reads a channel before its ticket: a hello of at most
  // kMaxKvTicketBytes.
  KvFrameReader reader;
  reader.LimitPayload(kMaxKvTicketBytes);
  const std::string ticket(kMaxKvTicketBytes, 't');
  const std::string fits = EncodeKvFrame(KvFrameKind::kHello, 0, ticket);
  reader.Append(fits.data(), fits.size());
  absl::StatusOr<std::optional<KvFrame>> next = reader.Next();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->payload, ticket);
  const std::string header = EncodeKvFrame(KvFrameKind::kHello, 0, ticket + "x")
                                 .substr(0, kKvFrameHeaderBytes);
  reader.Append(header.data(), header.size());
  next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(
      next.status().message(),
      absl::StrCat("key-value hello frame announces ", kMaxKvTicketBytes + 1,
                   " bytes; at most ", kMaxKvTicketBytes, " allowed"));
  // No limit above the protocol's own.
  KvFrameReader wide;
  wide.LimitPayload(~size_t{0});
  std::string too_long = header;
  const uint32_t length = kMaxKvFramePayloadBytes + 1;
  for (int i = 0; i < 4; ++i)
    too_long[i] = static_cast<char>(length >> (8 * i));
  wide.Append(too_long.data(), too_long.size());
  EXPECT_FALSE(wide.Next().ok());
}

TEST(KvFrameTest, UnknownKindAndReservedBytesAreRefused) {
  std::string frame = EncodeKvFrame(KvFrameKind::kSet, 1, "x");
  frame[4] = 42;
  KvFrameReader unknown;
  unknown.Append(frame.data(), frame.size());
  EXPECT_EQ(unknown.Next().status().message(),
            "key-value frame of unknown kind 42");
  frame[4] = static_cast<char>(KvFrameKind::kSet);
  frame[6] = 1;
  KvFrameReader reserved;
  reserved.Append(frame.data(), frame.size());
  EXPECT_EQ(reserved.Next().status().message(),
            "key-value frame with nonzero reserved header bytes");
}

TEST(KvFrameTest, RepliesRoundTrip) {
  absl::Status status;
  absl::string_view response;
  const std::string ok = EncodeKvReply(absl::OkStatus(), "resp");
  ASSERT_TRUE(DecodeKvReply(ok, &status, &response).ok());
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(response, "resp");
  const std::string denied = EncodeKvReply(
      absl::PermissionDeniedError("key r1/x belongs to rank 1"), "ignored");
  ASSERT_TRUE(DecodeKvReply(denied, &status, &response).ok());
  EXPECT_EQ(status, absl::PermissionDeniedError("key r1/x belongs to rank 1"));
  EXPECT_EQ(response, "");
}

TEST(KvFrameTest, AnErrorsReasonRoundTrips) {
  absl::Status status;
  absl::string_view response;
  const std::string fenced = EncodeKvReply(
      WithReason(absl::FailedPreconditionError("rank 0 joined into epoch 1"),
                 ErrorReason::kEpochFenced),
      "ignored");
  ASSERT_TRUE(DecodeKvReply(fenced, &status, &response).ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "rank 0 joined into epoch 1");
  EXPECT_EQ(ReasonOf(status), ErrorReason::kEpochFenced);
  EXPECT_EQ(response, "");
  // A reason this build does not know (a newer daemon's): the error alone.
  std::string newer = fenced;
  newer.back() = 57;
  ASSERT_TRUE(DecodeKvReply(newer, &status, &response).ok());
  EXPECT_EQ(status,
            absl::FailedPreconditionError("rank 0 joined into epoch 1"));
  EXPECT_EQ(ReasonOf(status), ErrorReason::kUnspecified);
  // OK replies never carry one.
  ASSERT_TRUE(
      DecodeKvReply(EncodeKvReply(absl::OkStatus(), ""), &status, &response)
          .ok());
  EXPECT_EQ(ReasonOf(status), ErrorReason::kUnspecified);
}

TEST(KvFrameTest, LongMessagesAreCut) {
  absl::Status status;
  absl::string_view response;
  const std::string reply = EncodeKvReply(
      absl::InternalError(std::string(kMaxKvReplyMessageBytes + 10, 'm')), "");
  ASSERT_TRUE(DecodeKvReply(reply, &status, &response).ok());
  EXPECT_EQ(status.message().size(), kMaxKvReplyMessageBytes);
}

TEST(KvFrameTest, BadRepliesGetPreciseErrors) {
  absl::Status status;
  absl::string_view response;
  EXPECT_EQ(DecodeKvReply("abc", &status, &response).message(),
            "key-value reply truncated: 3 bytes, shorter than its 8-byte "
            "status header");
  std::string reply = EncodeKvReply(absl::NotFoundError("gone"), "");
  EXPECT_EQ(DecodeKvReply(reply.substr(0, reply.size() - 1), &status, &response)
                .message(),
            "key-value reply truncated: its message announces 4 bytes, 3 "
            "follow");
  std::string bad_code = reply;
  bad_code[0] = 99;
  EXPECT_EQ(DecodeKvReply(bad_code, &status, &response).message(),
            "key-value reply carries status code 99, which is none");
  std::string long_message = reply;
  long_message[6] = 0x7f;
  EXPECT_THAT(DecodeKvReply(long_message, &status, &response).message(),
              HasSubstr("-byte message; at most"));
  EXPECT_EQ(DecodeKvReply(reply + "xy", &status, &response).message(),
            "key-value reply carries a response with an error status");
}

}  // namespace
}  // namespace rankd
