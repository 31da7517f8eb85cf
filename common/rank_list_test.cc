#include "common/rank_list.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

TEST(FormatRankListTest, EmptyIsNone) { EXPECT_EQ(FormatRankList({}), "none"); }

TEST(FormatRankListTest, SingleRank) {
  EXPECT_EQ(FormatRankList({0}), "0");
  EXPECT_EQ(FormatRankList({42}), "42");
}

TEST(FormatRankListTest, CompressesRuns) {
  EXPECT_EQ(FormatRankList({0, 1}), "0-1");
  EXPECT_EQ(FormatRankList({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(FormatRankList({0, 2, 4}), "0, 2, 4");
  EXPECT_EQ(FormatRankList({1, 2, 3, 5, 7, 8}), "1-3, 5, 7-8");
}

TEST(FormatRankListTest, SortsAndDeduplicates) {
  EXPECT_EQ(FormatRankList({7, 0, 1, 2, 3, 9}), "0-3, 7, 9");
  EXPECT_EQ(FormatRankList({3, 3, 1, 2, 1}), "1-3");
  EXPECT_EQ(FormatRankList({5, 5, 5}), "5");
}

TEST(FormatRankListTest, LargestRanks) {
  constexpr uint32_t kMax = std::numeric_limits<uint32_t>::max();
  EXPECT_EQ(FormatRankList({kMax - 1, kMax}), "4294967294-4294967295");
  EXPECT_EQ(FormatRankList({0, kMax}), "0, 4294967295");
}

TEST(FormatRankListTest, CutsLongListsCountingRanks) {
  // Four items, the limit is two: the count is of ranks, not items.
  EXPECT_EQ(FormatRankList({0, 1, 2, 4, 6, 8}, 2), "0-2, 4, ... (6 in all)");
  // Exactly at the limit nothing is cut.
  EXPECT_EQ(FormatRankList({0, 2, 4}, 3), "0, 2, 4");
  EXPECT_EQ(FormatRankList({0, 2, 4, 6}, 3), "0, 2, 4, ... (4 in all)");
}

TEST(FormatRankListTest, DefaultLimitIs32Items) {
  std::vector<uint32_t> evens;
  for (uint32_t r = 0; r < 66; r += 2) evens.push_back(r);  // 33 items
  std::string text = FormatRankList(evens);
  EXPECT_TRUE(absl::StartsWith(text, "0, 2, 4, ")) << text;
  EXPECT_TRUE(absl::EndsWith(text, ", 60, 62, ... (33 in all)")) << text;
  std::vector<uint32_t> exactly(evens.begin(), evens.end() - 1);  // 32 items
  EXPECT_EQ(FormatRankList(exactly).find("..."), std::string::npos);
  // A long run is one item.
  std::vector<uint32_t> run;
  for (uint32_t r = 0; r < 1000; ++r) run.push_back(r);
  EXPECT_EQ(FormatRankList(run), "0-999");
}

TEST(NameRanksTest, SaysRankOrRanks) {
  EXPECT_EQ(NameRanks({}), "no rank");
  EXPECT_EQ(NameRanks({3}), "rank 3");
  EXPECT_EQ(NameRanks({3, 3}), "rank 3");
  EXPECT_EQ(NameRanks({2, 0, 1, 7}), "ranks 0-2, 7");
}

}  // namespace
}  // namespace rankd
