// Unit tests for dtype.h: TensorDtype and its sizes and names.
#include "dataplane/dtype.h"

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(DtypeTest, SizesAndNames) {
  EXPECT_EQ(DtypeSize(TensorDtype::kBool), 1u);
  EXPECT_EQ(DtypeSize(TensorDtype::kU8), 1u);
  EXPECT_EQ(DtypeSize(TensorDtype::kF16), 2u);
  EXPECT_EQ(DtypeSize(TensorDtype::kBf16), 2u);
  EXPECT_EQ(DtypeSize(TensorDtype::kI32), 4u);
  EXPECT_EQ(DtypeSize(TensorDtype::kF64), 8u);
  EXPECT_EQ(DtypeSize(TensorDtype::kComplex64), 8u);
  EXPECT_STREQ(DtypeName(TensorDtype::kBf16), "bf16");
  EXPECT_STREQ(DtypeName(TensorDtype::kComplex64), "complex64");
}

}  // namespace
}  // namespace rankd::dataplane
