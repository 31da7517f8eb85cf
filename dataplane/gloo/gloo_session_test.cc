// GlooSession (DistributedSession on Gloo) unit tests: every validation rule
// on a one-rank world (no transport needed), capability refusal, poisoning,
// and exact values of every session operation with four ranks as threads
// over real Gloo TCP connections and an in-process control plane.
#include "dataplane/gloo/gloo_session.h"

#include <complex>
#include <cstdint>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "dataplane/element_types.h"
#include "dataplane/gloo/internal/rankd_store.h"
#include "dataplane/gloo/testing/gloo_test_cluster.h"
#include "dataplane/host_buffer_pool.h"
#include "dataplane/testing/in_process_control_plane.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::gloo {
namespace {

using testing::GlooTestCluster;
using testing::InProcessJob;

// ---- one rank: validation ---------------------------------------------------

class SingleRankTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(GlooTestCluster::DefaultOptions()); }

  void Open(GlooSessionOptions options) {
    session_.reset();
    job_ = InProcessJob::Create(1);
    control_plane_ = job_->ForRank(0);
    auto descriptor =
        DistributedSessionDescriptor::FromTopology({1, 1, 1, 1}, 1, 0);
    ASSERT_TRUE(descriptor.ok());
    auto session =
        GlooSession::Open(*descriptor, control_plane_.get(), options);
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
  }

  HostTensor F32(std::vector<size_t> shape, std::vector<float> values) {
    return *HostTensor::FromVector<float>(std::move(shape), values);
  }

  std::shared_ptr<InProcessJob> job_;
  std::unique_ptr<ControlPlane> control_plane_;
  std::unique_ptr<GlooSession> session_;
};

TEST_F(SingleRankTest, CapabilitiesAreAdvertised) {
  DistributedCapabilities caps = session_->capabilities();
  EXPECT_TRUE(caps.world_collectives);
  EXPECT_TRUE(caps.point_to_point);
  EXPECT_TRUE(caps.variable_all_to_all);
  EXPECT_TRUE(caps.exact_completion);
  // world, tensor, pipeline, expert and data groups of a one-rank job.
  EXPECT_EQ(caps.collective_groups,
            (std::set<CollectiveGroupId>{1, 2, 3, 4, 5}));
  EXPECT_EQ(session_->descriptor().world_size(), 1u);
}

TEST_F(SingleRankTest, OneMemberOperationsAreLocal) {
  auto sum =
      session_->AllReduceSum(CollectiveScope::World(), F32({3}, {1, 2, 3}));
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_TRUE(sum->completion->Wait().ok());
  EXPECT_EQ(*sum->output.Values<float>(),
            absl::MakeConstSpan(std::vector<float>{1, 2, 3}));
  auto gathered = session_->AllGather(CollectiveScope::Group(2), F32({}, {7}));
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  ASSERT_TRUE(gathered->completion->Wait().ok());
  EXPECT_EQ(gathered->output.descriptor().shape(), (std::vector<size_t>{1}));
  auto words = session_->AllGatherWords(std::vector<uint32_t>{4, 5});
  ASSERT_TRUE(words.ok()) << words.status();
  EXPECT_EQ(*words, (std::vector<uint32_t>{4, 5}));
}

TEST_F(SingleRankTest, CallerOwnedOutputsAreCheckedBeforeAnythingRuns) {
  const CollectiveScope world = CollectiveScope::World();
  HostTensor x = F32({3}, {1, 2, 3});
  // The wrong descriptor: refused, naming both.
  auto wrong = session_->AllReduceSumInto(world, x, F32({2}, {0, 0}));
  ASSERT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(wrong.status().message(),
                        "the output is f32[2] but the result is f32[3]"))
      << wrong.status();
  auto gather = session_->AllGatherInto(world, x, F32({2}, {0, 0}));
  EXPECT_EQ(gather.status().code(), absl::StatusCode::kInvalidArgument);
  // A gather cannot write over its own input.
  auto aliased = session_->AllGatherInto(world, x, x);
  ASSERT_EQ(aliased.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(aliased.status().message(), "cannot run in place"))
      << aliased.status();
  // A sum can: the output is the input's own buffer.
  auto in_place = session_->AllReduceSumInto(world, x, x);
  ASSERT_TRUE(in_place.ok()) << in_place.status();
  ASSERT_TRUE(in_place->completion->Wait().ok());
  EXPECT_TRUE(in_place->output.SharesBufferWith(x));
  EXPECT_EQ(*in_place->output.Values<float>(),
            absl::MakeConstSpan(std::vector<float>{1, 2, 3}));
  // Out of place into the caller's tensor.
  HostTensor out = F32({3}, {0, 0, 0});
  auto into = session_->AllReduceSumInto(world, x, out);
  ASSERT_TRUE(into.ok()) << into.status();
  ASSERT_TRUE(into->completion->Wait().ok());
  EXPECT_TRUE(into->output.SharesBufferWith(out));
  EXPECT_EQ(*out.Values<float>(),
            absl::MakeConstSpan(std::vector<float>{1, 2, 3}));
}

TEST_F(SingleRankTest, NonMemberGroupIsNotFound) {
  auto r = session_->AllReduceSum(CollectiveScope::Group(42), F32({1}, {1}));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "group 42"));
  EXPECT_EQ(session_->AllGather(CollectiveScope::Group(42), F32({1}, {1}))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(session_->Send(CollectiveScope::Group(42), 0, F32({1}, {1}))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SingleRankTest, BoolHasNoSum) {
  auto flags = *HostTensor::FromVector<bool>({2}, {true, false});
  auto r = session_->AllReduceSum(CollectiveScope::World(), flags);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "bool"));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "gloo"));
  // Moving bools is fine.
  auto g = session_->AllGather(CollectiveScope::World(), flags);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->completion->Wait().ok());
}

TEST_F(SingleRankTest, AllToAllVValidation) {
  const CollectiveScope world = CollectiveScope::World();
  HostTensor two = F32({2}, {1, 2});
  // Count arrays must have the scope's size.
  EXPECT_EQ(session_->AllToAllV(world, two, {2, 0}, {2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session_->AllToAllV(world, two, {2}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The input needs rows.
  EXPECT_EQ(session_->AllToAllV(world, F32({}, {1}), {1}, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Send total must match the input's rows.
  auto total = session_->AllToAllV(world, two, {3}, {3});
  EXPECT_EQ(total.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(total.status().message(), "add up"));
  // The self slot must match.
  auto self = session_->AllToAllV(world, two, {2}, {1});
  EXPECT_EQ(self.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(self.status().message(), "self slot"));
  // Valid: a local copy.
  auto ok = session_->AllToAllV(world, two, {2}, {2});
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(ok->completion->Wait().ok());
  EXPECT_EQ(ok->output.descriptor().shape(), (std::vector<size_t>{2}));
}

TEST_F(SingleRankTest, PeerRangeAndSelf) {
  const CollectiveScope world = CollectiveScope::World();
  auto out_of_range = session_->Send(world, 1, F32({1}, {1}));
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(out_of_range.status().message(), "outside"));
  auto self = session_->Send(world, 0, F32({1}, {1}));
  EXPECT_EQ(self.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(self.status().message(), "itself"));
  auto desc = *ValueDescriptor::Create({1}, TensorDtype::kF32);
  EXPECT_EQ(session_->Receive(world, 5, desc).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session_->Receive(world, 0, desc).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SingleRankTest, ZeroOrNegativeTimeoutIsRejected) {
  auto sum = session_->AllReduceSum(CollectiveScope::World(), F32({1}, {1}));
  ASSERT_TRUE(sum.ok());
  auto zero = sum->completion->WaitBounded(
      absl::ZeroDuration(), CancellationMode::kQuarantineUntilComplete);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  auto negative = sum->completion->WaitBounded(absl::Seconds(-1),
                                               CancellationMode::kNativeCancel);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  auto fine = sum->completion->WaitBounded(
      absl::Seconds(5), CancellationMode::kQuarantineUntilComplete);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_TRUE(fine->completed());
  EXPECT_TRUE(sum->completion->SupportsCancellation(
      CancellationMode::kQuarantineUntilComplete));
  EXPECT_TRUE(
      sum->completion->SupportsCancellation(CancellationMode::kNativeCancel));
}

// Without exact_completion (restricted), QuarantineUntilComplete, which
// releases work on exact completion, is not offered; NativeCancel is.
TEST_F(SingleRankTest, RestrictingExactCompletionWithdrawsQuarantine) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  DistributedCapabilities allow;
  allow.world_collectives = true;
  allow.exact_completion = false;
  options.restrict_capabilities = allow;
  Open(options);
  EXPECT_FALSE(session_->capabilities().exact_completion);
  auto sum = session_->AllReduceSum(CollectiveScope::World(), F32({1}, {1}));
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_FALSE(sum->completion->SupportsCancellation(
      CancellationMode::kQuarantineUntilComplete));
  EXPECT_TRUE(
      sum->completion->SupportsCancellation(CancellationMode::kNativeCancel));
  auto refused = sum->completion->WaitBounded(
      absl::Seconds(5), CancellationMode::kQuarantineUntilComplete);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(sum->completion->Wait().ok());
}

TEST_F(SingleRankTest, RestrictedCapabilitiesFailClosed) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  DistributedCapabilities allow;
  allow.collective_groups = {2};
  allow.exact_completion = true;
  options.restrict_capabilities = allow;
  Open(options);
  DistributedCapabilities caps = session_->capabilities();
  EXPECT_FALSE(caps.world_collectives);
  EXPECT_EQ(caps.collective_groups, (std::set<CollectiveGroupId>{2}));
  EXPECT_FALSE(caps.point_to_point);
  EXPECT_FALSE(caps.variable_all_to_all);

  auto world = session_->AllReduceSum(CollectiveScope::World(), F32({1}, {1}));
  EXPECT_EQ(world.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(world.status().message(), "gloo"));
  EXPECT_TRUE(absl::StrContains(world.status().message(), "world_collectives"));
  auto group3 = session_->AllGather(CollectiveScope::Group(3), F32({1}, {1}));
  EXPECT_EQ(group3.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(
      absl::StrContains(group3.status().message(), "collective_groups"));
  auto a2a =
      session_->AllToAllV(CollectiveScope::Group(2), F32({1}, {1}), {1}, {1});
  EXPECT_EQ(a2a.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(a2a.status().message(), "variable_all_to_all"));
  // The advertised group still works.
  auto ok = session_->AllReduceSum(CollectiveScope::Group(2), F32({1}, {1}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->completion->Wait().ok());
}

TEST_F(SingleRankTest, PointToPointRefusedWhenNotAdvertised) {
  // A two-member scope is needed for a valid peer; use a restricted one-rank
  // session: the capability check comes before the peer check.
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  DistributedCapabilities allow;
  allow.world_collectives = true;
  options.restrict_capabilities = allow;
  Open(options);
  auto send = session_->Send(CollectiveScope::World(), 0, F32({1}, {1}));
  EXPECT_EQ(send.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(send.status().message(), "point_to_point"));
  auto receive =
      session_->Receive(CollectiveScope::World(), 0,
                        *ValueDescriptor::Create({1}, TensorDtype::kF32));
  EXPECT_EQ(receive.status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(SingleRankTest, PoisonedSessionRefusesEverythingWithTheCause) {
  session_->Abort(absl::AbortedError("job itest failed: rank 3 lost"));
  EXPECT_FALSE(session_->backend().poison().ok());
  absl::Time start = absl::Now();
  auto sum = session_->AllReduceSum(CollectiveScope::World(), F32({1}, {1}));
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(sum.status().message(), "rank 3 lost"));
  EXPECT_EQ(session_->AllGather(CollectiveScope::World(), F32({1}, {1}))
                .status()
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(
      session_->AllToAllV(CollectiveScope::World(), F32({1}, {1}), {1}, {1})
          .status()
          .code(),
      absl::StatusCode::kAborted);
  // Poison comes before every other check.
  EXPECT_EQ(session_->AllReduceSum(CollectiveScope::Group(99), F32({1}, {1}))
                .status()
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_TRUE(session_->backend().executor().idle());
  // A later cause does not replace the original one.
  session_->backend().Abort(absl::InternalError("later"));
  EXPECT_EQ(session_->backend().poison().code(), absl::StatusCode::kAborted);
}

// Poison only latches: later work is refused with the first cause, on the
// session and its backend alike, and nothing is aborted.
TEST_F(SingleRankTest, PoisonLatchesTheFirstCauseWithoutAborting) {
  session_->Poison(absl::OkStatus());  // an OK cause does nothing
  EXPECT_TRUE(session_->poison().ok());
  session_->Poison(absl::UnavailableError("drained by the scheduler"));
  EXPECT_EQ(session_->poison().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(session_->backend().poison(), session_->poison());
  auto sum = session_->AllReduceSum(CollectiveScope::World(), F32({1}, {1}));
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(sum.status().message(), "drained"))
      << sum.status();
  GlooBackend& b = session_->backend();
  EXPECT_EQ(b.Barrier(b.world(), b.executor()).status().code(),
            absl::StatusCode::kUnavailable);
  // Abort after Poison tears down but keeps the first cause.
  session_->Abort(absl::AbortedError("rank 3 lost"));
  EXPECT_EQ(session_->poison().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SingleRankTest, JobFailureFromTheControlPlanePoisons) {
  job_->Fail(absl::AbortedError("job itest failed: node 2 lost"));
  auto sum = session_->AllReduceSum(CollectiveScope::World(), F32({1}, {1}));
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::StrContains(sum.status().message(), "node 2 lost"));
}

TEST_F(SingleRankTest, APoisonedSessionAdvertisesNothing) {
  // Fail-closed, the same on NCCL (nccl_fail_closed_test.cc).
  EXPECT_TRUE(session_->capabilities().world_collectives);
  session_->Poison(absl::AbortedError("rank 4 lost"));
  const DistributedCapabilities caps = session_->capabilities();
  EXPECT_FALSE(caps.world_collectives);
  EXPECT_TRUE(caps.collective_groups.empty());
  EXPECT_FALSE(caps.point_to_point);
  EXPECT_FALSE(caps.variable_all_to_all);
  EXPECT_FALSE(caps.exact_completion);
}

TEST(GlooSessionCreateTest, FailedJobRefusesToConnect) {
  auto job = InProcessJob::Create(2);
  job->Fail(absl::AbortedError("rank 1 lost"));
  auto cp = job->ForRank(0);
  auto d = *DistributedSessionDescriptor::FromTopology({1, 1, 1, 2}, 2, 0);
  auto s = GlooSession::Open(d, cp.get(), GlooTestCluster::DefaultOptions());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kAborted);
}

TEST(GlooSessionCreateTest, RejectsBadOptions) {
  auto job = InProcessJob::Create(1);
  auto cp = job->ForRank(0);
  auto d = *DistributedSessionDescriptor::FromTopology({1, 1, 1, 1}, 1, 0);
  GlooSessionOptions options;
  options.op_timeout = absl::ZeroDuration();
  EXPECT_EQ(GlooSession::Open(d, cp.get(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = GlooSessionOptions();
  options.all_reduce_ring_segment_bytes = 0;
  EXPECT_EQ(GlooSession::Open(d, cp.get(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooSession::Open(d, nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooSessionCreateTest, MissingPeerTimesOutNamingTheGroup) {
  auto job = InProcessJob::Create(2);
  auto cp = job->ForRank(0);
  auto d = *DistributedSessionDescriptor::FromTopology({1, 1, 1, 2}, 2, 0);
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.connect_timeout = absl::Milliseconds(300);
  auto s = GlooSession::Open(d, cp.get(), options);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "connecting group 1"))
      << s.status();
}

// ---- four ranks: exact values ----------------------------------------------

class FourRankTest : public ::testing::Test {
 protected:
  // TP2 x DP2: world 1, tensor groups 2 {0,1} and 3 {2,3}, singleton
  // pipeline and expert groups 4..11, data groups 12 {0,2} and 13 {1,3}.
  FourRankTest() : cluster_({2, 1, 1, 2}, 4) {}
  void SetUp() override {
    ASSERT_TRUE(cluster_.status().ok()) << cluster_.status();
  }
  GlooTestCluster cluster_;
};

template <typename T>
std::vector<T> ValuesOf(const HostTensor& t) {
  auto v = t.Values<T>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::vector<T>(v->begin(), v->end()) : std::vector<T>();
}

template <typename T, typename Make>
void ExpectWorldSum(GlooTestCluster& cluster, Make make) {
  cluster.Run([&](uint32_t r) {
    std::vector<T> mine, want(3);
    for (int i = 0; i < 3; ++i) {
      mine.push_back(make(r, i));
      for (uint32_t s = 0; s < 4; ++s) want[i] = want[i] + make(s, i);
    }
    auto input = *HostTensor::FromVector<T>({3}, mine);
    auto sum = cluster.session(r).AllReduceSum(CollectiveScope::World(), input);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok());
    EXPECT_TRUE(sum->completion->IsComplete());
    EXPECT_EQ(ValuesOf<T>(sum->output), want) << DtypeName(DtypeOf<T>::value);
    // The input is untouched.
    EXPECT_EQ(ValuesOf<T>(input), mine);
  });
}

TEST_F(FourRankTest, AllReduceSumEveryDtype) {
  ExpectWorldSum<float>(cluster_,
                        [](uint32_t r, int i) { return 1.5f * r + i; });
  ExpectWorldSum<double>(cluster_,
                         [](uint32_t r, int i) { return 0.25 * r - i; });
  ExpectWorldSum<int32_t>(cluster_,
                          [](uint32_t r, int i) { return -1000 * int(r) + i; });
  ExpectWorldSum<int64_t>(
      cluster_, [](uint32_t r, int i) { return (int64_t{1} << 40) * r + i; });
  ExpectWorldSum<uint32_t>(cluster_,
                           [](uint32_t r, int i) { return 7u * r + i; });
  ExpectWorldSum<uint8_t>(cluster_, [](uint32_t r, int i) {
    return static_cast<uint8_t>(60 * r + i);  // wraps modulo 256
  });
  ExpectWorldSum<int8_t>(cluster_, [](uint32_t r, int i) {
    return static_cast<int8_t>(int(r) * 3 - i);
  });
  ExpectWorldSum<int16_t>(cluster_, [](uint32_t r, int i) {
    return static_cast<int16_t>(int(r) * 300 - i);
  });
  ExpectWorldSum<uint16_t>(cluster_, [](uint32_t r, int i) {
    return static_cast<uint16_t>(r * 1000 + i);
  });
  ExpectWorldSum<uint64_t>(
      cluster_, [](uint32_t r, int i) { return (uint64_t{1} << 50) * r + i; });
  ExpectWorldSum<Complex64>(cluster_, [](uint32_t r, int i) {
    return Complex64(float(r), -float(i));
  });
}

TEST_F(FourRankTest, AllReduceSumHalfPrecision) {
  // Small integers are exact in f16 and bf16, as are their sums.
  cluster_.Run([&](uint32_t r) {
    std::vector<Float16> h;
    std::vector<BFloat16> b;
    for (int i = 0; i < 4; ++i) {
      h.push_back(Float16::FromFloat(float(r * 10 + i)));
      b.push_back(BFloat16::FromFloat(float(r + i)));
    }
    auto hs = cluster_.session(r).AllReduceSum(
        CollectiveScope::World(), *HostTensor::FromVector<Float16>({4}, h));
    auto bs = cluster_.session(r).AllReduceSum(
        CollectiveScope::World(), *HostTensor::FromVector<BFloat16>({4}, b));
    ASSERT_TRUE(hs.ok() && bs.ok());
    ASSERT_TRUE(hs->completion->Wait().ok());
    ASSERT_TRUE(bs->completion->Wait().ok());
    auto hv = ValuesOf<Float16>(hs->output);
    auto bv = ValuesOf<BFloat16>(bs->output);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(hv[i].ToFloat(), 60.0f + 4 * i);  // 10*(0+1+2+3) + 4i
      EXPECT_EQ(bv[i].ToFloat(), 6.0f + 4 * i);
    }
  });
}

TEST_F(FourRankTest, DonatedSoleOwnerIsSummedInPlaceOthersOutOfPlace) {
  cluster_.Run([&](uint32_t r) {
    GlooSession& s = cluster_.session(r);
    const float mine = static_cast<float>(r + 1);
    // Donated and sole owner: in place, the output is the same buffer.
    auto x = *HostTensor::FromVector<float>({3}, {mine, mine, mine});
    const uint8_t* buffer = x.data();
    auto in_place = s.AllReduceSum(CollectiveScope::World(),
                                   HostTensor::Donate(std::move(x)));
    ASSERT_TRUE(in_place.ok()) << in_place.status();
    ASSERT_TRUE(in_place->completion->Wait().ok());
    EXPECT_EQ(in_place->output.data(), buffer);
    EXPECT_EQ(ValuesOf<float>(in_place->output),
              (std::vector<float>{10, 10, 10}));
    // Donated, but a copy is still held: out of place, the copy intact.
    auto y = *HostTensor::FromVector<float>({2}, {mine, 2 * mine});
    HostTensor kept = y;
    auto out_of_place = s.AllReduceSum(CollectiveScope::World(),
                                       HostTensor::Donate(std::move(y)));
    ASSERT_TRUE(out_of_place.ok()) << out_of_place.status();
    ASSERT_TRUE(out_of_place->completion->Wait().ok());
    EXPECT_FALSE(out_of_place->output.SharesBufferWith(kept));
    EXPECT_EQ(ValuesOf<float>(out_of_place->output),
              (std::vector<float>{10, 20}));
    EXPECT_EQ(ValuesOf<float>(kept), (std::vector<float>{mine, 2 * mine}));
    // Not donated: out of place.
    auto z = *HostTensor::FromVector<float>({1}, {mine});
    auto plain = s.AllReduceSum(CollectiveScope::World(), z);
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_TRUE(plain->completion->Wait().ok());
    EXPECT_FALSE(plain->output.SharesBufferWith(z));
    EXPECT_EQ(ValuesOf<float>(z)[0], mine);
    EXPECT_FALSE(plain->output.donated());
  });
}

TEST_F(FourRankTest, AllReduceSumOnSubgroups) {
  cluster_.Run([&](uint32_t r) {
    GlooSession& s = cluster_.session(r);
    const CollectiveGroupId tensor = r < 2 ? 2 : 3;
    const CollectiveGroupId data = r % 2 == 0 ? 12 : 13;
    auto t = s.AllReduceSum(CollectiveScope::Group(tensor),
                            *HostTensor::FromVector<int32_t>({1}, {int(r)}));
    auto d = s.AllReduceSum(CollectiveScope::Group(data),
                            *HostTensor::FromVector<int32_t>({1}, {int(r)}));
    ASSERT_TRUE(t.ok() && d.ok());
    ASSERT_TRUE(t->completion->Wait().ok());
    ASSERT_TRUE(d->completion->Wait().ok());
    EXPECT_EQ(ValuesOf<int32_t>(t->output)[0], r < 2 ? 1 : 5);
    EXPECT_EQ(ValuesOf<int32_t>(d->output)[0], r % 2 == 0 ? 2 : 4);
  });
}

TEST_F(FourRankTest, AllGatherInMemberOrder) {
  cluster_.Run([&](uint32_t r) {
    GlooSession& s = cluster_.session(r);
    std::vector<int32_t> mine;
    for (int i = 0; i < 6; ++i) mine.push_back(int(r) * 100 + i);
    auto g = s.AllGather(CollectiveScope::World(),
                         *HostTensor::FromVector<int32_t>({2, 3}, mine));
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(g->completion->Wait().ok());
    EXPECT_EQ(g->output.descriptor().shape(), (std::vector<size_t>{8, 3}));
    std::vector<int32_t> want;
    for (int m = 0; m < 4; ++m) {
      for (int i = 0; i < 6; ++i) want.push_back(m * 100 + i);
    }
    EXPECT_EQ(ValuesOf<int32_t>(g->output), want);
    // A scalar gathers into a vector of the members' values.
    auto scalar = s.AllGather(CollectiveScope::Group(r % 2 == 0 ? 12 : 13),
                              *HostTensor::FromVector<double>({}, {r * 0.5}));
    ASSERT_TRUE(scalar.ok()) << scalar.status();
    ASSERT_TRUE(scalar->completion->Wait().ok());
    EXPECT_EQ(scalar->output.descriptor().shape(), (std::vector<size_t>{2}));
    const double first = (r % 2) * 0.5;  // members {0,2} or {1,3}
    EXPECT_EQ(ValuesOf<double>(scalar->output),
              (std::vector<double>{first, first + 1.0}));
  });
}

// counts[s][d]: rows member s sends member d. Rank 1 sends nothing.
constexpr size_t kCounts[4][4] = {
    {1, 2, 0, 3}, {0, 0, 0, 0}, {2, 1, 1, 0}, {0, 4, 2, 1}};

TEST_F(FourRankTest, AllToAllVAsymmetricWithASilentRank) {
  cluster_.Run([&](uint32_t r) {
    GlooSession& s = cluster_.session(r);
    std::vector<size_t> send(4), receive(4);
    std::vector<int64_t> rows;  // 2 columns: (source*100 + dest*10 + k, -k)
    for (size_t d = 0; d < 4; ++d) {
      send[d] = kCounts[r][d];
      receive[d] = kCounts[d][r];
      for (size_t k = 0; k < send[d]; ++k) {
        rows.push_back(int64_t(r) * 100 + int64_t(d) * 10 + int64_t(k));
        rows.push_back(-int64_t(k));
      }
    }
    size_t total_send = 0;
    for (size_t c : send) total_send += c;
    auto input = *HostTensor::FromRows<int64_t>(total_send, {2}, rows);
    auto a = s.AllToAllV(CollectiveScope::World(), input, send, receive);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(a->completion->Wait().ok());
    std::vector<int64_t> want;
    for (size_t src = 0; src < 4; ++src) {
      for (size_t k = 0; k < kCounts[src][r]; ++k) {
        want.push_back(int64_t(src) * 100 + int64_t(r) * 10 + int64_t(k));
        want.push_back(-int64_t(k));
      }
    }
    EXPECT_EQ(ValuesOf<int64_t>(a->output), want) << "rank " << r;
    EXPECT_EQ(a->output.descriptor().rows(), want.size() / 2);
  });
}

TEST_F(FourRankTest, AllToAllVAllZero) {
  cluster_.Run([&](uint32_t r) {
    auto empty = *HostTensor::FromRows<float>(0, {3}, {});
    std::vector<size_t> zeros(4, 0);
    auto a = cluster_.session(r).AllToAllV(CollectiveScope::World(), empty,
                                           zeros, zeros);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(a->completion->Wait().ok());
    EXPECT_EQ(a->output.descriptor().shape(), (std::vector<size_t>{0, 3}));
  });
}

TEST_F(FourRankTest, AllToAllVCountDisagreementFailsEveryMember) {
  cluster_.Run([&](uint32_t r) {
    GlooSession& s = cluster_.session(r);
    std::vector<size_t> send = {1, 1, 1, 1}, receive = {1, 1, 1, 1};
    if (r == 2) receive[0] = 2;  // member 0 sends it 1 row only
    size_t received_rows = 0;
    for (size_t c : receive) received_rows += c;
    auto input = *HostTensor::FromRows<float>(4, {}, {1, 2, 3, 4});
    auto a = s.AllToAllV(CollectiveScope::World(), input, send, receive);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::Status status = a->completion->Wait();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(
        absl::StrContains(status.message(), "member 0 (rank 0) sends 1"))
        << status;
    // Every member failed at the same point: the session stays usable.
    EXPECT_TRUE(s.backend().poison().ok());
    auto sum = s.AllReduceSum(CollectiveScope::World(),
                              *HostTensor::FromVector<int32_t>({1}, {1}));
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok());
    EXPECT_EQ(ValuesOf<int32_t>(sum->output)[0], 4);
    (void)received_rows;
  });
}

// A shape disagreement on all_reduce_sum: rank 3 sums 3 elements, the
// others 2.
absl::Status SumWithRank3Disagreeing(GlooSession& s, uint32_t r) {
  std::vector<float> values(r == 3 ? 3 : 2, 1.0f);
  auto sum =
      s.AllReduceSum(CollectiveScope::World(),
                     *HostTensor::FromVector<float>({values.size()}, values));
  if (!sum.ok()) return sum.status();
  return sum->completion->Wait();
}

TEST(DisagreementTest, WithVerifyAgreementEveryMemberFailsAtOnce) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.verify_agreement = true;
  GlooTestCluster cluster({2, 1, 1, 2}, 4, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    GlooSession& s = cluster.session(r);
    absl::Status status = SumWithRank3Disagreeing(s, r);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "disagree")) << status;
    // Every member failed at the same point: the session stays usable.
    EXPECT_TRUE(s.backend().poison().ok());
  });
}

// all_to_all_v's check also exchanges every member's counts, more words
// than any other check: a member at all_reduce_sum where another is at
// all_to_all_v must still be told at once, not sent more bytes than it
// posted for (which ended the process on Gloo's I/O thread).
TEST(DisagreementTest, WithVerifyAgreementAllToAllVAgainstASumFailsAtOnce) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.verify_agreement = true;
  GlooTestCluster cluster({2, 1, 1, 2}, 4, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    GlooSession& s = cluster.session(r);
    absl::StatusOr<GlooSession::ValueSubmission> submitted;
    if (r == 3) {
      submitted = s.AllToAllV(
          CollectiveScope::World(),
          *HostTensor::FromVector<float>({4}, {1.0f, 2.0f, 3.0f, 4.0f}),
          {1, 1, 1, 1}, {1, 1, 1, 1});
    } else {
      submitted = s.AllReduceSum(CollectiveScope::World(),
                                 *HostTensor::FromVector<float>({1}, {1.0f}));
    }
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    const absl::Status status = submitted->completion->Wait();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "disagree")) << status;
    EXPECT_TRUE(s.backend().poison().ok());
    // And the session still works: all agree now.
    auto sum = s.AllReduceSum(CollectiveScope::World(),
                              *HostTensor::FromVector<float>({1}, {1.0f}));
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok()) << sum->completion->Wait();
    EXPECT_EQ(ValuesOf<float>(sum->output)[0], 4.0f);
  });
}

TEST(DisagreementTest,
     WithoutVerifyTheyNeverPairAndTheErrorSaysWhoSubmittedWhat) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  ASSERT_FALSE(options.verify_agreement);  // the default
  options.op_timeout = absl::Seconds(1);
  GlooTestCluster cluster({2, 1, 1, 2}, 4, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    GlooSession& s = cluster.session(r);
    // Agreeing operations first, so the disagreement is operation #1.
    auto agreed = s.AllReduceSum(CollectiveScope::World(),
                                 *HostTensor::FromVector<float>({1}, {1.0f}));
    ASSERT_TRUE(agreed.ok()) << agreed.status();
    ASSERT_TRUE(agreed->completion->Wait().ok());
    EXPECT_EQ(ValuesOf<float>(agreed->output)[0], 4.0f);

    const absl::Time start = absl::Now();
    absl::Status status = SumWithRank3Disagreeing(s, r);
    EXPECT_LT(absl::Now() - start, absl::Seconds(15));
    // Found after op_timeout: the session is poisoned, so not
    // InvalidArgument (refused, still usable) but FailedPrecondition.
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_TRUE(absl::StrContains(status.message(),
                                  "members disagree on operation #1 on world"))
        << status;
    EXPECT_TRUE(absl::StrContains(
        status.message(), "ranks 0-2 submitted `all_reduce_sum f32[2]`"))
        << status;
    EXPECT_TRUE(absl::StrContains(status.message(),
                                  "rank 3 submitted `all_reduce_sum f32[3]`"))
        << status;
    // No payload moved, but the transport timed out: poisoned.
    EXPECT_FALSE(s.backend().poison().ok());
  });
}

TEST(DisagreementTest, AMemberThatNeverSubmitsIsNamed) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.op_timeout = absl::Seconds(1);
  options.failure_attribution_grace = absl::Milliseconds(500);
  GlooTestCluster cluster({2, 1, 1, 2}, 4, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    if (r == 2) return;  // rank 2 never calls
    absl::Status status =
        cluster.session(r)
            .AllReduceSum(CollectiveScope::World(),
                          *HostTensor::FromVector<float>({1}, {1.0f}))
            ->completion->Wait();
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_TRUE(absl::StrContains(
        status.message(), "rank 2 did not report operation #0 on world"))
        << status;
  });
}

TEST_F(FourRankTest, SendReceiveAlongTheDataGroups) {
  cluster_.Run([&](uint32_t r) {
    GlooSession& s = cluster_.session(r);
    const CollectiveScope data = CollectiveScope::Group(r % 2 == 0 ? 12 : 13);
    auto desc = *ValueDescriptor::Create({2, 2}, TensorDtype::kU32);
    if (r < 2) {  // member 0 of its data group: sends twice to member 1
      for (uint32_t k = 0; k < 2; ++k) {
        auto t =
            *HostTensor::FromVector<uint32_t>({2, 2}, {r, k, r + 10, k + 10});
        auto sent = s.Send(data, 1, t);
        ASSERT_TRUE(sent.ok()) << sent.status();
        ASSERT_TRUE(sent->completion->Wait().ok());
        EXPECT_TRUE(sent->output.SharesBufferWith(t));
      }
    } else {
      for (uint32_t k = 0; k < 2; ++k) {
        auto got = s.Receive(data, 0, desc);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_TRUE(got->completion->Wait().ok());
        const uint32_t from = r - 2;
        EXPECT_EQ(ValuesOf<uint32_t>(got->output),
                  (std::vector<uint32_t>{from, k, from + 10, k + 10}));
      }
    }
  });
}

// A decode loop on caller-owned outputs: every step's results land in the
// same tensors, with exact values, and the loop makes no tensor buffer at
// all (the pool's request counter is process-wide, so it sees all four
// ranks). The allocating forms, run once afterwards, do show up on it.
TEST_F(FourRankTest, CallerOwnedOutputsAllocateNothingPerStep) {
  struct Buffers {
    HostTensor activations, gathered, exchanged_in, exchanged_out;
  };
  auto zeros = [](std::vector<size_t> shape, TensorDtype dtype) {
    return HostTensor::Zeros(*ValueDescriptor::Create(std::move(shape), dtype));
  };
  std::vector<Buffers> buffers;
  for (uint32_t r = 0; r < 4; ++r) {
    buffers.push_back(
        {zeros({4}, TensorDtype::kF32), zeros({8}, TensorDtype::kF32),
         zeros({4, 2}, TensorDtype::kI32), zeros({4, 2}, TensorDtype::kI32)});
  }
  const std::vector<size_t> counts = {1, 1, 1, 1};
  constexpr int kSteps = 20;
  auto step = [&](uint32_t r, int k) {
    GlooSession& s = cluster_.session(r);
    Buffers& b = buffers[r];
    const CollectiveScope world = CollectiveScope::World();
    const CollectiveScope tensor = CollectiveScope::Group(r < 2 ? 2 : 3);
    const CollectiveScope data = CollectiveScope::Group(r % 2 == 0 ? 12 : 13);
    // In place: the activations are summed where they are.
    auto values = *b.activations.MutableValues<float>();
    for (size_t i = 0; i < 4; ++i) values[i] = static_cast<float>(r + k + i);
    auto sum = s.AllReduceSumInto(world, b.activations, b.activations);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok());
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_EQ(values[i], static_cast<float>(6 + 4 * (k + i)));
    }
    // Into a separate output: the tensor group's two members, member order.
    auto gathered = s.AllGatherInto(tensor, b.activations, b.gathered);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    ASSERT_TRUE(gathered->completion->Wait().ok());
    EXPECT_EQ(ValuesOf<float>(b.gathered)[4], values[0]);
    auto rows = *b.exchanged_in.MutableValues<int32_t>();
    for (size_t d = 0; d < 4; ++d) {
      rows[2 * d] = static_cast<int32_t>(r);
      rows[2 * d + 1] = k;
    }
    auto exchanged =
        s.AllToAllVInto(world, b.exchanged_in, counts, counts, b.exchanged_out);
    ASSERT_TRUE(exchanged.ok()) << exchanged.status();
    ASSERT_TRUE(exchanged->completion->Wait().ok());
    EXPECT_EQ(ValuesOf<int32_t>(b.exchanged_out),
              (std::vector<int32_t>{0, k, 1, k, 2, k, 3, k}));
    // Point-to-point along the data group into the caller's tensor.
    if (r < 2) {
      auto sent = s.Send(data, 1, b.exchanged_out);
      ASSERT_TRUE(sent.ok()) << sent.status();
      ASSERT_TRUE(sent->completion->Wait().ok());
    } else {
      auto got = s.ReceiveInto(data, 0, b.exchanged_out);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(got->completion->Wait().ok());
      EXPECT_TRUE(got->output.SharesBufferWith(b.exchanged_out));
    }
  };
  cluster_.Run([&](uint32_t r) { step(r, 0); });  // warm-up
  const uint64_t before = HostBufferPool::Default().GetStats().requests;
  cluster_.Run([&](uint32_t r) {
    for (int k = 1; k <= kSteps; ++k) step(r, k);
  });
  EXPECT_EQ(HostBufferPool::Default().GetStats().requests - before, 0u)
      << "tensor buffers made during " << kSteps << " steps";
  // The counter does see the allocating forms: one output per rank.
  const uint64_t plain_before = HostBufferPool::Default().GetStats().requests;
  cluster_.Run([&](uint32_t r) {
    auto sum = cluster_.session(r).AllReduceSum(CollectiveScope::World(),
                                                buffers[r].activations);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok());
  });
  EXPECT_GE(HostBufferPool::Default().GetStats().requests - plain_before, 4u);
}

// A ring in one call per member (send to the next, receive from the
// previous) and a swap between two members, with no even/odd ordering; a
// batch entry also pairs with the peer's plain Send.
TEST_F(FourRankTest, BatchedSendReceiveRunsARingAndASwap) {
  cluster_.Run([&](uint32_t r) {
    GlooSession& s = cluster_.session(r);
    const CollectiveScope world = CollectiveScope::World();
    auto desc = *ValueDescriptor::Create({2}, TensorDtype::kU32);
    const uint32_t next = (r + 1) % 4, prev = (r + 3) % 4;
    auto mine = *HostTensor::FromVector<uint32_t>({2}, {r, 10 * r});
    HostTensor from_prev = HostTensor::Zeros(desc);
    const std::vector<PeerValue<HostTensor>> sends = {{next, mine}};
    const std::vector<PeerValue<HostTensor>> receives = {{prev, from_prev}};
    auto ring = s.BatchSendReceive(world, sends, receives);
    ASSERT_TRUE(ring.ok()) << ring.status();
    ASSERT_TRUE(ring->completion->Wait().ok());
    ASSERT_EQ(ring->output.size(), 1u);
    EXPECT_TRUE(ring->output[0].SharesBufferWith(from_prev));
    EXPECT_EQ(ValuesOf<uint32_t>(from_prev),
              (std::vector<uint32_t>{prev, 10 * prev}));
    // Swap within the tensor group (members 0 and 1), both directions in
    // one batch.
    const CollectiveScope tensor = CollectiveScope::Group(r < 2 ? 2 : 3);
    const size_t other = r % 2 == 0 ? 1 : 0;
    HostTensor theirs = HostTensor::Zeros(desc);
    const std::vector<PeerValue<HostTensor>> swap_send = {{other, mine}};
    const std::vector<PeerValue<HostTensor>> swap_receive = {{other, theirs}};
    auto swap = s.BatchSendReceive(tensor, swap_send, swap_receive);
    ASSERT_TRUE(swap.ok()) << swap.status();
    ASSERT_TRUE(swap->completion->Wait().ok());
    const uint32_t partner = r % 2 == 0 ? r + 1 : r - 1;
    EXPECT_EQ(ValuesOf<uint32_t>(theirs),
              (std::vector<uint32_t>{partner, 10 * partner}));
    // Mixed: even ranks batch a receive, odd ranks answer with a plain Send.
    const CollectiveScope data = CollectiveScope::Group(r % 2 == 0 ? 12 : 13);
    if (r < 2) {
      HostTensor got = HostTensor::Zeros(desc);
      const std::vector<PeerValue<HostTensor>> in = {{1, got}};
      auto batch = s.BatchSendReceive(data, {}, in);
      ASSERT_TRUE(batch.ok()) << batch.status();
      ASSERT_TRUE(batch->completion->Wait().ok());
      EXPECT_EQ(ValuesOf<uint32_t>(got),
                (std::vector<uint32_t>{r + 2, 10 * (r + 2)}));
    } else {
      auto sent = s.Send(data, 0, mine);
      ASSERT_TRUE(sent.ok()) << sent.status();
      ASSERT_TRUE(sent->completion->Wait().ok());
    }
    // Refused before anything runs.
    const std::vector<PeerValue<HostTensor>> to_self = {{r, mine}};
    EXPECT_EQ(s.BatchSendReceive(world, to_self, {}).status().code(),
              absl::StatusCode::kInvalidArgument);
    const std::vector<PeerValue<HostTensor>> twice = {{next, from_prev},
                                                      {prev, from_prev}};
    EXPECT_EQ(s.BatchSendReceive(world, {}, twice).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.BatchSendReceive(world, receives, receives).status().code(),
              absl::StatusCode::kInvalidArgument);
  });
}

// With verify_agreement, a batch entry whose ends disagree fails on both
// ends, naming the transfer, while the batch's other transfers still move.
TEST(BatchDisagreementTest, TheDisagreeingTransferIsNamedTheOthersMove) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.verify_agreement = true;
  GlooTestCluster cluster({1, 1, 1, 3}, 3, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    GlooSession& s = cluster.session(r);
    const CollectiveScope world = CollectiveScope::World();
    auto u32 = *ValueDescriptor::Create({2}, TensorDtype::kU32);
    auto f32 = *ValueDescriptor::Create({2}, TensorDtype::kF32);
    if (r == 0) {  // receives u32[2] from 1 and from 2
      HostTensor a = HostTensor::Zeros(u32), b = HostTensor::Zeros(u32);
      const std::vector<PeerValue<HostTensor>> in = {{1, a}, {2, b}};
      auto batch = s.BatchSendReceive(world, {}, in);
      ASSERT_TRUE(batch.ok()) << batch.status();
      absl::Status done = batch->completion->Wait();
      EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument) << done;
      EXPECT_TRUE(absl::StrContains(done.message(), "receive from member 2"))
          << done;
      EXPECT_EQ(ValuesOf<uint32_t>(a), (std::vector<uint32_t>{1, 1}));
    } else {
      HostTensor t = r == 1 ? *HostTensor::FromVector<uint32_t>({2}, {1, 1})
                            : HostTensor::Zeros(f32);  // rank 2 disagrees
      const std::vector<PeerValue<HostTensor>> out = {{0, t}};
      auto batch = s.BatchSendReceive(world, out, {});
      ASSERT_TRUE(batch.ok()) << batch.status();
      absl::Status done = batch->completion->Wait();
      EXPECT_EQ(done.ok(), r == 1) << done;
    }
    EXPECT_TRUE(s.backend().poison().ok());
  });
}

TEST_F(FourRankTest, AllGatherWordsIsRankMajor) {
  cluster_.Run([&](uint32_t r) {
    auto words =
        cluster_.session(r).AllGatherWords(std::vector<uint32_t>{r, r * r});
    ASSERT_TRUE(words.ok()) << words.status();
    EXPECT_EQ(*words, (std::vector<uint32_t>{0, 0, 1, 1, 2, 4, 3, 9}));
    auto pending = cluster_.session(r).SubmitAllGatherWords(
        std::vector<uint32_t>{7 + r}, absl::Seconds(10));
    ASSERT_TRUE(pending.ok()) << pending.status();
    auto result = (*pending)->Result();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(*result, (std::vector<uint32_t>{7, 8, 9, 10}));
  });
}

TEST(RendezvousKeysTest, KeysArePrefixedByNamespaceInstanceAndGroup) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.instance = 3;
  GlooTestCluster cluster({2, 1, 1, 1}, 2, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  bool world = false, tensor = false;
  for (const std::string& owned : cluster.job().Keys()) {
    // Each member's addresses are its own key ("r<rank>/", OwnedKey).
    absl::string_view key = owned;
    EXPECT_TRUE(absl::ConsumePrefix(&key, "r0/") ||
                absl::ConsumePrefix(&key, "r1/"))
        << owned;
    EXPECT_TRUE(absl::StartsWith(key, "gloo/job@1/i3/")) << key;
    world |= absl::StartsWith(key, "gloo/job@1/i3/1/");
    tensor |= absl::StartsWith(key, "gloo/job@1/i3/2/");
  }
  EXPECT_TRUE(world);
  EXPECT_TRUE(tensor);
  EXPECT_EQ(internal::RankdStore::Prefix("j@7", 0, "5"), "gloo/j@7/5/");
}

// A full-mesh connect waits for each member's addresses and then reads
// them: the store reads each key from the broker once, and a later get
// reads it again.
TEST(RendezvousKeysTest, WaitThenGetReadsEachKeyFromTheBrokerOnce) {
  std::shared_ptr<InProcessJob> job = InProcessJob::Create(2, "job@1");
  std::unique_ptr<ControlPlane> rank0 = job->ForRank(0);
  std::unique_ptr<ControlPlane> rank1 = job->ForRank(1);
  const std::string prefix = internal::RankdStore::Prefix("job@1", 0, "2");
  internal::RankdStore store0(rank0.get(), prefix, absl::Seconds(5), {0, 1});
  internal::RankdStore store1(rank1.get(), prefix, absl::Seconds(5), {0, 1});
  store1.set("1", {'a', 'b'});
  const int before = job->kv_gets();
  store0.wait({"1"});
  EXPECT_EQ(store0.get("1"), std::vector<char>({'a', 'b'}));
  EXPECT_EQ(job->kv_gets() - before, 1);
  EXPECT_EQ(store0.get("1"), std::vector<char>({'a', 'b'}));
  EXPECT_EQ(job->kv_gets() - before, 2);
}

// Sessions a rank opens one after another number themselves (instance
// unset): the second one rendezvouses under keys of its own, so a rank that
// opens it while its peer is still late never reads the first session's
// (closed) addresses.
TEST(RendezvousKeysTest, SessionsOpenedOneAfterAnotherGetKeysOfTheirOwn) {
  GlooTestCluster cluster({2, 1, 1, 1}, 2);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  for (const std::string& key : cluster.job().Keys()) {
    EXPECT_FALSE(absl::StrContains(key, "gloo/job@1/i")) << key;
  }
  cluster.DestroySession(0);
  cluster.DestroySession(1);
  std::vector<std::unique_ptr<ControlPlane>> control_planes;
  for (uint32_t r = 0; r < 2; ++r) {
    control_planes.push_back(cluster.job().ForRank(r));
  }
  std::vector<std::unique_ptr<GlooSession>> second(2);
  cluster.Run([&](uint32_t r) {
    if (r == 1) absl::SleepFor(absl::Milliseconds(300));  // late
    auto descriptor =
        DistributedSessionDescriptor::FromTopology({2, 1, 1, 1}, 2, r);
    ASSERT_TRUE(descriptor.ok()) << descriptor.status();
    auto session = GlooSession::Open(*descriptor, control_planes[r].get(),
                                     GlooTestCluster::DefaultOptions());
    ASSERT_TRUE(session.ok()) << session.status();
    auto sum = (*session)->AllReduceSum(
        CollectiveScope::World(),
        *HostTensor::FromVector<float>({2}, {1.0f + r, 2.0f + r}));
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok());
    EXPECT_EQ(*sum->output.Values<float>(),
              absl::MakeConstSpan(std::vector<float>{3, 5}));
    second[r] = *std::move(session);
  });
  bool second_keys = false;
  for (const std::string& key : cluster.job().Keys()) {
    second_keys |= absl::StrContains(key, "/gloo/job@1/i1/1/");
  }
  EXPECT_TRUE(second_keys);
}

// all_reduce_sum's plans (GlooSessionOptions::all_reduce_bcube_max_bytes,
// all_reduce_ring_segment_bytes): bcube, the ring with Gloo's segments and
// the ring with many small segments, on 2, 3, 4 and 6 members (bcube in
// one or several pairwise steps, or a direct step for what remains), with
// fewer elements than members and with many, in place and out of place,
// give exact sums.
TEST(AllReducePlanTest, EveryPlanGivesExactSums) {
  struct Plan {
    const char* name;
    size_t bcube_max_bytes;
    size_t ring_segment_bytes;
  };
  for (uint32_t members : {2u, 3u, 4u, 6u}) {
    for (const Plan& plan : {Plan{"bcube", size_t{1} << 20, size_t{8} << 20},
                             Plan{"ring", 0, size_t{1} << 20},
                             Plan{"ring, 64 B segments", 0, 64}}) {
      SCOPED_TRACE(absl::StrCat(members, " members, ", plan.name));
      GlooSessionOptions options = GlooTestCluster::DefaultOptions();
      options.all_reduce_bcube_max_bytes = plan.bcube_max_bytes;
      options.all_reduce_ring_segment_bytes = plan.ring_segment_bytes;
      GlooTestCluster cluster({1, 1, 1, members}, members, options);
      ASSERT_TRUE(cluster.status().ok()) << cluster.status();
      for (size_t elements : {size_t{1}, size_t{1001}}) {
        cluster.Run([&](uint32_t r) {
          std::vector<int32_t> mine(elements), want(elements);
          for (size_t i = 0; i < elements; ++i) {
            mine[i] = static_cast<int32_t>(r * 100000 + i);
            want[i] = static_cast<int32_t>(
                100000 * members * (members - 1) / 2 + members * i);
          }
          HostTensor input = *HostTensor::FromVector<int32_t>({elements}, mine);
          auto copy =
              cluster.session(r).AllReduceSum(CollectiveScope::World(), input);
          ASSERT_TRUE(copy.ok()) << copy.status();
          ASSERT_TRUE(copy->completion->Wait().ok());
          EXPECT_EQ(ValuesOf<int32_t>(copy->output), want);
          EXPECT_EQ(ValuesOf<int32_t>(input), mine);  // out of place
          auto in_place = cluster.session(r).AllReduceSum(
              CollectiveScope::World(), HostTensor::Donate(std::move(input)));
          ASSERT_TRUE(in_place.ok()) << in_place.status();
          ASSERT_TRUE(in_place->completion->Wait().ok());
          EXPECT_EQ(ValuesOf<int32_t>(in_place->output), want);
        });
      }
    }
  }
}

// Members whose all_reduce plan options differ never pair (each computes
// the ring's segments, or the algorithm, from its own options), and are
// told apart: refused at once with verify_agreement, named by the
// diagnosis at op_timeout without it.
TEST(AllReducePlanTest, MembersWhosePlanOptionsDifferAreToldApart) {
  for (bool verify : {true, false}) {
    SCOPED_TRACE(verify ? "verify_agreement" : "fingerprint tags only");
    GlooSessionOptions options = GlooTestCluster::DefaultOptions();
    options.verify_agreement = verify;
    options.op_timeout = absl::Seconds(1);
    options.failure_attribution_grace = absl::Milliseconds(500);
    GlooSessionOptions ring_only = options;
    ring_only.all_reduce_bcube_max_bytes = 0;
    GlooTestCluster cluster({1, 1, 1, 2}, {options, ring_only});
    ASSERT_TRUE(cluster.status().ok()) << cluster.status();
    cluster.Run([&](uint32_t r) {
      auto sum = cluster.session(r).AllReduceSum(
          CollectiveScope::World(),
          *HostTensor::FromVector<float>({4}, {1, 2, 3, 4}));
      ASSERT_TRUE(sum.ok()) << sum.status();
      absl::Status status = sum->completion->Wait();
      // Refused before the payload (usable), or found at op_timeout
      // (poisoned: never InvalidArgument).
      EXPECT_EQ(status.code(), verify ? absl::StatusCode::kInvalidArgument
                                      : absl::StatusCode::kFailedPrecondition)
          << status;
      const std::string mine =
          r == 0 ? "all_reduce_sum f32[4]`"
                 : "all_reduce_sum f32[4] (all_reduce_bcube_max_bytes 0, "
                   "all_reduce_ring_segment_bytes 8388608)`";
      EXPECT_TRUE(absl::StrContains(status.message(), mine)) << status;
      if (verify) {
        // The check compares fingerprints: each member knows its own text.
        EXPECT_TRUE(absl::StrContains(
            status.message(),
            absl::StrCat("rank ", 1 - r, " submitted another one")))
            << status;
      } else {
        // The diagnosis reads the other member's report: both texts.
        EXPECT_TRUE(absl::StrContains(
            status.message(), "rank 0 submitted `all_reduce_sum f32[4]`"))
            << status;
        EXPECT_TRUE(absl::StrContains(
            status.message(),
            "rank 1 submitted `all_reduce_sum f32[4] "
            "(all_reduce_bcube_max_bytes 0, all_reduce_ring_segment_bytes "
            "8388608)`"))
            << status;
      }
    });
  }
}

// Validation can differ between members (an output of the wrong shape,
// counts that do not add up on one rank only). Members that check agreement
// before the payload wait for every member's record, so a member that
// refuses on its own arguments still sends one saying so: its peers refuse
// the operation at once, naming it, instead of waiting for op_timeout, and
// the session stays usable on all.
TEST(RefusalTest, AMemberThatRefusesItsOwnArgumentsIsNamedByItsPeers) {
  for (bool verify : {true, false}) {
    SCOPED_TRACE(verify ? "verify_agreement" : "default options");
    GlooSessionOptions options = GlooTestCluster::DefaultOptions();
    options.verify_agreement = verify;
    options.op_timeout = absl::Seconds(60);
    GlooTestCluster cluster({1, 1, 1, 2}, 2, options);
    ASSERT_TRUE(cluster.status().ok()) << cluster.status();
    cluster.Run([&](uint32_t r) {
      GlooSession& s = cluster.session(r);
      const CollectiveScope world = CollectiveScope::World();
      const absl::Time start = absl::Now();
      auto refused_here = [](const absl::Status& refused, absl::string_view why,
                             absl::string_view told) {
        EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument)
            << refused;
        EXPECT_TRUE(absl::StrContains(refused.message(), why)) << refused;
        EXPECT_TRUE(absl::StrContains(refused.message(), told)) << refused;
      };
      auto named = [](const absl::Status& waited) {
        EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument) << waited;
        EXPECT_TRUE(absl::StrContains(waited.message(),
                                      "rank 0 refused it on its own arguments"))
            << waited;
      };
      if (verify) {
        // A collective: rank 0's output has the wrong shape.
        auto x = *HostTensor::FromVector<float>({2}, {1, 2});
        auto sum = r == 0
                       ? s.AllReduceSumInto(
                             world, x,
                             HostTensor::Uninitialized(*ValueDescriptor::Create(
                                 {3}, TensorDtype::kF32)))
                       : s.AllReduceSum(world, x);
        if (r == 0) {
          ASSERT_FALSE(sum.ok());
          refused_here(sum.status(), "f32[3]",
                       "the other members of world are told");
        } else {
          ASSERT_TRUE(sum.ok()) << sum.status();
          named(sum->completion->Wait());
        }
        // A transfer: rank 0's two outputs share a buffer.
        GlooBackend& backend = s.backend();
        auto out = *HostTensor::FromVector<float>({2}, {-1, -1});
        if (r == 0) {
          auto route = backend.Route(backend.world(), 1, 0);
          ASSERT_TRUE(route.ok()) << route.status();
          const std::vector<HostTensor> outputs = {out, out};
          auto received =
              backend.ReceiveBundleInto(outputs, *route, backend.executor());
          ASSERT_FALSE(received.ok());
          refused_here(received.status(),
                       "send_receive on route 1->0 in world: output 1 "
                       "overlaps output 0 of the bundle",
                       "is told and refuses it too");
        } else {
          auto route = backend.Route(backend.world(), 1, 0);
          ASSERT_TRUE(route.ok()) << route.status();
          const std::vector<HostTensor> sent = {x, x};
          auto sending = backend.SendReceive(sent, *route, backend.executor());
          ASSERT_TRUE(sending.ok()) << sending.status();
          absl::Status waited = sending->completion->Wait();
          EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument)
              << waited;
          EXPECT_TRUE(absl::StrContains(
              waited.message(),
              "the send to member 0 (rank 0): this end has `bundle(f32[2], "
              "f32[2])`, the other end refused it on its own arguments"))
              << waited;
        }
        // A batch whose buffers are wrong: rank 0's two receives write the
        // same bytes. Rank 1's sends are told, as on NCCL.
        if (r == 0) {
          const std::vector<PeerValue<HostTensor>> twice = {{1, out}, {1, out}};
          auto refused = s.BatchSendReceive(world, {}, twice);
          ASSERT_FALSE(refused.ok());
          refused_here(refused.status(),
                       "receive 1 overlaps the output of receive 0",
                       " (the other members of world are told and refuse it "
                       "too)");
        } else {
          const std::vector<PeerValue<HostTensor>> two = {{0, x}, {0, x}};
          auto sent = s.BatchSendReceive(world, two, {});
          ASSERT_TRUE(sent.ok()) << sent.status();
          absl::Status waited = sent->completion->Wait();
          EXPECT_EQ(waited.code(), absl::StatusCode::kInvalidArgument)
              << waited;
          EXPECT_TRUE(absl::StrContains(
              waited.message(),
              "the send to member 0 (rank 0): this end has `bundle(f32[2])`, "
              "the other end refused it on its own arguments"))
              << waited;
        }
      }
      // all_to_all_v checks its counts first whatever the options: rank 0
      // sends 3 rows of its 2.
      auto rows = *HostTensor::FromVector<float>({2}, {1, 2});
      const std::vector<size_t> send =
          r == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{1, 1};
      auto moved = s.AllToAllV(world, rows, send, {1, 1});
      if (r == 0) {
        ASSERT_FALSE(moved.ok());
        refused_here(moved.status(), "send counts add up to 3",
                     "are told and refuse it too");
      } else {
        ASSERT_TRUE(moved.ok()) << moved.status();
        named(moved->completion->Wait());
      }
      // Refusals took no deadline, and agreeing work still runs.
      EXPECT_LT(absl::Now() - start, absl::Seconds(20));
      EXPECT_TRUE(s.backend().poison().ok());
      auto good = s.AllReduceSum(world, *HostTensor::FromVector<float>(
                                            {2}, {1, static_cast<float>(r)}));
      ASSERT_TRUE(good.ok()) << good.status();
      ASSERT_TRUE(good->completion->Wait().ok());
      EXPECT_EQ(ValuesOf<float>(good->output), (std::vector<float>{2, 1}));
    });
  }
}

}  // namespace
}  // namespace rankd::dataplane::gloo
