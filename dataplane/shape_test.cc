// The shape arithmetic both backends share (shape.h): layouts along an
// axis, results with a new extent, all-to-all count layouts, and the
// refusals, worded the same for either backend.
#include "dataplane/shape.h"

#include <limits>
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
  // A value with no rows keeps none along another axis (docs/contract.md,
  // "Empty values": every operation takes it, a gather along axis 1 too).
  auto no_rows = WithExtent(F32({0, 3}), 1, 6, "gloo", "all_gather_even");
  ASSERT_TRUE(no_rows.ok()) << no_rows.status();
  EXPECT_EQ(no_rows->shape(), (std::vector<size_t>{0, 6}));
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

// Member `me` of 3, rows along axis 0 unless said.
absl::StatusOr<AllToAllLayout> AllToAll(const ValueDescriptor& input,
                                        std::vector<size_t> send,
                                        std::vector<size_t> receive, size_t me,
                                        size_t axis = 0) {
  return LayoutAllToAll(input, axis, send, receive, 3, me, "nccl",
                        "all_to_all_v");
}

TEST(AllToAllLayoutTest, OffsetsAndOutput) {
  auto l = AllToAll(F32({5, 2}), {1, 0, 4}, {1, 3, 0}, 0);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->output.shape(), (std::vector<size_t>{4, 2}));
  EXPECT_EQ(l->send_offsets, (std::vector<size_t>{0, 1, 1, 5}));
  EXPECT_EQ(l->receive_offsets, (std::vector<size_t>{0, 1, 4, 4}));
  EXPECT_EQ(l->input.extent, 5u);
  EXPECT_EQ(l->input.unit_bytes, 8u);
  // Along an inner axis.
  auto inner = AllToAll(F32({2, 3}), {1, 1, 1}, {1, 1, 2}, 1, 1);
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(inner->output.shape(), (std::vector<size_t>{2, 4}));
  EXPECT_EQ(inner->input.outer, 2u);
}

TEST(AllToAllLayoutTest, ZeroRowsBothWays) {
  auto l =
      AllToAll(*ValueDescriptor::Rows(0, F32({2})), {0, 0, 0}, {0, 0, 0}, 1);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->output.rows(), 0u);
}

TEST(AllToAllLayoutTest, Refusals) {
  auto message = [](const absl::StatusOr<AllToAllLayout>& l) {
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(l.status().message());
  };
  EXPECT_EQ(message(AllToAll(F32({2}), {1, 1}, {1, 1, 0}, 0)),
            "nccl backend: all_to_all_v: send counts have 2 entries and "
            "receive counts 3; both need one per member (3)");
  EXPECT_TRUE(absl::StrContains(
      message(AllToAll(F32({}), {1, 0, 0}, {1, 0, 0}, 0)),
      "the input needs an axis to partition; got the scalar f32[]"));
  EXPECT_EQ(message(AllToAll(F32({4}), {1, 1, 1}, {1, 0, 0}, 0)),
            "nccl backend: all_to_all_v: send counts add up to 3 but the "
            "input f32[4] has 4 along axis 0");
  EXPECT_EQ(message(AllToAll(F32({3}), {1, 1, 1}, {1, 2, 1}, 1)),
            "nccl backend: all_to_all_v: the self slot disagrees: "
            "send_counts[1] = 1 but receive_counts[1] = 2");
  // max + 2 wraps to 1, which would otherwise match the input's one row.
  const size_t max = std::numeric_limits<size_t>::max();
  EXPECT_TRUE(absl::StrContains(
      message(AllToAll(F32({1}), {max, 2, 0}, {max, 0, 0}, 0)),
      "the counts overflow when added up"));
  EXPECT_TRUE(
      absl::StrContains(message(AllToAll(F32({3}), {1, 1, 1}, {1, 1, 1}, 0, 1)),
                        "axis 1 is out of range"));
  // Nothing may leave an inner axis empty.
  EXPECT_TRUE(absl::StrContains(
      message(AllToAll(F32({2, 3}), {3, 0, 0}, {0, 0, 0}, 1, 1)),
      "zero extent along axis 1"));
}

TEST(LayoutEvenGatherTest, GathersAlongTheAxisAndRefusesAnOverflow) {
  auto m = *ValueDescriptor::Create({2, 3}, TensorDtype::kF32);
  auto rows = LayoutEvenGather(m, 0, 4, "gloo", "all_gather_even");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->output.shape(), (std::vector<size_t>{8, 3}));
  EXPECT_EQ(rows->input.extent, 2u);
  auto columns = LayoutEvenGather(m, 1, 4, "nccl", "all_gather_even");
  ASSERT_TRUE(columns.ok()) << columns.status();
  EXPECT_EQ(columns->output.shape(), (std::vector<size_t>{2, 12}));
  EXPECT_EQ(columns->input.extent, 3u);
  auto scalar = *ValueDescriptor::Create({}, TensorDtype::kF32);
  EXPECT_EQ(LayoutEvenGather(scalar, 0, 4, "gloo", "g")->output.shape(),
            (std::vector<size_t>{4}));

  auto wide = *ValueDescriptor::Create({size_t{1} << 62}, TensorDtype::kU8);
  auto overflow = LayoutEvenGather(wide, 0, 8, "nccl", "all_gather_even");
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(overflow.status().message(),
            "nccl backend: all_gather_even: the gathered extent along axis 0 "
            "(4611686018427387904 x 8 members) overflows");
  EXPECT_EQ(LayoutEvenGather(m, 2, 4, "gloo", "g").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AllGatherOutputTest, ScalarAndRows) {
  auto scalar = *ValueDescriptor::Create({}, TensorDtype::kI32);
  EXPECT_EQ(AllGatherOutput(scalar, 4).shape(), (std::vector<size_t>{4}));
  auto m = *ValueDescriptor::Create({2, 3}, TensorDtype::kI32);
  EXPECT_EQ(AllGatherOutput(m, 4).shape(), (std::vector<size_t>{8, 3}));
}

}  // namespace
}  // namespace rankd::dataplane
