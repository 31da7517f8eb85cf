// The rules of a bundle that both backends share (bundle.h), on a stand-in
// tensor type that is only a byte range.
#include "dataplane/bundle.h"

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

Bytes At(size_t offset, size_t size) { return Bytes{memory + offset, size}; }

std::string Check(std::vector<Bytes> outputs, size_t values) {
  absl::Status s =
      CheckBundleOutputs<Bytes>("gloo", "receive_bundle_into", outputs, values);
  if (!s.ok()) EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST(CheckBundleSize, AtMostTheLimit) {
  EXPECT_TRUE(CheckBundleSize("nccl", "send_receive", 0).ok());
  EXPECT_TRUE(CheckBundleSize("nccl", "send_receive", kMaxBundleTensors).ok());
  absl::Status s =
      CheckBundleSize("nccl", "send_receive", kMaxBundleTensors + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "nccl backend: send_receive: a bundle holds at most 60000 "
            "tensors; got 60001");
}

TEST(CheckBundleOutputs, DisjointOutputsPass) {
  EXPECT_EQ(Check({}, 0), "");
  EXPECT_EQ(Check({At(8, 8), At(0, 8), At(16, 4)}, 3), "");
  // Empty outputs overlap nothing, even at another output's address.
  EXPECT_EQ(Check({At(0, 8), At(0, 0), At(4, 0)}, 3), "");
}

TEST(CheckBundleOutputs, OneOutputPerValue) {
  EXPECT_EQ(Check({At(0, 8)}, 2),
            "gloo backend: receive_bundle_into: 1 outputs for a bundle of 2 "
            "values");
}

TEST(CheckBundleOutputs, AnyByteInCommonIsAnOverlap) {
  // The same start.
  EXPECT_EQ(Check({At(0, 8), At(0, 8)}, 2),
            "gloo backend: receive_bundle_into: output 1 overlaps output 0 of "
            "the bundle");
  // A later start inside an earlier output, named by index whatever the
  // addresses' order.
  EXPECT_EQ(Check({At(20, 4), At(16, 8), At(0, 8)}, 3),
            "gloo backend: receive_bundle_into: output 1 overlaps output 0 of "
            "the bundle");
  EXPECT_EQ(Check({At(0, 8), At(32, 8), At(7, 2)}, 3),
            "gloo backend: receive_bundle_into: output 2 overlaps output 0 of "
            "the bundle");
  // Adjacent outputs do not overlap.
  EXPECT_EQ(Check({At(0, 8), At(8, 8)}, 2), "");
}

}  // namespace
}  // namespace rankd::dataplane
