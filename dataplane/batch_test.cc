// The rules of a batched send/receive that both backends share (batch.h),
// on a stand-in tensor type that is only a byte range.
#include "dataplane/batch.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

struct Bytes {
  char* begin;
  size_t size;
  char* data() const { return begin; }
  size_t byte_size() const { return size; }
};

char memory[64];

PeerValue<Bytes> At(size_t peer, size_t offset, size_t size) {
  return {peer, Bytes{memory + offset, size}};
}

// Member 1 of 3 ("world").
std::string Check(std::vector<PeerValue<Bytes>> sends,
                  std::vector<PeerValue<Bytes>> receives) {
  absl::Status s = CheckBatch<Bytes>(sends, receives, 3, 1, "world", "gloo",
                                     "batch_send_receive");
  if (s.ok()) return "OK";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(BatchTest, AcceptsDisjointTransfersToOtherMembers) {
  EXPECT_EQ(Check({At(0, 0, 8), At(2, 0, 8)}, {At(0, 8, 8), At(2, 16, 8)}),
            "OK");
  // Two sends may read the same bytes; empty tensors overlap nothing.
  EXPECT_EQ(Check({At(0, 0, 8), At(2, 4, 8)}, {At(0, 4, 0), At(2, 4, 0)}),
            "OK");
  EXPECT_EQ(Check({}, {At(0, 0, 4)}), "OK");
}

TEST(BatchTest, RefusesEmptyAndOversizedBatches) {
  EXPECT_EQ(Check({}, {}),
            "gloo backend: batch_send_receive: the batch is empty");
  std::vector<PeerValue<Bytes>> many(kMaxBatchTransfers + 1, At(0, 0, 0));
  EXPECT_EQ(Check(many, {}),
            "gloo backend: batch_send_receive: a batch holds at most 4096 "
            "transfers; got 4097");
}

TEST(BatchTest, RefusesPeersThatAreNotOtherMembers) {
  EXPECT_EQ(Check({At(0, 0, 4), At(3, 0, 4)}, {}),
            "gloo backend: batch_send_receive: send 1 names member 3, which "
            "is outside world (3 members)");
  EXPECT_EQ(Check({}, {At(1, 0, 4)}),
            "gloo backend: batch_send_receive: receive 0 names member 1, "
            "which is this member of world (3 members)");
}

TEST(BatchTest, RefusesOverlappingWrites) {
  // Receive 2 overlaps receive 0's last bytes (listed out of order).
  EXPECT_EQ(Check({}, {At(0, 0, 8), At(2, 16, 8), At(0, 6, 4)}),
            "gloo backend: batch_send_receive: receive 2 overlaps the output "
            "of receive 0");
}

TEST(BatchTest, RefusesASendOfBytesAReceiveWrites) {
  EXPECT_EQ(Check({At(0, 0, 4), At(2, 20, 8)}, {At(0, 8, 4), At(2, 24, 8)}),
            "gloo backend: batch_send_receive: send 1 reads bytes that "
            "receive 1 of the batch writes");
  // Touching is not overlapping.
  EXPECT_EQ(Check({At(0, 0, 8)}, {At(2, 8, 8)}), "OK");
}

}  // namespace
}  // namespace rankd::dataplane
