// Unit tests for value_descriptor.h: every validation rule of ValueDescriptor.
#include "dataplane/value_descriptor.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(ValueDescriptorTest, ScalarHasOneElement) {
  auto d = ValueDescriptor::Create({}, TensorDtype::kF32);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->element_count(), 1u);
  EXPECT_EQ(d->byte_size(), 4u);
  EXPECT_EQ(d->rows(), 1u);
  EXPECT_EQ(d->row_elements(), 1u);
  EXPECT_EQ(d->ToString(), "f32[]");
}

TEST(ValueDescriptorTest, ShapeAccessors) {
  auto d = ValueDescriptor::Create({3, 4, 5}, TensorDtype::kI64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->element_count(), 60u);
  EXPECT_EQ(d->byte_size(), 480u);
  EXPECT_EQ(d->rows(), 3u);
  EXPECT_EQ(d->row_elements(), 20u);
  EXPECT_EQ(d->RowDescriptor().shape(), (std::vector<size_t>{4, 5}));
  EXPECT_EQ(d->ToString(), "i64[3, 4, 5]");
}

TEST(ValueDescriptorTest, RejectsAZeroExtentAfterTheFirst) {
  for (std::vector<size_t> shape :
       {std::vector<size_t>{2, 0, 3}, std::vector<size_t>{0, 0}}) {
    auto d = ValueDescriptor::Create(shape, TensorDtype::kF32);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(d.status().message(),
                                  "dimension 1 of shape [" +
                                      std::to_string(shape[0]) + ", 0") &&
                absl::StrContains(d.status().message(),
                                  "only the leading extent may be 0"))
        << d.status();
  }
}

// docs/contract.md, "Empty values": the one rule every binding follows.
TEST(ValueDescriptorTest, ALeadingExtentOfZeroIsAValueWithNoRows) {
  for (std::vector<size_t> shape :
       {std::vector<size_t>{0}, std::vector<size_t>{0, 4},
        std::vector<size_t>{0, 2, 3}}) {
    auto d = ValueDescriptor::Create(shape, TensorDtype::kF32);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->shape(), shape);
    EXPECT_EQ(d->rows(), 0u);
    EXPECT_EQ(d->element_count(), 0u);
    EXPECT_EQ(d->byte_size(), 0u);
    // The same descriptor as the rows of its row.
    EXPECT_TRUE(*d == *ValueDescriptor::Rows(0, d->RowDescriptor()));
  }
}

TEST(ValueDescriptorTest, RejectsOverflow) {
  const size_t big = std::numeric_limits<size_t>::max() / 2;
  EXPECT_EQ(ValueDescriptor::Create({big, 4}, TensorDtype::kU8).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The element count fits but the byte size does not.
  EXPECT_EQ(ValueDescriptor::Create({big}, TensorDtype::kF64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValueDescriptorTest, RowsAllowsZeroRowsOnly) {
  auto row = ValueDescriptor::Create({4}, TensorDtype::kF32);
  ASSERT_TRUE(row.ok());
  auto empty = ValueDescriptor::Rows(0, *row);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->shape(), (std::vector<size_t>{0, 4}));
  EXPECT_EQ(empty->byte_size(), 0u);
  auto three = ValueDescriptor::Rows(3, *row);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->element_count(), 12u);
  EXPECT_EQ(ValueDescriptor::Rows(std::numeric_limits<size_t>::max(), *row)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValueDescriptorTest, RowOfAScalarOrVectorIsAScalar) {
  auto v = ValueDescriptor::Create({7}, TensorDtype::kU32);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->RowDescriptor().shape().empty());
  EXPECT_EQ(v->RowDescriptor().element_count(), 1u);
}

TEST(ValueDescriptorTest, Equality) {
  auto a = *ValueDescriptor::Create({2, 2}, TensorDtype::kF32);
  auto b = *ValueDescriptor::Create({2, 2}, TensorDtype::kF32);
  auto c = *ValueDescriptor::Create({2, 2}, TensorDtype::kI32);
  auto e = *ValueDescriptor::Create({4}, TensorDtype::kF32);
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(a == e);
}

}  // namespace
}  // namespace rankd::dataplane
