// Unit tests of HostTensor and the element types behind its accessors.
#include "dataplane/host_tensor.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/match.h"
#include "dataplane/element_types.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(HostTensorTest, FromVectorAndTypedAccess) {
  auto t = HostTensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), TensorDtype::kF32);
  EXPECT_EQ(t->byte_size(), 16u);
  auto v = t->Values<float>();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(std::vector<float>(v->begin(), v->end()),
            (std::vector<float>{1, 2, 3, 4}));
}

TEST(HostTensorTest, WrongTypeIsRefused) {
  auto t = *HostTensor::FromVector<int32_t>({2}, {1, 2});
  auto v = t.Values<float>();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(v.status().message(), "i32"));
  EXPECT_FALSE(t.MutableValues<uint32_t>().ok());
}

TEST(HostTensorTest, CountMismatchAndBadShapeAreRefused) {
  EXPECT_EQ(HostTensor::FromVector<float>({3}, {1, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostTensor::FromVector<float>({0}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto d = *ValueDescriptor::Create({2}, TensorDtype::kU8);
  std::vector<uint8_t> three = {1, 2, 3};
  EXPECT_EQ(HostTensor::FromBytes(d, three).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostTensorTest, CopiesShareAndCloneCopies) {
  auto a = *HostTensor::FromVector<int64_t>({2}, {5, 6});
  HostTensor b = a;
  EXPECT_TRUE(b.SharesBufferWith(a));
  (*b.MutableValues<int64_t>())[0] = 50;
  EXPECT_EQ((*a.Values<int64_t>())[0], 50);
  HostTensor c = a.Clone();
  EXPECT_FALSE(c.SharesBufferWith(a));
  (*c.MutableValues<int64_t>())[1] = 60;
  EXPECT_EQ((*a.Values<int64_t>())[1], 6);
}

TEST(HostTensorTest, ZeroRowsHaveAValidBuffer) {
  auto t = HostTensor::FromRows<float>(0, {3}, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->byte_size(), 0u);
  EXPECT_NE(t->data(), nullptr);
  EXPECT_TRUE(t->Values<float>()->empty());
}

TEST(HostTensorTest, ResourceKeepsTheBufferAlive) {
  std::shared_ptr<const void> resource;
  uint8_t* data = nullptr;
  {
    auto t = *HostTensor::FromVector<uint8_t>({1}, {7});
    resource = t.resource();
    data = t.data();
  }
  EXPECT_EQ(*data, 7);  // still owned through `resource`
  EXPECT_EQ(resource.use_count(), 1);
}

TEST(ElementTypesTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16::FromFloat(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16::FromFloat(3.0f).ToFloat(), 3.0f);
  // 1 + 2^-8 is exactly between two bf16 values: rounds to even (1.0).
  EXPECT_EQ(BFloat16::FromFloat(1.00390625f).ToFloat(), 1.0f);
  EXPECT_TRUE(std::isnan(
      BFloat16::FromFloat(std::numeric_limits<float>::quiet_NaN()).ToFloat()));
}

TEST(ElementTypesTest, Float16ExactSmallIntegersAndRounding) {
  for (int i = -2048; i <= 2048; i += 7) {
    EXPECT_EQ(Float16::FromFloat(static_cast<float>(i)).ToFloat(),
              static_cast<float>(i));
  }
  EXPECT_EQ(Float16::FromFloat(1.0f).bits, 0x3c00);
  EXPECT_EQ(Float16::FromFloat(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Float16::FromFloat(1e6f).bits, 0x7c00);   // overflow -> inf
  EXPECT_EQ(Float16::FromFloat(-1e6f).bits, 0xfc00);  // -inf
  // Smallest subnormal and its float value.
  EXPECT_EQ(Float16::FromFloat(5.9604645e-8f).bits, 0x0001);
  EXPECT_FLOAT_EQ(Float16{0x0001}.ToFloat(), 5.9604645e-8f);
  // 2049 is between 2048 and 2050: ties to even (2048).
  EXPECT_EQ(Float16::FromFloat(2049.0f).ToFloat(), 2048.0f);
  EXPECT_EQ(Float16::FromFloat(2051.0f).ToFloat(), 2052.0f);
}

TEST(ElementTypesTest, DtypeOfMapsEveryType) {
  static_assert(DtypeOf<bool>::value == TensorDtype::kBool);
  static_assert(DtypeOf<Float16>::value == TensorDtype::kF16);
  static_assert(DtypeOf<BFloat16>::value == TensorDtype::kBf16);
  static_assert(DtypeOf<Complex64>::value == TensorDtype::kComplex64);
  static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);
  static_assert(sizeof(Complex64) == 8);
}

}  // namespace
}  // namespace rankd::dataplane
