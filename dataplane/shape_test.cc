// The shape arithmetic both backends share (shape.h): layouts along an
// axis, results with a new extent, and the refusals, worded the same for
// either backend.
#include "dataplane/shape.h"

#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

ValueDescriptor F32(std::vector<size_t> shape) {
  return *ValueDescriptor::Create(std::move(shape), TensorDtype::kF32);
}

TEST(ShapeTest, LayoutAlongAnAxis) {
  auto l = LayoutAlong(F32({2, 3, 4}), 1, "gloo", "op");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->outer, 2u);
  EXPECT_EQ(l->extent, 3u);
  EXPECT_EQ(l->unit_bytes, 16u);
  auto scalar = LayoutAlong(F32({}), 0, "gloo", "op");
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->outer, 1u);
  EXPECT_EQ(scalar->extent, 1u);
  EXPECT_EQ(scalar->unit_bytes, 4u);
  auto missing = LayoutAlong(F32({2}), 1, "nccl", "all_gather_even");
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(),
            "nccl backend: all_gather_even: axis 1 is out of range for f32[2]");
  EXPECT_FALSE(LayoutAlong(F32({}), 1, "gloo", "op").ok());
}

TEST(ShapeTest, WithExtent) {
  EXPECT_EQ(WithExtent(F32({2, 3}), 1, 9, "gloo", "op")->shape(),
            (std::vector<size_t>{2, 9}));
  EXPECT_EQ(WithExtent(F32({2, 3}), 0, 0, "gloo", "op")->shape(),
            (std::vector<size_t>{0, 3}));
  EXPECT_EQ(WithExtent(F32({}), 0, 4, "gloo", "op")->shape(),
            (std::vector<size_t>{4}));
  // Only the leading axis may be empty, on either backend.
  for (const char* backend : {"gloo", "nccl"}) {
    auto inner = WithExtent(F32({2, 3}), 1, 0, backend, "op");
    ASSERT_EQ(inner.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(inner.status().message(),
                                  "only the leading axis may be empty"))
        << inner.status();
    EXPECT_TRUE(absl::StartsWith(inner.status().message(), backend));
  }
  EXPECT_FALSE(WithExtent(F32({}), 1, 2, "gloo", "op").ok());
}

}  // namespace
}  // namespace rankd::dataplane
