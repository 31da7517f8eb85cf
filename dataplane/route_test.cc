// The rules of a point-to-point route that both backends share (route.h).
#include "dataplane/route.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

// Group 3 of world ranks 4, 5 and 7.
const std::vector<uint32_t> kMembers = {4, 5, 7};

std::string Check(size_t source, size_t destination, size_t me) {
  return std::string(CheckRoute("nccl", "send_receive", "group 3", kMembers,
                                source, destination, me)
                         .message());
}

TEST(CheckRoute, AcceptsTwoMembersOfWhichThisIsOne) {
  EXPECT_TRUE(
      CheckRoute("gloo", "opening a route", "group 3", kMembers, 0, 2, 0).ok());
  EXPECT_TRUE(
      CheckRoute("gloo", "opening a route", "group 3", kMembers, 2, 0, 0).ok());
}

TEST(CheckRoute, NamesTheBrokenRule) {
  EXPECT_EQ(
      CheckRoute("nccl", "send_receive", "group 3", kMembers, 0, 3, 0).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Check(0, 3, 0),
            "nccl backend: send_receive: route 0 -> 3 on group 3: member 3 "
            "is outside the scope's 3 members");
  EXPECT_EQ(Check(9, 1, 1),
            "nccl backend: send_receive: route 9 -> 1 on group 3: member 9 "
            "is outside the scope's 3 members");
  EXPECT_EQ(Check(1, 1, 1),
            "nccl backend: send_receive: route 1 -> 1 on group 3: the source "
            "and the destination are the same member (rank 5)");
  EXPECT_EQ(Check(0, 1, 2),
            "nccl backend: send_receive: route 0 -> 1 on group 3: this member "
            "(2, rank 7) is neither end");
}

TEST(RouteBetweenRanks, GivesTheEndsMemberIndices) {
  auto ends = RouteBetweenRanks("gloo", "opening a route", "group 3", kMembers,
                                7, 4, 0);
  ASSERT_TRUE(ends.ok()) << ends.status();
  EXPECT_EQ(ends->first, 2u);
  EXPECT_EQ(ends->second, 0u);
}

TEST(RouteBetweenRanks, RefusesARankOutsideTheScopeNamingItsMembers) {
  auto ends = RouteBetweenRanks("gloo", "opening a route", "group 3", kMembers,
                                4, 6, 0);
  EXPECT_EQ(ends.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ends.status().message(),
            "gloo backend: opening a route: route rank 4 -> rank 6 on group 3: "
            "rank 6 "
            "is not a member (its members: ranks 4-5, 7)");
}

// CheckRoute's rules, the route named by the ranks the caller gave.
TEST(RouteBetweenRanks, RefusesAsCheckRouteDoesNamingTheRanks) {
  EXPECT_EQ(
      RouteBetweenRanks("gloo", "opening a route", "group 3", kMembers, 5, 5, 1)
          .status()
          .message(),
      "gloo backend: opening a route: route rank 5 -> rank 5 on group 3: "
      "the source and the destination are the same member (rank 5)");
  EXPECT_EQ(
      RouteBetweenRanks("gloo", "opening a route", "group 3", kMembers, 4, 5, 2)
          .status()
          .message(),
      "gloo backend: opening a route: route rank 4 -> rank 5 on group 3: "
      "this member (2, rank 7) is neither end");
}

TEST(CheckRouteDestination, OnlyTheDestinationReceives) {
  EXPECT_TRUE(CheckRouteDestination("gloo", "receive_bundle", "group 3",
                                    kMembers, 0, 2, 2)
                  .ok());
  absl::Status s = CheckRouteDestination("nccl", "receive_bundle_into",
                                         "group 3", kMembers, 0, 2, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "nccl backend: receive_bundle_into: route 0 -> 2 on group 3: this "
            "member (0, rank 4) is not its destination");
}

}  // namespace
}  // namespace rankd::dataplane
