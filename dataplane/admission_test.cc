// Unit tests for admission.h: the order of Admit's steps (poison before
// membership before capability) and the exact words of each refusal, and
// CheckPeerOf's two refusals.
#include "dataplane/admission.h"

#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

// Rank 0 of a world of 4, a member of group 2 only.
DistributedSessionDescriptor RankZero() {
  auto group = *CollectiveGroupDescriptor::Create(2, {0, 1}, 0, 0);
  return *DistributedSessionDescriptor::Create(4, 0, {group});
}

DistributedCapabilities Everything() {
  DistributedCapabilities caps;
  caps.world_collectives = true;
  caps.collective_groups = {2};
  caps.point_to_point = true;
  caps.variable_all_to_all = true;
  return caps;
}

AdmissionRequest Send(CollectiveScope scope) {
  return {"gloo", "send", scope, &DistributedCapabilities::point_to_point,
          "point_to_point"};
}

TEST(AdmitTest, AdmitsWhatTheSessionAdvertises) {
  EXPECT_TRUE(Admit(Send(CollectiveScope::Group(2)), absl::OkStatus(),
                    RankZero(), Everything())
                  .ok());
}

TEST(AdmitTest, TheSessionsOwnStateComesFirst) {
  const absl::Status poisoned = absl::AbortedError("poisoned");
  DistributedCapabilities none;
  EXPECT_EQ(Admit(Send(CollectiveScope::Group(7)), poisoned, RankZero(), none),
            poisoned);
}

TEST(AdmitTest, MembershipBeforeCapability) {
  absl::Status s = Admit(Send(CollectiveScope::Group(7)), absl::OkStatus(),
                         RankZero(), DistributedCapabilities{});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "gloo backend: send: rank 0 is not a member of group 7: its "
            "groups are 2, and only those can be in capability "
            "'collective_groups'");
}

TEST(AdmitTest, TheOperationsCapabilityBeforeTheScopes) {
  DistributedCapabilities caps = Everything();
  caps.point_to_point = false;
  caps.world_collectives = false;
  absl::Status s =
      Admit(Send(CollectiveScope::World()), absl::OkStatus(), RankZero(), caps);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(),
            "gloo backend: send needs capability 'point_to_point', which "
            "this backend does not advertise");
}

TEST(CheckPeerOfTest, APeerOutsideTheScopeOrThisRank) {
  EXPECT_TRUE(CheckPeerOf("nccl", "send", 2, 3, 0).ok());
  absl::Status outside = CheckPeerOf("nccl", "send", 3, 3, 0);
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.message(),
            "nccl backend: send: peer 3 is outside the scope's 3 members");
  absl::Status self = CheckPeerOf("nccl", "receive", 1, 3, 1);
  EXPECT_EQ(self.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(self.message(),
            "nccl backend: receive: peer 1 is this rank itself");
}

}  // namespace
}  // namespace rankd::dataplane
