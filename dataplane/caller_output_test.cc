#include "dataplane/caller_output.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

ValueDescriptor F32(std::vector<size_t> shape) {
  return *ValueDescriptor::Create(std::move(shape), TensorDtype::kF32);
}

TEST(CheckCallerOutputTest, TheOutputMustHaveTheResultsDescriptor) {
  absl::Status s = CheckCallerOutput("gloo", "all_gather", F32({4}), F32({8}),
                                     OutputOverlap::kNone, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "gloo backend: all_gather: the output is f32[4] but the result "
            "is f32[8]");
  EXPECT_TRUE(CheckCallerOutput("gloo", "all_gather", F32({8}), F32({8}),
                                OutputOverlap::kNone, false)
                  .ok());
}

TEST(CheckCallerOutputTest, OverlapIsAllowedOnlyInPlaceOnTheSameBytes) {
  EXPECT_TRUE(CheckCallerOutput("nccl", "all_reduce_sum", F32({4}), F32({4}),
                                OutputOverlap::kSameBytes, true)
                  .ok());
  absl::Status s = CheckCallerOutput("nccl", "all_reduce_sum", F32({4}),
                                     F32({4}), OutputOverlap::kPartial, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "nccl backend: all_reduce_sum: the output overlaps the input, and "
            "all_reduce_sum runs in place only on exactly the input's bytes");
  for (OutputOverlap overlap :
       {OutputOverlap::kSameBytes, OutputOverlap::kPartial}) {
    s = CheckCallerOutput("gloo", "all_gather", F32({4}), F32({4}), overlap,
                          false);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "gloo backend: all_gather: the output overlaps the input, and "
              "all_gather cannot run in place");
  }
}

}  // namespace
}  // namespace rankd::dataplane
