// Unit tests for collective_group.h: every validation rule of
// CollectiveGroupDescriptor.
#include "dataplane/collective_group.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(CollectiveGroupDescriptorTest, Valid) {
  auto g = CollectiveGroupDescriptor::Create(3, {4, 6, 8}, 1, 6);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->id(), 3u);
  EXPECT_EQ(g->size(), 3u);
  EXPECT_EQ(g->local_rank(), 1u);
}

TEST(CollectiveGroupDescriptorTest, RejectsEmptyMembers) {
  EXPECT_EQ(CollectiveGroupDescriptor::Create(2, {}, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CollectiveGroupDescriptorTest, RejectsDuplicateMembers) {
  auto g = CollectiveGroupDescriptor::Create(2, {1, 2, 1}, 0, 1);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(g.status().message(), "twice"));
}

TEST(CollectiveGroupDescriptorTest, RejectsLocalRankNotThisRank) {
  EXPECT_EQ(CollectiveGroupDescriptor::Create(2, {1, 2}, 0, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CollectiveGroupDescriptor::Create(2, {1, 2}, 5, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rankd::dataplane
