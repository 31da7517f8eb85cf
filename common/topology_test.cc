#include "common/topology.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using Members = std::vector<uint32_t>;

ParallelTopology Topo(uint32_t t, uint32_t p, uint32_t e, uint32_t d) {
  ParallelTopology topology;
  topology.tensor = t;
  topology.pipeline = p;
  topology.expert = e;
  topology.data = d;
  return topology;
}

// Appends expected groups of one kind, ids continuing after those in `out`.
void Append(std::vector<GroupSpec>& out, GroupKind kind,
            const std::vector<Members>& members) {
  for (const Members& m : members) {
    out.push_back(GroupSpec{static_cast<uint32_t>(out.size() + 1), kind, m});
  }
}

std::vector<Members> Singletons(uint32_t world_size) {
  std::vector<Members> out;
  for (uint32_t r = 0; r < world_size; ++r) out.push_back({r});
  return out;
}

Members Iota(uint32_t n) {
  Members out;
  for (uint32_t r = 0; r < n; ++r) out.push_back(r);
  return out;
}

std::vector<GroupSpec> MustDerive(const ParallelTopology& t, uint32_t w) {
  absl::StatusOr<std::vector<GroupSpec>> groups = DeriveGroups(t, w);
  EXPECT_TRUE(groups.ok()) << groups.status();
  return groups.ok() ? *groups : std::vector<GroupSpec>{};
}

TEST(GroupKindNameTest, NamesEveryKind) {
  EXPECT_EQ(GroupKindName(GroupKind::kWorld), "world");
  EXPECT_EQ(GroupKindName(GroupKind::kTensor), "tensor");
  EXPECT_EQ(GroupKindName(GroupKind::kPipeline), "pipeline");
  EXPECT_EQ(GroupKindName(GroupKind::kExpert), "expert");
  EXPECT_EQ(GroupKindName(GroupKind::kData), "data");
  EXPECT_EQ(GroupKindName(static_cast<GroupKind>(42)), "unknown");
}

TEST(DescribeTopologyTest, ShortForm) {
  EXPECT_EQ(DescribeTopology(Topo(2, 4, 1, 3)), "tp2 pp4 ep1 dp3");
}

TEST(ValidateTopologyTest, AcceptsMatchingProduct) {
  EXPECT_TRUE(ValidateTopology(Topo(1, 1, 1, 1), 1).ok());
  EXPECT_TRUE(ValidateTopology(Topo(2, 2, 1, 2), 8).ok());
  EXPECT_TRUE(ValidateTopology(Topo(2, 2, 2, 2), 16).ok());
  EXPECT_TRUE(
      ValidateTopology(Topo(1, 1, 1, kMaxWorldSize), kMaxWorldSize).ok());
}

TEST(ValidateTopologyTest, RejectsZeroDegree) {
  for (const ParallelTopology& t : {Topo(0, 1, 1, 8), Topo(8, 0, 1, 1),
                                    Topo(8, 1, 0, 1), Topo(8, 1, 1, 0)}) {
    absl::Status s = ValidateTopology(t, 8);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << DescribeTopology(t);
    EXPECT_NE(s.message().find(">= 1"), std::string::npos) << s;
  }
}

TEST(ValidateTopologyTest, RejectsProductMismatchNamingDegrees) {
  absl::Status s = ValidateTopology(Topo(2, 2, 1, 2), 6);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor(2) * pipeline(2) * expert(1) * data(2)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("world size is 6"), std::string::npos) << s;

  s = ValidateTopology(Topo(1, 1, 1, 2), 8);
  EXPECT_NE(s.message().find("= 2,"), std::string::npos) << s;
}

TEST(ValidateTopologyTest, RejectsBadWorldSize) {
  EXPECT_EQ(ValidateTopology(Topo(1, 1, 1, 1), 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ValidateTopology(Topo(1, 1, 1, kMaxWorldSize + 1), kMaxWorldSize + 1)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ValidateTopologyTest, HugeDegreesDoNotOverflow) {
  const uint32_t big = 0xFFFFFFFFu;
  // 2^32-1 to the fourth power wraps 64 bits; must still be rejected.
  absl::Status s = ValidateTopology(Topo(big, big, big, big), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("more than 1"), std::string::npos) << s;
  // 65536^4 = 2^64 wraps to 0 if computed naively.
  EXPECT_FALSE(ValidateTopology(Topo(65536, 65536, 65536, 65536), 16).ok());
}

TEST(TopologyFromDegreesTest, ComputesDataDegree) {
  absl::StatusOr<ParallelTopology> t = TopologyFromDegrees(16, 2, 2, 2);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, Topo(2, 2, 2, 2));

  t = TopologyFromDegrees(8, 1, 1, 1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, Topo(1, 1, 1, 8));

  t = TopologyFromDegrees(8, 8, 1, 1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, Topo(8, 1, 1, 1));

  t = TopologyFromDegrees(12, 3, 2, 1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, Topo(3, 2, 1, 2));
  EXPECT_TRUE(ValidateTopology(*t, 12).ok());
}

TEST(TopologyFromDegreesTest, RejectsNonDividing) {
  absl::StatusOr<ParallelTopology> t = TopologyFromDegrees(8, 3, 1, 1);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(
                "tensor(3) * pipeline(1) * expert(1) = 3 does not divide the "
                "world size 8"),
            std::string::npos)
      << t.status();

  t = TopologyFromDegrees(8, 4, 4, 1);
  EXPECT_NE(t.status().message().find("more than 8"), std::string::npos)
      << t.status();

  t = TopologyFromDegrees(8, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TopologyFromDegreesTest, RejectsZero) {
  EXPECT_FALSE(TopologyFromDegrees(0, 1, 1, 1).ok());
  EXPECT_FALSE(TopologyFromDegrees(8, 0, 1, 1).ok());
  EXPECT_FALSE(TopologyFromDegrees(8, 1, 0, 1).ok());
  EXPECT_FALSE(TopologyFromDegrees(8, 1, 1, 0).ok());
  EXPECT_FALSE(TopologyFromDegrees(kMaxWorldSize + 1, 1, 1, 1).ok());
}

TEST(CoordinatesTest, LayoutIsDataOutermostExpertInnermost) {
  const ParallelTopology t = Topo(2, 3, 2, 2);  // W = 24.
  // rank = ((d*P + p)*T + t)*E + e
  EXPECT_EQ(CoordinatesOf(t, 0), (RankCoordinates{0, 0, 0, 0}));
  EXPECT_EQ(CoordinatesOf(t, 1), (RankCoordinates{0, 0, 1, 0}));
  EXPECT_EQ(CoordinatesOf(t, 2), (RankCoordinates{1, 0, 0, 0}));
  EXPECT_EQ(CoordinatesOf(t, 4), (RankCoordinates{0, 1, 0, 0}));
  EXPECT_EQ(CoordinatesOf(t, 12), (RankCoordinates{0, 0, 0, 1}));
  EXPECT_EQ(CoordinatesOf(t, 23), (RankCoordinates{1, 2, 1, 1}));
  EXPECT_EQ(RankOf(t, RankCoordinates{1, 2, 1, 1}), 23u);
  EXPECT_EQ(RankOf(t, RankCoordinates{1, 1, 0, 1}), 12u + 4 + 2);
}

TEST(CoordinatesTest, RoundTripsForManyLayouts) {
  for (uint32_t t : {1u, 2u, 3u})
    for (uint32_t p : {1u, 2u, 4u})
      for (uint32_t e : {1u, 2u})
        for (uint32_t d : {1u, 3u}) {
          const ParallelTopology topo = Topo(t, p, e, d);
          const uint32_t w = t * p * e * d;
          std::set<uint32_t> seen;
          for (uint32_t r = 0; r < w; ++r) {
            const RankCoordinates c = CoordinatesOf(topo, r);
            EXPECT_LT(c.tensor, t);
            EXPECT_LT(c.pipeline, p);
            EXPECT_LT(c.expert, e);
            EXPECT_LT(c.data, d);
            EXPECT_EQ(RankOf(topo, c), r) << DescribeTopology(topo);
            seen.insert(RankOf(topo, c));
          }
          EXPECT_EQ(seen.size(), w);
        }
}

TEST(CoordinatesTest, ZeroDegreeDoesNotCrash) {
  // Unvalidated input must not divide by zero.
  (void)CoordinatesOf(Topo(0, 0, 0, 0), 5);
}

TEST(GroupSizeOfTest, MatchesDegrees) {
  const ParallelTopology t = Topo(2, 3, 4, 5);
  EXPECT_EQ(GroupSizeOf(t, GroupKind::kWorld), 120u);
  EXPECT_EQ(GroupSizeOf(t, GroupKind::kTensor), 2u);
  EXPECT_EQ(GroupSizeOf(t, GroupKind::kPipeline), 3u);
  EXPECT_EQ(GroupSizeOf(t, GroupKind::kExpert), 4u);
  EXPECT_EQ(GroupSizeOf(t, GroupKind::kData), 5u);
}

TEST(DeriveGroupsTest, W8Tp2Pp2Dp2) {
  std::vector<GroupSpec> want;
  Append(want, GroupKind::kWorld, {Iota(8)});
  Append(want, GroupKind::kTensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  Append(want, GroupKind::kPipeline, {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  Append(want, GroupKind::kExpert, Singletons(8));
  Append(want, GroupKind::kData, {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  ASSERT_EQ(want.size(), 21u);
  EXPECT_EQ(want[20].id, 21u);
  EXPECT_EQ(MustDerive(Topo(2, 2, 1, 2), 8), want);
}

TEST(DeriveGroupsTest, W16AllTwo) {
  std::vector<GroupSpec> want;
  Append(want, GroupKind::kWorld, {Iota(16)});
  Append(
      want, GroupKind::kTensor,
      {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  Append(
      want, GroupKind::kPipeline,
      {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  Append(
      want, GroupKind::kExpert,
      {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  Append(
      want, GroupKind::kData,
      {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
  ASSERT_EQ(want.size(), 33u);
  EXPECT_EQ(MustDerive(Topo(2, 2, 2, 2), 16), want);
}

TEST(DeriveGroupsTest, W12Tp3Pp2Dp2) {
  std::vector<GroupSpec> want;
  Append(want, GroupKind::kWorld, {Iota(12)});
  Append(want, GroupKind::kTensor,
         {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}});
  Append(want, GroupKind::kPipeline,
         {{0, 3}, {1, 4}, {2, 5}, {6, 9}, {7, 10}, {8, 11}});
  Append(want, GroupKind::kExpert, Singletons(12));
  Append(want, GroupKind::kData,
         {{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}});
  EXPECT_EQ(MustDerive(Topo(3, 2, 1, 2), 12), want);
}

TEST(DeriveGroupsTest, AllOnesSingleRank) {
  std::vector<GroupSpec> want;
  Append(want, GroupKind::kWorld, {{0}});
  Append(want, GroupKind::kTensor, {{0}});
  Append(want, GroupKind::kPipeline, {{0}});
  Append(want, GroupKind::kExpert, {{0}});
  Append(want, GroupKind::kData, {{0}});
  EXPECT_EQ(MustDerive(Topo(1, 1, 1, 1), 1), want);
}

TEST(DeriveGroupsTest, TensorEqualsWorld) {
  std::vector<GroupSpec> want;
  Append(want, GroupKind::kWorld, {Iota(4)});
  Append(want, GroupKind::kTensor, {Iota(4)});
  Append(want, GroupKind::kPipeline, Singletons(4));
  Append(want, GroupKind::kExpert, Singletons(4));
  Append(want, GroupKind::kData, Singletons(4));
  EXPECT_EQ(MustDerive(Topo(4, 1, 1, 1), 4), want);
}

TEST(DeriveGroupsTest, ExpertOnly) {
  std::vector<GroupSpec> want;
  Append(want, GroupKind::kWorld, {Iota(4)});
  Append(want, GroupKind::kTensor, Singletons(4));
  Append(want, GroupKind::kPipeline, Singletons(4));
  Append(want, GroupKind::kExpert, {Iota(4)});
  Append(want, GroupKind::kData, Singletons(4));
  EXPECT_EQ(MustDerive(Topo(1, 1, 4, 1), 4), want);
}

TEST(DeriveGroupsTest, DataOnly) {
  std::vector<GroupSpec> want;
  Append(want, GroupKind::kWorld, {Iota(3)});
  Append(want, GroupKind::kTensor, Singletons(3));
  Append(want, GroupKind::kPipeline, Singletons(3));
  Append(want, GroupKind::kExpert, Singletons(3));
  Append(want, GroupKind::kData, {Iota(3)});
  EXPECT_EQ(MustDerive(Topo(1, 1, 1, 3), 3), want);
}

TEST(DeriveGroupsTest, RejectsInvalidTopology) {
  EXPECT_EQ(DeriveGroups(Topo(2, 2, 1, 2), 6).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeriveGroups(Topo(0, 1, 1, 8), 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeriveGroups(Topo(1, 1, 1, 1), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Structural properties that hold for every layout.
TEST(DeriveGroupsTest, InvariantsForManyLayouts) {
  for (uint32_t t : {1u, 2u, 3u})
    for (uint32_t p : {1u, 2u})
      for (uint32_t e : {1u, 2u, 4u})
        for (uint32_t d : {1u, 2u, 3u}) {
          const ParallelTopology topo = Topo(t, p, e, d);
          const uint32_t w = t * p * e * d;
          SCOPED_TRACE(absl::StrCat(DescribeTopology(topo), " W=", w));
          const std::vector<GroupSpec> groups = MustDerive(topo, w);
          ASSERT_EQ(groups.size(), 1 + w / t + w / p + w / e + w / d);

          // Ids are 1..N in order; kinds come in derivation order.
          for (size_t i = 0; i < groups.size(); ++i) {
            EXPECT_EQ(groups[i].id, i + 1);
            if (i > 0) {
              EXPECT_LE(static_cast<int>(groups[i - 1].kind),
                        static_cast<int>(groups[i].kind));
            }
          }
          EXPECT_EQ(groups[0].kind, GroupKind::kWorld);
          EXPECT_EQ(groups[0].members, Iota(w));

          // Each rank is in exactly one group of each kind; members ascend
          // and differ only along the group's axis.
          for (GroupKind kind : {GroupKind::kTensor, GroupKind::kPipeline,
                                 GroupKind::kExpert, GroupKind::kData}) {
            std::vector<int> count(w, 0);
            uint32_t previous_first = 0;
            bool first_group = true;
            for (const GroupSpec& g : groups) {
              if (g.kind != kind) continue;
              ASSERT_EQ(g.members.size(), GroupSizeOf(topo, kind));
              // Numbered by first appearance: first members ascend.
              if (!first_group) {
                EXPECT_GT(g.members[0], previous_first);
              }
              previous_first = g.members[0];
              first_group = false;
              const RankCoordinates c0 = CoordinatesOf(topo, g.members[0]);
              for (size_t i = 0; i < g.members.size(); ++i) {
                const uint32_t r = g.members[i];
                ASSERT_LT(r, w);
                ++count[r];
                if (i > 0) {
                  EXPECT_LT(g.members[i - 1], r);
                }
                RankCoordinates c = CoordinatesOf(topo, r);
                switch (kind) {
                  case GroupKind::kTensor:
                    EXPECT_EQ(c.tensor, i);
                    c.tensor = 0;
                    break;
                  case GroupKind::kPipeline:
                    EXPECT_EQ(c.pipeline, i);
                    c.pipeline = 0;
                    break;
                  case GroupKind::kExpert:
                    EXPECT_EQ(c.expert, i);
                    c.expert = 0;
                    break;
                  case GroupKind::kData:
                    EXPECT_EQ(c.data, i);
                    c.data = 0;
                    break;
                  case GroupKind::kWorld:
                    break;
                }
                EXPECT_EQ(c, c0);
              }
            }
            for (uint32_t r = 0; r < w; ++r) EXPECT_EQ(count[r], 1) << r;
          }

          // Derivation is deterministic.
          EXPECT_EQ(MustDerive(topo, w), groups);
        }
}

TEST(GroupsOfRankTest, FindsOneGroupPerKindWithLocalIndex) {
  const std::vector<GroupSpec> groups = MustDerive(Topo(2, 2, 1, 2), 8);
  const auto mine = GroupsOfRank(groups, 5);
  ASSERT_EQ(mine.size(), 5u);
  EXPECT_EQ(mine[0].first->id, 1u);
  EXPECT_EQ(mine[0].second, 5u);
  EXPECT_EQ(mine[1].first->id, 4u);  // tensor {4, 5}
  EXPECT_EQ(mine[1].second, 1u);
  EXPECT_EQ(mine[2].first->id, 9u);  // pipeline {5, 7}
  EXPECT_EQ(mine[2].second, 0u);
  EXPECT_EQ(mine[3].first->id, 15u);  // expert {5}
  EXPECT_EQ(mine[3].second, 0u);
  EXPECT_EQ(mine[4].first->id, 19u);  // data {1, 5}
  EXPECT_EQ(mine[4].second, 1u);
  for (const auto& [group, index] : mine) {
    EXPECT_EQ(group->members[index], 5u);
    EXPECT_GE(group, groups.data());
    EXPECT_LT(group, groups.data() + groups.size());
  }
}

TEST(GroupsOfRankTest, EveryRankOfEveryLayout) {
  const ParallelTopology topo = Topo(2, 2, 2, 2);
  const std::vector<GroupSpec> groups = MustDerive(topo, 16);
  for (uint32_t r = 0; r < 16; ++r) {
    const auto mine = GroupsOfRank(groups, r);
    ASSERT_EQ(mine.size(), 5u);
    const RankCoordinates c = CoordinatesOf(topo, r);
    EXPECT_EQ(mine[0].second, r);
    EXPECT_EQ(mine[1].second, c.tensor);
    EXPECT_EQ(mine[2].second, c.pipeline);
    EXPECT_EQ(mine[3].second, c.expert);
    EXPECT_EQ(mine[4].second, c.data);
  }
}

TEST(GroupsOfRankTest, UnknownRankOrNoGroups) {
  const std::vector<GroupSpec> groups = MustDerive(Topo(2, 1, 1, 2), 4);
  EXPECT_TRUE(GroupsOfRank(groups, 4).empty());
  EXPECT_TRUE(GroupsOfRank({}, 0).empty());
}

TEST(DomainTest, DomainsAreContiguousBlocksOfTheDataCoordinate) {
  // tp2 pp2 ep1 dp2: the serving example's 8 ranks, 4 per replica.
  const ParallelTopology topo = Topo(2, 2, 1, 2);
  EXPECT_EQ(DomainSizeOf(topo), 4u);
  for (uint32_t r = 0; r < 8; ++r) {
    EXPECT_EQ(DomainOf(topo, r), CoordinatesOf(topo, r).data) << r;
    EXPECT_EQ(DomainOf(topo, r), r / 4) << r;
  }
  // dp = 1: one domain, the world.
  EXPECT_EQ(DomainSizeOf(Topo(2, 2, 2, 1)), 8u);
  EXPECT_EQ(DomainOf(Topo(2, 2, 2, 1), 7), 0u);
  // Pure data parallelism: every rank its own domain.
  EXPECT_EQ(DomainOf(Topo(1, 1, 1, 4), 3), 3u);
  // An unvalidated zero degree counts as one, never divides by zero.
  EXPECT_EQ(DomainSizeOf(Topo(0, 1, 1, 1)), 1u);
}

}  // namespace
}  // namespace rankd
