// GlooBackend (CommunicationBackend on Gloo) unit tests: validation of each
// fine-grained operation, exact values of all eight operations with four
// ranks as threads over real Gloo TCP connections, and executors that
// overlap.
#include "dataplane/gloo/gloo_backend.h"

#include <cstdint>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "dataplane/gloo/testing/gloo_test_cluster.h"
#include "dataplane/peer_transfer.h"
#include "gtest/gtest.h"

namespace rankd::dataplane::gloo {
namespace {

using testing::GlooTestCluster;

template <typename T>
std::vector<T> ValuesOf(const HostTensor& t) {
  auto v = t.Values<T>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::vector<T>(v->begin(), v->end()) : std::vector<T>();
}

HostTensor I32(std::vector<size_t> shape, std::vector<int32_t> values) {
  return *HostTensor::FromVector<int32_t>(std::move(shape), values);
}

// TP2 x PP2: world {0..3}, tensor 2 {0,1} 3 {2,3}, pipeline 4 {0,2} 5 {1,3}.
class BackendTest : public ::testing::Test {
 protected:
  BackendTest() : cluster_({2, 2, 1, 1}, 4) {}
  void SetUp() override {
    ASSERT_TRUE(cluster_.status().ok()) << cluster_.status();
  }
  GlooBackend& backend(uint32_t r) { return cluster_.session(r).backend(); }
  GlooTestCluster cluster_;
};

TEST_F(BackendTest, ValidationBeforeAnyNativeWork) {
  GlooBackend& b = backend(0);
  GlooBackend& other = backend(1);
  GlooExecutor& e = b.executor();
  HostTensor x = I32({2, 3}, {1, 2, 3, 4, 5, 6});
  // Groups and executors of another backend are refused.
  EXPECT_EQ(b.AllReduceSum(x, other.world(), e).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.AllReduceSum(x, b.world(), other.executor()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Membership.
  EXPECT_EQ(b.group(3).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(b.group(2).ok());
  // Axis ranges.
  EXPECT_EQ(b.AllGatherEven(x, 2, b.world(), e).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.AllGatherUneven(x, {2, 2, 2, 2}, 5, b.world(), e).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Count lengths and this member's count.
  EXPECT_EQ(b.AllGatherUneven(x, {2, 2}, 0, b.world(), e).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto mine = b.AllGatherUneven(x, {3, 2, 2, 2}, 0, b.world(), e);
  EXPECT_EQ(mine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(mine.status().message(), "counts[0]"));
  // Broadcast root range.
  auto root = b.Broadcast(x, 4, b.world(), e);
  EXPECT_EQ(root.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(root.status().message(), "root"));
  // Bool has no sum.
  auto flags = *HostTensor::FromVector<bool>({1}, {true});
  EXPECT_EQ(b.AllReduceSum(flags, b.world(), e).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Routes: both ends members, distinct, and this rank one of them.
  GlooGroup& tp = **b.group(2);
  // The engine's words (dataplane/route.h), as NCCL's.
  EXPECT_EQ(
      b.Route(tp, 0, 2).status(),
      absl::InvalidArgumentError("gloo backend: opening a route: route rank 0 "
                                 "-> rank 2 on group 2: rank "
                                 "2 is not a member (its members: ranks 0-1)"));
  EXPECT_EQ(b.Route(tp, 1, 1).status(),
            absl::InvalidArgumentError(
                "gloo backend: opening a route: route rank 1 -> rank 1 on "
                "group 2: the source and the destination are the same member "
                "(rank 1)"));
  EXPECT_EQ(b.Route(b.world(), 1, 2).status(),
            absl::InvalidArgumentError(
                "gloo backend: opening a route: route rank 1 -> rank 2 on "
                "world: this member (0, rank 0) is neither end"));
  EXPECT_TRUE(b.Route(tp, 0, 1).ok());
  EXPECT_EQ(b.Route(other.world(), 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Bundles: only the destination receives, and the engine's bundle rules
  // (dataplane/bundle.h), as NCCL's.
  auto outbound = b.Route(b.world(), 0, 1);
  ASSERT_TRUE(outbound.ok()) << outbound.status();
  const std::vector<ValueDescriptor> one = {x.descriptor()};
  EXPECT_EQ(b.ReceiveBundle(one, *outbound, e).status(),
            absl::InvalidArgumentError(
                "gloo backend: receive_bundle: route 0 -> 1 on world: this "
                "member (0, rank 0) is not its destination"));
  EXPECT_EQ(b.ReceiveBundleInto({x}, *outbound, e).status(),
            absl::InvalidArgumentError(
                "gloo backend: receive_bundle_into: route 0 -> 1 on world: "
                "this member (0, rank 0) is not its destination"));
  auto inbound = b.Route(b.world(), 1, 0);
  ASSERT_TRUE(inbound.ok()) << inbound.status();
  const std::vector<ValueDescriptor> many(kMaxBundleTensors + 1,
                                          x.descriptor());
  EXPECT_EQ(b.ReceiveBundle(many, *inbound, e).status(),
            absl::InvalidArgumentError(
                "gloo backend: send_receive on route 1->0 in world: a bundle "
                "holds at most 60000 tensors; got 60001"));
  // Local dependencies: null values are refused.
  const HostTensor* none[] = {nullptr};
  EXPECT_EQ(GlooBackend::SubmitLocalDependencies(none, e).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing was queued by any of the refusals (variable_all_to_all's are
  // below: its peers always check its counts first, so they are told).
  EXPECT_TRUE(e.idle());
  EXPECT_TRUE(b.poison().ok());
}

// variable_all_to_all's count matrix is always checked before the payload,
// so a member that refuses its own counts still sends its record (a
// refusal) and its peers refuse too; every member refusing the same call
// keeps them all in step.
TEST_F(BackendTest, AllToAllRefusalsAreToldToThePeers) {
  cluster_.Run([&](uint32_t r) {
    GlooBackend& b = backend(r);
    GlooExecutor& e = b.executor();
    HostTensor x = I32({2, 3}, {1, 2, 3, 4, 5, 6});
    auto refused = [](const GlooTensorSubmission& submitted,
                      absl::string_view why) {
      EXPECT_EQ(submitted.status().code(), absl::StatusCode::kInvalidArgument)
          << submitted.status();
      EXPECT_TRUE(absl::StrContains(submitted.status().message(), why))
          << submitted.status();
      EXPECT_TRUE(absl::StrContains(submitted.status().message(),
                                    "are told and refuse it too"))
          << submitted.status();
    };
    std::vector<size_t> self(4, 0);
    self[r] = 2;
    // Axis range, count lengths, a send of 1 of 2 rows, the self slot.
    refused(b.VariableAllToAll(x, {self, self}, 2, b.world(), e), "axis");
    refused(b.VariableAllToAll(x, {{2, 0}, {2, 0}}, 0, b.world(), e), "counts");
    std::vector<size_t> one(4, 0);
    one[r] = 1;
    refused(b.VariableAllToAll(x, {one, one}, 0, b.world(), e),
            "send counts add up to 1");
    std::vector<size_t> split(4, 0);
    split[(r + 1) % 4] = 1;
    split[r] = 1;
    refused(b.VariableAllToAll(x, {self, split}, 0, b.world(), e),
            "the self slot disagrees");
    // Every member refused the same calls: nothing is out of step.
    auto sum =
        b.AllReduceSum(I32({1}, {static_cast<int32_t>(r)}), b.world(), e);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ASSERT_TRUE(sum->completion->Wait().ok());
    EXPECT_EQ(ValuesOf<int32_t>(sum->output), (std::vector<int32_t>{6}));
    EXPECT_TRUE(b.poison().ok());
  });
}

TEST_F(BackendTest, SubmitLocalDependenciesOrdersAndRetains) {
  GlooBackend& b = backend(0);
  HostTensor x = I32({1}, {1});
  std::weak_ptr<const void> watch = x.resource();
  const HostTensor* values[] = {&x};
  auto deps = GlooBackend::SubmitLocalDependencies(values, b.executor());
  ASSERT_TRUE(deps.ok()) << deps.status();
  EXPECT_TRUE(deps->completion->Wait().ok());
  EXPECT_EQ(deps->completion->retained(), 0u);
}

TEST_F(BackendTest, AllEightOperationsExactValues) {
  cluster_.Run([&](uint32_t r) {
    GlooBackend& b = backend(r);
    GlooExecutor& e = b.executor();
    GlooGroup& world = b.world();
    GlooGroup& tp = **b.group(r < 2 ? 2 : 3);
    GlooGroup& pp = **b.group(r % 2 == 0 ? 4 : 5);

    // all_reduce_sum on the pipeline group.
    auto sum = b.AllReduceSum(I32({2}, {int(r), 1}), pp, e);
    ASSERT_TRUE(sum.ok()) << sum.status();

    // all_gather_even along axis 1: [2, 1] per rank -> [2, 4].
    auto even =
        b.AllGatherEven(I32({2, 1}, {int(r), int(r) + 10}), 1, world, e);
    ASSERT_TRUE(even.ok()) << even.status();

    // all_gather_uneven along axis 0 with a member contributing nothing:
    // member m contributes m rows (member 0: none).
    std::vector<int32_t> rows;
    for (uint32_t k = 0; k < r; ++k) rows.push_back(int(r) * 10 + int(k));
    auto uneven_input = *HostTensor::FromRows<int32_t>(r, {}, rows);
    auto uneven = b.AllGatherUneven(uneven_input, {0, 1, 2, 3}, 0, world, e);
    ASSERT_TRUE(uneven.ok()) << uneven.status();

    // all_gather_uneven along axis 1 within the tensor group: member 0
    // gives [1, 1], member 1 gives [1, 2].
    const uint32_t tl = tp.local_rank();
    std::vector<int32_t> cols(tl + 1, int(r));
    auto uneven1 = b.AllGatherUneven(
        *HostTensor::FromVector<int32_t>({1, tl + 1}, cols), {1, 2}, 1, tp, e);
    ASSERT_TRUE(uneven1.ok()) << uneven1.status();

    // variable_all_to_all along axis 1 in the world: member s sends d+1
    // columns to member d (value s*10 + d), 2 rows.
    PeerCounts counts;
    std::vector<int32_t> a2a_values;
    size_t width = 0;
    for (uint32_t d = 0; d < 4; ++d) {
      counts.send.push_back(d + 1);
      counts.receive.push_back(r + 1);
      width += d + 1;
    }
    for (int row = 0; row < 2; ++row) {
      for (uint32_t d = 0; d < 4; ++d) {
        for (uint32_t c = 0; c <= d; ++c) {
          a2a_values.push_back(int(r) * 10 + int(d) + row * 1000);
        }
      }
    }
    auto a2a = b.VariableAllToAll(
        *HostTensor::FromVector<int32_t>({2, width}, a2a_values), counts, 1,
        world, e);
    ASSERT_TRUE(a2a.ok()) << a2a.status();

    // broadcast from member 2 of the world.
    auto bcast = b.Broadcast(
        *HostTensor::FromVector<double>({3}, {r * 1.0, 2.0, 3.0}), 2, world, e);
    ASSERT_TRUE(bcast.ok()) << bcast.status();

    // barrier and agree_success (one false vote from rank 3, then all true).
    auto barrier = b.Barrier(world, e);
    ASSERT_TRUE(barrier.ok()) << barrier.status();
    auto vote = b.AgreeSuccess(r != 3, world, e);
    ASSERT_TRUE(vote.ok()) << vote.status();
    auto unanimous = b.AgreeSuccess(true, world, e);
    ASSERT_TRUE(unanimous.ok()) << unanimous.status();

    // send_receive: a bundle of two tensors along the pipeline route
    // member 0 -> member 1.
    auto route = b.Route(pp, pp.members()[0], pp.members()[1]);
    ASSERT_TRUE(route.ok()) << route.status();
    std::vector<HostTensor> bundle = {
        *HostTensor::FromVector<float>({2}, {r + 0.5f, r + 1.5f}),
        *HostTensor::FromVector<uint8_t>({3}, {uint8_t(r), 7, 9})};
    auto sr = b.SendReceive(bundle, *route, e);
    ASSERT_TRUE(sr.ok()) << sr.status();

    // Everything completes, in order.
    ASSERT_TRUE(sr->completion->Wait().ok());
    for (const GlooCompletionPtr& c :
         {sum->completion, even->completion, uneven->completion,
          uneven1->completion, a2a->completion, bcast->completion,
          barrier->completion, vote->completion, unanimous->completion}) {
      EXPECT_TRUE(c->IsComplete()) << c->operation();
      EXPECT_TRUE(c->Wait().ok()) << c->operation();
      EXPECT_EQ(c->retained(), 0u);
    }

    EXPECT_EQ(ValuesOf<int32_t>(sum->output),
              (std::vector<int32_t>{r % 2 == 0 ? 2 : 4, 2}));
    EXPECT_EQ(even->output.descriptor().shape(), (std::vector<size_t>{2, 4}));
    EXPECT_EQ(ValuesOf<int32_t>(even->output),
              (std::vector<int32_t>{0, 1, 2, 3, 10, 11, 12, 13}));
    EXPECT_EQ(uneven->output.descriptor().shape(), (std::vector<size_t>{6}));
    EXPECT_EQ(ValuesOf<int32_t>(uneven->output),
              (std::vector<int32_t>{10, 20, 21, 30, 31, 32}));
    const int t0 = int(tp.members()[0]), t1 = int(tp.members()[1]);
    EXPECT_EQ(uneven1->output.descriptor().shape(),
              (std::vector<size_t>{1, 3}));
    EXPECT_EQ(ValuesOf<int32_t>(uneven1->output),
              (std::vector<int32_t>{t0, t1, t1}));
    std::vector<int32_t> want_a2a;
    for (int row = 0; row < 2; ++row) {
      for (uint32_t s = 0; s < 4; ++s) {
        for (uint32_t c = 0; c <= r; ++c) {
          want_a2a.push_back(int(s) * 10 + int(r) + row * 1000);
        }
      }
    }
    EXPECT_EQ(a2a->output.descriptor().shape(),
              (std::vector<size_t>{2, 4 * (r + 1)}));
    EXPECT_EQ(ValuesOf<int32_t>(a2a->output), want_a2a);
    EXPECT_EQ(ValuesOf<double>(bcast->output),
              (std::vector<double>{2.0, 2.0, 3.0}));
    EXPECT_FALSE(*vote->output->Resolve());
    EXPECT_TRUE(*unanimous->output->Resolve());
    const uint32_t src = pp.members()[0];
    ASSERT_EQ(sr->output.size(), 2u);
    EXPECT_EQ(ValuesOf<float>(sr->output[0]),
              (std::vector<float>{src + 0.5f, src + 1.5f}));
    EXPECT_EQ(ValuesOf<uint8_t>(sr->output[1]),
              (std::vector<uint8_t>{uint8_t(src), 7, 9}));
    if (r == src) {
      EXPECT_TRUE(sr->output[0].SharesBufferWith(bundle[0]));
    }
  });
}

TEST_F(BackendTest, AgreementResolvesOnlyAfterCompletion) {
  // Rank 1 holds back, so rank 0's agree_success cannot complete yet.
  GlooBackend& b0 = backend(0);
  auto vote = b0.AgreeSuccess(true, **b0.group(2), b0.executor());
  ASSERT_TRUE(vote.ok());
  auto early = vote->output->Resolve();
  EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  GlooBackend& b1 = backend(1);
  auto other = b1.AgreeSuccess(false, **b1.group(2), b1.executor());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(vote->completion->Wait().ok());
  ASSERT_TRUE(other->completion->Wait().ok());
  EXPECT_FALSE(*vote->output->Resolve());
  EXPECT_FALSE(*other->output->Resolve());
}

// The destination of route 0 -> 1 in tensor group 2 expects 3 elements,
// the source sends 2.
absl::Status SendMismatchedBundle(GlooBackend& b, uint32_t r) {
  GlooGroup& tp = **b.group(2);
  auto route = b.Route(tp, 0, 1);
  if (!route.ok()) return route.status();
  std::vector<HostTensor> bundle = {*HostTensor::FromVector<float>(
      {r == 0 ? 2u : 3u}, std::vector<float>(r == 0 ? 2 : 3))};
  auto sr = b.SendReceive(bundle, *route, b.executor());
  if (!sr.ok()) return sr.status();
  return sr->completion->Wait();
}

TEST(BundleDisagreementTest, WithVerifyAgreementBothEndsFailAtOnce) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.verify_agreement = true;
  GlooTestCluster cluster({2, 2, 1, 1}, 4, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    if (r > 1) return;
    GlooBackend& b = cluster.session(r).backend();
    absl::Status s = SendMismatchedBundle(b, r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "disagree")) << s;
    EXPECT_TRUE(b.poison().ok());
  });
}

TEST(BundleDisagreementTest, WithoutVerifyTheyNeverPairAndBothEndsAreNamed) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.op_timeout = absl::Seconds(1);
  GlooTestCluster cluster({2, 2, 1, 1}, 4, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    if (r > 1) return;
    GlooBackend& b = cluster.session(r).backend();
    absl::Status s = SendMismatchedBundle(b, r);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(
        s.message(),
        "members disagree on operation #0 on route 0->1 in group 2"))
        << s;
    EXPECT_TRUE(
        absl::StrContains(s.message(), "rank 0 submitted `bundle(f32[2])`"))
        << s;
    EXPECT_TRUE(
        absl::StrContains(s.message(), "rank 1 submitted `bundle(f32[3])`"))
        << s;
    EXPECT_FALSE(b.poison().ok());
  });
}

// Two executors are two independent queues with their own Gloo contexts:
// rank 0 parks a receive on executor 1 whose sender only sends after an
// all_reduce_sum on executor 0 finished. With one executor the sum would
// wait behind the receive and both would fail at op_timeout.
TEST(ExecutorsTest, WorkOnDifferentExecutorsOverlaps) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.executors = 2;
  options.op_timeout = absl::Seconds(5);
  GlooTestCluster cluster({1, 1, 1, 2}, 2, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    GlooBackend& b = cluster.session(r).backend();
    ASSERT_EQ(b.executor_count(), 2u);
    auto second = b.executor(1);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(b.executor(2).status().code(),
              absl::StatusCode::kInvalidArgument);
    // Operations take the groups the backend hands out, never a lane.
    ASSERT_EQ(b.world().lanes().size(), 1u);
    GlooGroup& lane = *b.world().lanes()[0];
    EXPECT_EQ(b.Barrier(lane, b.executor()).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Route(lane, 0, 1).status().code(),
              absl::StatusCode::kInvalidArgument);
    auto route = b.Route(b.world(), 1, 0);
    ASSERT_TRUE(route.ok()) << route.status();
    const ValueDescriptor d = *ValueDescriptor::Create({2}, TensorDtype::kI32);
    if (r == 0) {
      auto parked = b.ReceiveBundle({d}, *route, **second);
      ASSERT_TRUE(parked.ok()) << parked.status();
      auto sum = b.AllReduceSum(I32({2}, {1, 2}), b.world(), b.executor());
      ASSERT_TRUE(sum.ok()) << sum.status();
      ASSERT_TRUE(sum->completion->Wait().ok()) << sum->completion->Wait();
      EXPECT_EQ(ValuesOf<int32_t>(sum->output), (std::vector<int32_t>{11, 22}));
      ASSERT_TRUE(parked->completion->Wait().ok())
          << parked->completion->Wait();
      EXPECT_EQ(ValuesOf<int32_t>(parked->output[0]),
                (std::vector<int32_t>{7, 8}));
    } else {
      auto sum = b.AllReduceSum(I32({2}, {10, 20}), b.world(), b.executor());
      ASSERT_TRUE(sum.ok()) << sum.status();
      ASSERT_TRUE(sum->completion->Wait().ok()) << sum->completion->Wait();
      const std::vector<HostTensor> bundle = {I32({2}, {7, 8})};
      auto sent = b.SendReceive(bundle, *route, **second);
      ASSERT_TRUE(sent.ok()) << sent.status();
      ASSERT_TRUE(sent->completion->Wait().ok()) << sent->completion->Wait();
    }
    // Both executors still pair with the peer's same executor.
    for (uint32_t lane = 0; lane < 2; ++lane) {
      auto on = b.AllReduceSum(I32({1}, {int(r + lane)}), b.world(),
                               **b.executor(lane));
      ASSERT_TRUE(on.ok()) << on.status();
      ASSERT_TRUE(on->completion->Wait().ok()) << on->completion->Wait();
      EXPECT_EQ(ValuesOf<int32_t>(on->output),
                (std::vector<int32_t>{int(1 + 2 * lane)}));
    }
    EXPECT_TRUE(b.poison().ok());
  });
}

// The ordering contract both backends keep (docs/contract.md, "Ordering"):
// each group has its own context per executor, so two groups of the same
// members on two executors, submitted X, Y by rank 0 and Y, X by rank 1,
// complete. The NCCL twin is nccl_ordering_gpu_test's
// TwoGroupsOnTwoLanesInEitherOrderComplete.
TEST(ExecutorsTest, TwoGroupsOnTwoExecutorsInEitherOrderComplete) {
  GlooSessionOptions options = GlooTestCluster::DefaultOptions();
  options.executors = 2;
  options.op_timeout = absl::Seconds(5);
  GlooTestCluster cluster({2, 1, 1, 1}, 2, options);
  ASSERT_TRUE(cluster.status().ok()) << cluster.status();
  cluster.Run([&](uint32_t r) {
    GlooBackend& b = cluster.session(r).backend();
    const auto& groups = b.descriptor().groups();
    ASSERT_GE(groups.size(), 2u);
    ASSERT_EQ(groups[0].members(), groups[1].members());
    auto g1 = b.group(groups[0].id());
    auto g2 = b.group(groups[1].id());
    auto lane1 = b.executor(1);
    ASSERT_TRUE(g1.ok() && g2.ok() && lane1.ok());
    auto submit_x = [&] {
      return b.AllReduceSum(I32({2}, {int(r) + 1, 1}), **g1, **lane1);
    };
    auto submit_y = [&] {
      return b.AllGatherEven(I32({1}, {10 * (int(r) + 1)}), 0, **g2,
                             b.executor());
    };
    auto first = r == 0 ? submit_x() : submit_y();
    auto second = r == 0 ? submit_y() : submit_x();
    ASSERT_TRUE(first.ok() && second.ok());
    ASSERT_TRUE(first->completion->Wait().ok()) << first->completion->Wait();
    ASSERT_TRUE(second->completion->Wait().ok()) << second->completion->Wait();
    const HostTensor& sum = r == 0 ? first->output : second->output;
    const HostTensor& gathered = r == 0 ? second->output : first->output;
    EXPECT_EQ(ValuesOf<int32_t>(sum), (std::vector<int32_t>{3, 2}));
    EXPECT_EQ(ValuesOf<int32_t>(gathered), (std::vector<int32_t>{10, 20}));
  });
}

TEST(ExecutorsTest, TheExecutorCountIsChecked) {
  for (uint32_t executors : {0u, kMaxGlooExecutors + 1}) {
    GlooSessionOptions options = GlooTestCluster::DefaultOptions();
    options.executors = executors;
    GlooTestCluster cluster({1, 1, 1, 1}, 1, options);
    EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument)
        << executors << ": " << cluster.status();
  }
}

}  // namespace
}  // namespace rankd::dataplane::gloo
