// Unit tests of HostTensor and the element types behind its accessors.
#include "dataplane/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "dataplane/element_types.h"
#include "dataplane/host_buffer_pool.h"
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
  // Only the leading extent may be 0 (docs/contract.md, "Empty values").
  EXPECT_EQ(HostTensor::FromVector<float>({2, 0}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto no_rows = HostTensor::FromVector<float>({0, 2}, {});
  ASSERT_TRUE(no_rows.ok()) << no_rows.status();
  EXPECT_EQ(no_rows->byte_size(), 0u);
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

// ---- buffers from HostBufferPool::Default()
// ----------------------------------

// 1 MiB of bytes: large enough to be pooled.
constexpr size_t kPooledBytes = size_t{1} << 20;

ValueDescriptor Bytes(size_t n) {
  return *ValueDescriptor::Create({n}, TensorDtype::kU8);
}

bool AllAre(const HostTensor& t, uint8_t value) {
  return std::all_of(t.bytes().begin(), t.bytes().end(),
                     [value](uint8_t b) { return b == value; });
}

TEST(HostTensorPoolTest, ReleasedBufferIsReusedForTheSameSize) {
  uint8_t* block = nullptr;
  {
    HostTensor t = HostTensor::Zeros(Bytes(kPooledBytes));
    block = t.data();
  }
  const HostBufferPool::Stats before = HostBufferPool::Default().GetStats();
  HostTensor again = HostTensor::Zeros(Bytes(kPooledBytes));
  EXPECT_EQ(again.data(), block);
  EXPECT_EQ(HostBufferPool::Default().GetStats().hits, before.hits + 1);
}

TEST(HostTensorPoolTest, ZerosAreZeroInADirtyReusedBlock) {
  uint8_t* block = nullptr;
  {
    HostTensor dirty = HostTensor::Zeros(Bytes(kPooledBytes));
    std::memset(dirty.data(), 0xcd, dirty.byte_size());
    block = dirty.data();
  }
  HostTensor zeros = HostTensor::Zeros(Bytes(kPooledBytes));
  ASSERT_EQ(zeros.data(), block);  // the dirty block came back
  EXPECT_TRUE(AllAre(zeros, 0));
}

TEST(HostTensorPoolTest, CloneCopiesExactlyIntoAReusedBlock) {
  std::vector<uint32_t> values(kPooledBytes / 4);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<uint32_t>(i * 2654435761u);
  }
  auto source = *HostTensor::FromVector<uint32_t>({values.size()}, values);
  {
    HostTensor dirty = HostTensor::Zeros(source.descriptor());
    std::memset(dirty.data(), 0xee, dirty.byte_size());
  }
  HostTensor copy = source.Clone();
  EXPECT_FALSE(copy.SharesBufferWith(source));
  EXPECT_EQ(copy.descriptor(), source.descriptor());
  EXPECT_EQ(std::memcmp(copy.data(), source.data(), source.byte_size()), 0);
  EXPECT_EQ(std::vector<uint32_t>(copy.Values<uint32_t>()->begin(),
                                  copy.Values<uint32_t>()->end()),
            values);
}

TEST(HostTensorPoolTest, ZeroByteTensorsCloneAndStayDistinct) {
  auto empty = *HostTensor::FromRows<float>(0, {4}, {});
  HostTensor copy = empty.Clone();
  EXPECT_NE(copy.data(), nullptr);
  EXPECT_EQ(copy.byte_size(), 0u);
  EXPECT_FALSE(copy.SharesBufferWith(empty));
  HostTensor zeros = HostTensor::Zeros(empty.descriptor());
  EXPECT_NE(zeros.data(), nullptr);
  EXPECT_FALSE(zeros.SharesBufferWith(empty));
}

TEST(HostTensorPoolTest, BuffersAreAligned) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{100}, size_t{65536} + 3,
                   kPooledBytes + 1}) {
    HostTensor t = HostTensor::Zeros(Bytes(n));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << n;
    EXPECT_TRUE(AllAre(t, 0)) << n;
  }
}

TEST(HostTensorPoolTest, ResourceHoldsTheBlockOutOfThePool) {
  std::shared_ptr<const void> resource;
  uint8_t* block = nullptr;
  {
    HostTensor t = HostTensor::Zeros(Bytes(kPooledBytes));
    std::memset(t.data(), 0x5a, t.byte_size());
    resource = t.resource();
    block = t.data();
  }
  {
    // The tensor is gone but the completion's reference is not: a new tensor
    // of the same size must get another block, and ours stays intact.
    HostTensor other = HostTensor::Zeros(Bytes(kPooledBytes));
    EXPECT_NE(other.data(), block);
    EXPECT_TRUE(std::all_of(block, block + kPooledBytes,
                            [](uint8_t b) { return b == 0x5a; }));
  }
  resource.reset();  // now the block is idle (freed last: handed out first)
  HostTensor reused = HostTensor::Zeros(Bytes(kPooledBytes));
  EXPECT_EQ(reused.data(), block);
}

TEST(HostTensorPoolTest, CapacityZeroStillWorks) {
  HostBufferPool& pool = HostBufferPool::Default();
  const size_t saved = pool.capacity_bytes();
  pool.SetCapacityBytes(0);
  EXPECT_EQ(pool.GetStats().idle_bytes, 0u);
  auto source = *HostTensor::FromVector<float>({4}, {1, 2, 3, 4});
  for (int i = 0; i < 3; ++i) {
    HostTensor big = HostTensor::Zeros(Bytes(kPooledBytes));
    EXPECT_TRUE(AllAre(big, 0));
    HostTensor copy = big.Clone();
    EXPECT_TRUE(AllAre(copy, 0));
  }
  EXPECT_EQ(pool.GetStats().idle_bytes, 0u);
  pool.SetCapacityBytes(saved);
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

TEST(HostTensorDonationTest, MovesKeepItCopiesDropIt) {
  auto t = *HostTensor::FromVector<float>({2}, {1, 2});
  EXPECT_FALSE(t.donated());
  HostTensor d = HostTensor::Donate(std::move(t));
  EXPECT_TRUE(d.donated());
  EXPECT_TRUE(d.donated_and_sole_owner());
  HostTensor copy = d;
  EXPECT_FALSE(copy.donated());
  EXPECT_FALSE(d.donated_and_sole_owner());  // the copy shares the buffer
  std::shared_ptr<const void> retained = copy.resource();
  copy = *HostTensor::FromVector<float>({1}, {3});
  EXPECT_FALSE(d.donated_and_sole_owner());  // a retained resource shares it
  retained.reset();
  EXPECT_TRUE(d.donated_and_sole_owner());
  HostTensor moved = std::move(d);
  EXPECT_TRUE(moved.donated_and_sole_owner());
}

}  // namespace
}  // namespace rankd::dataplane
