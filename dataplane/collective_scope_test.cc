// Unit tests for collective_scope.h: CollectiveScope and ResolveScope: the
// world, a group, and a group this rank is not a member of.
#include "dataplane/collective_scope.h"

#include <vector>

#include "absl/strings/match.h"
#include "dataplane/session_descriptor.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

TEST(ScopeTest, WorldResolvesToEveryRank) {
  auto d = *DistributedSessionDescriptor::FromTopology({2, 1, 1, 2}, 4, 2);
  auto s = ResolveScope(d, CollectiveScope::World());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->members, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(s->local_rank, 2u);
  EXPECT_EQ(s->group_id, kWorldGroupId);
  EXPECT_EQ(CollectiveScope::World().ToString(), "world");
  EXPECT_EQ(CollectiveScope::Group(4).ToString(), "group 4");
}

TEST(ScopeTest, GroupResolvesToItsMembers) {
  auto d = *DistributedSessionDescriptor::FromTopology({2, 1, 1, 2}, 4, 3);
  // Tensor groups are ids 2 ({0,1}) and 3 ({2,3}).
  auto s = ResolveScope(d, CollectiveScope::Group(3));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->members, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(s->local_rank, 1u);
}

TEST(ScopeTest, NonMemberGroupIsNotFound) {
  auto d = *DistributedSessionDescriptor::FromTopology({2, 1, 1, 2}, 4, 3);
  auto s = ResolveScope(d, CollectiveScope::Group(2));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "group 2"));
  // It names this rank's groups and the capability they bound.
  EXPECT_TRUE(absl::StrContains(s.status().message(), "collective_groups"))
      << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "its groups are 1, 3"))
      << s.status();
}

}  // namespace
}  // namespace rankd::dataplane
