// Unit tests for dataplane/operation_description.h: the exact canonical
// descriptions both backends fingerprint and quote in mismatch diagnoses.
#include "dataplane/operation_description.h"

#include <vector>

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

ValueDescriptor Desc(std::vector<size_t> shape, TensorDtype dtype) {
  return *ValueDescriptor::Create(std::move(shape), dtype);
}

TEST(OperationDescriptionTest, OnValueAndRooted) {
  EXPECT_EQ(DescribeOnValue("all_reduce_sum", Desc({4}, TensorDtype::kF32)),
            "all_reduce_sum f32[4]");
  EXPECT_EQ(DescribeRooted("broadcast", 1, Desc({2, 3}, TensorDtype::kI32)),
            "broadcast root=1 i32[2, 3]");
}

TEST(OperationDescriptionTest, RememberedIsSharedUntilTheWorkChanges) {
  const ValueDescriptor v = Desc({2, 3}, TensorDtype::kF32);
  auto first = DescribeOnValueRemembered("all_reduce_sum", v);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first, DescribeOnValue("all_reduce_sum", v));
  // The same work again: the same description, not a copy.
  EXPECT_EQ(DescribeOnValueRemembered("all_reduce_sum", v), first);
  // Another kind or another value: a new one; the one handed out stays.
  auto other_kind = DescribeOnValueRemembered("all_gather", v);
  EXPECT_EQ(*other_kind, DescribeOnValue("all_gather", v));
  const ValueDescriptor w = Desc({2, 4}, TensorDtype::kF32);
  auto other_value = DescribeOnValueRemembered("all_gather", w);
  EXPECT_EQ(*other_value, DescribeOnValue("all_gather", w));
  EXPECT_EQ(*first, DescribeOnValue("all_reduce_sum", v));
}

TEST(OperationDescriptionTest, AlongAxisLeavesThePartitionedAxisOpen) {
  const ValueDescriptor d = Desc({2, 4}, TensorDtype::kF32);
  EXPECT_EQ(DescribeAlongAxis("variable_all_to_all", 0, d),
            "variable_all_to_all axis=0 f32[*, 4]");
  const std::vector<size_t> counts = {1, 2};
  EXPECT_EQ(DescribeAlongAxis("all_gather_uneven", 1, d, counts),
            "all_gather_uneven axis=1 counts=[1,2] f32[2, *]");
  // A scalar is gathered as [1].
  EXPECT_EQ(DescribeAlongAxis("all_gather_even", 0, Desc({}, TensorDtype::kF32),
                              std::vector<size_t>{1, 1}),
            "all_gather_even axis=0 counts=[1,1] f32[*]");
  EXPECT_EQ(
      DescribeAlongAxis("all_gather_even", 0, Desc({1}, TensorDtype::kF32),
                        std::vector<size_t>{1, 1}),
      "all_gather_even axis=0 counts=[1,1] f32[*]");
}

TEST(OperationDescriptionTest, ABundleOfOneIsASingleTransfer) {
  EXPECT_EQ(DescribeBundle({Desc({2}, TensorDtype::kF32)}), "bundle(f32[2])");
  EXPECT_EQ(DescribeBundle(
                {Desc({2}, TensorDtype::kF32), Desc({3}, TensorDtype::kI32)}),
            "bundle(f32[2], i32[3])");
  EXPECT_EQ(DescribeBundle({}), "bundle()");
}

}  // namespace
}  // namespace rankd::dataplane
