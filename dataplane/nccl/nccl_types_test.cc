// Pure helpers of the NCCL backend: dtype mapping, unique-id plans, key
// naming and encoding, tags, the default device, the result-code table
// (one header each, public or internal/). Runs on every machine (no CUDA
// needed).
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "dataplane/nccl/default_device.h"
#include "dataplane/nccl/internal/comm_name.h"
#include "dataplane/nccl/internal/nccl_version.h"
#include "dataplane/nccl/internal/result_codes.h"
#include "dataplane/nccl/internal/session_tag.h"
#include "dataplane/nccl/internal/sum_type.h"
#include "dataplane/nccl/internal/unique_id_broker.h"
#include "dataplane/nccl/internal/unique_id_plan.h"
#include "dataplane/nccl/nccl_data_type.h"
#include "dataplane/nccl/nccl_unique_id.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::nccl {
namespace {

using internal::CommName;
using internal::DecodeUniqueId;
using internal::EncodeUniqueId;
using internal::kNcclBf16Version;
using internal::kNcclScalableInitVersion;
using internal::NcclResultCode;
using internal::NcclResultCodeOf;
using internal::NcclResultCodes;
using internal::NcclVersionCode;
using internal::PlanUniqueIds;
using internal::SumTypeFor;
using internal::UniqueIdPlan;
using internal::ValidateSessionTag;

constexpr int kNccl2_28 = NcclVersionCode(2, 28, 9);
constexpr int kNccl2_9 = NcclVersionCode(2, 9, 9);

TEST(NcclVersionCode, MatchesNcclMacro) {
  EXPECT_EQ(NcclVersionCode(2, 28, 9), 22809);
  EXPECT_EQ(NcclVersionCode(2, 8, 4), 2804);
  EXPECT_EQ(NcclVersionCode(2, 10, 3), 21003);
  EXPECT_EQ(kNcclScalableInitVersion, 22304);
  EXPECT_EQ(kNcclBf16Version, 21000);
}

struct SumCase {
  TensorDtype dtype;
  NcclDataType type;
  size_t lanes;
};

TEST(SumTypeFor, MapsEverySummableDtype) {
  const SumCase cases[] = {
      {TensorDtype::kF32, NcclDataType::kFloat32, 1},
      {TensorDtype::kF16, NcclDataType::kFloat16, 1},
      {TensorDtype::kBf16, NcclDataType::kBfloat16, 1},
      {TensorDtype::kF64, NcclDataType::kFloat64, 1},
      {TensorDtype::kI8, NcclDataType::kInt8, 1},
      {TensorDtype::kU8, NcclDataType::kUint8, 1},
      {TensorDtype::kI32, NcclDataType::kInt32, 1},
      {TensorDtype::kU32, NcclDataType::kUint32, 1},
      {TensorDtype::kI64, NcclDataType::kInt64, 1},
      {TensorDtype::kU64, NcclDataType::kUint64, 1},
      {TensorDtype::kComplex64, NcclDataType::kFloat32, 2},
  };
  for (const SumCase& c : cases) {
    auto sum = SumTypeFor(c.dtype, kNccl2_28);
    ASSERT_TRUE(sum.ok()) << DtypeName(c.dtype) << ": " << sum.status();
    EXPECT_EQ(sum->type, c.type) << DtypeName(c.dtype);
    EXPECT_EQ(sum->lanes, c.lanes) << DtypeName(c.dtype);
    // Lanes x NCCL element size == value element size.
    const size_t nccl_size =
        c.type == NcclDataType::kFloat16 || c.type == NcclDataType::kBfloat16
            ? 2
        : c.type == NcclDataType::kInt8 || c.type == NcclDataType::kUint8 ? 1
        : c.type == NcclDataType::kInt32 || c.type == NcclDataType::kUint32 ||
                c.type == NcclDataType::kFloat32
            ? 4
            : 8;
    EXPECT_EQ(sum->lanes * nccl_size, DtypeSize(c.dtype)) << DtypeName(c.dtype);
  }
}

TEST(SumTypeFor, FailsClosedForUnsummableDtypes) {
  // bool has no sum (InvalidArgument, as on Gloo); i16/u16 have one NCCL
  // cannot compute (Unimplemented).
  for (TensorDtype dtype :
       {TensorDtype::kBool, TensorDtype::kI16, TensorDtype::kU16}) {
    auto sum = SumTypeFor(dtype, kNccl2_28);
    ASSERT_FALSE(sum.ok()) << DtypeName(dtype);
    EXPECT_EQ(sum.status().code(), dtype == TensorDtype::kBool
                                       ? absl::StatusCode::kInvalidArgument
                                       : absl::StatusCode::kUnimplemented);
    EXPECT_TRUE(absl::StrContains(sum.status().message(), "nccl"));
    EXPECT_TRUE(absl::StrContains(sum.status().message(), DtypeName(dtype)))
        << sum.status();
  }
}

TEST(SumTypeFor, Bf16NeedsNccl210) {
  auto old = SumTypeFor(TensorDtype::kBf16, kNccl2_9);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(old.status().message(), "2.10"));
  EXPECT_TRUE(SumTypeFor(TensorDtype::kBf16, kNcclBf16Version).ok());
  // Other dtypes do not depend on the version.
  EXPECT_TRUE(SumTypeFor(TensorDtype::kF16, kNccl2_9).ok());
}

TEST(NcclDataTypeName, NamesEveryType) {
  EXPECT_STREQ(NcclDataTypeName(NcclDataType::kFloat32), "ncclFloat32");
  EXPECT_STREQ(NcclDataTypeName(NcclDataType::kBfloat16), "ncclBfloat16");
  EXPECT_STREQ(NcclDataTypeName(NcclDataType::kUint8), "ncclUint8");
}

TEST(PlanUniqueIds, OneIdUpTo128Ranks) {
  for (uint32_t n : {1u, 2u, 8u, 127u, 128u}) {
    UniqueIdPlan plan = PlanUniqueIds(n, kDefaultRanksPerUniqueId, true);
    EXPECT_EQ(plan.count(), 1u) << n;
    EXPECT_EQ(plan.roots, std::vector<uint32_t>{0}) << n;
    EXPECT_FALSE(plan.scalable());
    EXPECT_EQ(plan.nranks, n);
  }
}

TEST(PlanUniqueIds, OneIdPer128RanksAbove) {
  UniqueIdPlan p129 = PlanUniqueIds(129, kDefaultRanksPerUniqueId, true);
  EXPECT_EQ(p129.roots, (std::vector<uint32_t>{0, 65}));
  EXPECT_TRUE(p129.scalable());
  UniqueIdPlan p256 = PlanUniqueIds(256, kDefaultRanksPerUniqueId, true);
  EXPECT_EQ(p256.roots, (std::vector<uint32_t>{0, 128}));
  UniqueIdPlan p257 = PlanUniqueIds(257, kDefaultRanksPerUniqueId, true);
  // 257 = 86 + 86 + 85: the first 257 % 3 roots serve one more rank.
  EXPECT_EQ(p257.roots, (std::vector<uint32_t>{0, 86, 172}));
  UniqueIdPlan p1024 = PlanUniqueIds(1024, kDefaultRanksPerUniqueId, true);
  ASSERT_EQ(p1024.count(), 8u);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(p1024.roots[i], i * 128);
}

TEST(PlanUniqueIds, RootsAreDistinctAndServeNcclBlocks) {
  for (uint32_t n : {129u, 300u, 1000u, 4097u}) {
    UniqueIdPlan plan = PlanUniqueIds(n, kDefaultRanksPerUniqueId, true);
    const uint32_t count = (n + 127) / 128;
    ASSERT_EQ(plan.count(), count) << n;
    std::set<uint32_t> distinct(plan.roots.begin(), plan.roots.end());
    EXPECT_EQ(distinct.size(), count);
    EXPECT_EQ(plan.roots[0], 0u);
    // Block sizes differ by at most one and never exceed 128.
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t end = i + 1 < count ? plan.roots[i + 1] : n;
      const uint32_t size = end - plan.roots[i];
      EXPECT_LE(size, 128u) << n;
      EXPECT_GE(size, n / count) << n;
      EXPECT_LE(size, n / count + 1) << n;
    }
  }
}

TEST(PlanUniqueIds, WithoutScalableInitUsesOneId) {
  UniqueIdPlan plan = PlanUniqueIds(1000, kDefaultRanksPerUniqueId, false);
  EXPECT_EQ(plan.roots, std::vector<uint32_t>{0});
}

TEST(PlanUniqueIds, CustomRanksPerId) {
  UniqueIdPlan plan = PlanUniqueIds(10, 4, true);
  EXPECT_EQ(plan.roots, (std::vector<uint32_t>{0, 4, 7}));
  EXPECT_EQ(PlanUniqueIds(10, 0, true).count(), 1u);  // 0 => default 128
}

TEST(CommName, WorldAndHashedGroups) {
  EXPECT_EQ(CommName({0, 1, 2, 3}, 4), "world");
  EXPECT_EQ(CommName({0}, 1), "world");
  const std::string a = CommName({0, 1}, 4);
  const std::string b = CommName({2, 3}, 4);
  const std::string c = CommName({1, 0}, 4);
  EXPECT_TRUE(absl::StartsWith(a, "m2-")) << a;
  EXPECT_EQ(a.size(), 3 + 16u);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);  // order matters: it is the communicator's rank order
  EXPECT_EQ(a, CommName({0, 1}, 8));  // independent of the world size
  EXPECT_NE(CommName({0, 1, 2, 3}, 8), "world");
  EXPECT_EQ(CommName({3}, 4), CommName({3}, 4));
}

TEST(UniqueIdKey, Format) {
  EXPECT_EQ(UniqueIdKey("llama/7", "default", "world", 0, 1),
            "llama/7/nccl/default/world/uid/0of1");
  EXPECT_EQ(UniqueIdKey("", "t", "m2-00000000000000ff", 2, 3),
            "nccl/t/m2-00000000000000ff/uid/2of3");
}

TEST(UniqueIdEncoding, RoundTrip) {
  std::string id(kNcclUniqueIdBytes, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);
  const std::string encoded = EncodeUniqueId(id);
  EXPECT_TRUE(absl::StartsWith(encoded, "nccl-uid-v1:"));
  EXPECT_EQ(encoded.size(), 12 + 2 * kNcclUniqueIdBytes);
  auto decoded = DecodeUniqueId(encoded, "k");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, id);
}

TEST(UniqueIdEncoding, RejectsOtherValues) {
  for (const std::string& bad :
       {std::string("gloo:abc"), std::string("nccl-uid-v1:abcd"),
        std::string("nccl-uid-v1:") + std::string(256, 'z')}) {
    auto decoded = DecodeUniqueId(bad, "the/key");
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(decoded.status().message(), "the/key"));
  }
}

TEST(ValidateSessionTag, Rules) {
  EXPECT_TRUE(ValidateSessionTag("default").ok());
  EXPECT_TRUE(ValidateSessionTag("run-2.tp_0").ok());
  EXPECT_FALSE(ValidateSessionTag("").ok());
  EXPECT_FALSE(ValidateSessionTag("a/b").ok());
  EXPECT_FALSE(ValidateSessionTag("sp ace").ok());
  EXPECT_FALSE(ValidateSessionTag(std::string(65, 'a')).ok());
  EXPECT_TRUE(ValidateSessionTag(std::string(64, 'a')).ok());
}

// The default device follows the visible device count (issue 34, defect
// 5): local rank 3 of 4 asks for device 3 only where the process sees the
// node's GPUs, and device 0 where it sees one of its own.
TEST(NcclTypesTest, DefaultDeviceFollowsTheVisibleDeviceCount) {
  // Every GPU of the node visible (torchrun's set_device(LOCAL_RANK)).
  EXPECT_EQ(*DefaultDevice(3, 4, 8, 4), 3);
  EXPECT_EQ(*DefaultDevice(0, 1, 1, 1), 0);
  EXPECT_EQ(*DefaultDevice(2, 4, 4, 8), 2);
  // One GPU per rank process (CUDA_VISIBLE_DEVICES per process, one GPU
  // per container): that one.
  EXPECT_EQ(*DefaultDevice(3, 4, 8, 1), 0);
  EXPECT_EQ(*DefaultDevice(7, 8, 16, 1), 0);
  // Ambiguous: more than one visible, fewer than the node's ranks.
  absl::StatusOr<int> d = DefaultDevice(3, 4, 4, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(d.status().message(),
                                "4 ranks run on this node (world size 4)"))
      << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "sees 2 GPUs;"))
      << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "CUDA_VISIBLE_DEVICES"))
      << d.status();
  EXPECT_TRUE(
      absl::StrContains(d.status().message(), "NcclSessionOptions::device"))
      << d.status();
  EXPECT_FALSE(DefaultDevice(0, 1, 1, 0).ok());
}

// One table maps every NCCL result, and none to InvalidArgument: an NCCL
// failure poisons the session, and the contract keeps InvalidArgument for
// refusals that leave it usable (issue 34, defect 6).
TEST(NcclTypesTest, NoNcclResultBecomesInvalidArgument) {
  std::vector<int> seen;
  for (const NcclResultCode& entry : NcclResultCodes()) {
    seen.push_back(entry.result);
    EXPECT_NE(entry.code, absl::StatusCode::kInvalidArgument) << entry.name;
    EXPECT_NE(entry.code, absl::StatusCode::kOk) << entry.name;
    EXPECT_EQ(&NcclResultCodeOf(entry.result), &entry);
  }
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(NcclResultCodeOf(5).code, absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(NcclResultCodeOf(6).code, absl::StatusCode::kAborted);
  EXPECT_EQ(NcclResultCodeOf(2).code, absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclResultCodeOf(4).code, absl::StatusCode::kInternal);
  EXPECT_EQ(NcclResultCodeOf(99).code, absl::StatusCode::kUnknown);
}

}  // namespace
}  // namespace rankd::dataplane::nccl
