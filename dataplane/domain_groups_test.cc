// Unit tests for domain_groups.h: which groups a session holds with and
// without recovery by domain, what it advertises, the refusal's exact words,
// and the descriptor's recovery-domain validation (session_descriptor.h).
#include "dataplane/domain_groups.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/topology.h"
#include "dataplane/admission.h"
#include "gtest/gtest.h"

namespace rankd::dataplane {
namespace {

// tp 2, dp 2 on 4 ranks: domain 0 = ranks 0-1, domain 1 = ranks 2-3.
DistributedSessionDescriptor Descriptor(uint32_t rank, bool by_domain) {
  ParallelTopology topology;
  topology.tensor = 2;
  topology.data = 2;
  auto d = DistributedSessionDescriptor::FromTopology(topology, 4, rank);
  EXPECT_TRUE(d.ok()) << d.status();
  if (by_domain) {
    const uint32_t domain = rank / 2;
    EXPECT_TRUE(d->SetRecoveryDomain({domain, domain * 2, 2}).ok());
  }
  return *d;
}

std::vector<CollectiveGroupId> Ids(
    const std::vector<const CollectiveGroupDescriptor*>& groups) {
  std::vector<CollectiveGroupId> ids;
  for (const auto* g : groups) ids.push_back(g->id());
  return ids;
}

// The group of `d` whose members are `members`.
const CollectiveGroupDescriptor* WithMembers(
    const DistributedSessionDescriptor& d, std::vector<uint32_t> members) {
  for (const auto& g : d.groups()) {
    if (g.members() == members) return &g;
  }
  return nullptr;
}

TEST(DomainGroupsTest, WithoutDomainsASessionHoldsEverything) {
  const DistributedSessionDescriptor d = Descriptor(3, false);
  EXPECT_TRUE(HoldsWorld(d));
  EXPECT_EQ(HeldGroups(d).size(), d.groups().size());
  EXPECT_TRUE(
      CheckHeld("gloo", "all_reduce_sum", d, CollectiveScope::World()).ok());
  const DistributedCapabilities caps = HeldCapabilities(d, std::nullopt);
  EXPECT_TRUE(caps.world_collectives);
  EXPECT_EQ(caps.collective_groups.size(), d.groups().size());
}

TEST(DomainGroupsTest, ByDomainASessionHoldsOnlyItsDomainsGroups) {
  const DistributedSessionDescriptor d = Descriptor(3, true);
  EXPECT_FALSE(HoldsWorld(d));
  for (const auto* g : HeldGroups(d)) {
    for (uint32_t m : g->members()) EXPECT_TRUE(m == 2 || m == 3) << g->id();
  }
  const CollectiveGroupDescriptor* tensor = WithMembers(d, {2, 3});
  const CollectiveGroupDescriptor* data = WithMembers(d, {1, 3});
  ASSERT_NE(tensor, nullptr);
  ASSERT_NE(data, nullptr);
  EXPECT_TRUE(HoldsGroup(d, *tensor));
  EXPECT_FALSE(HoldsGroup(d, *data));
  // The world group (id 1) and the data-parallel group are not held.
  std::vector<CollectiveGroupId> held = Ids(HeldGroups(d));
  EXPECT_EQ(held.size(), d.groups().size() - 2);
  const DistributedCapabilities caps = HeldCapabilities(d, std::nullopt);
  EXPECT_FALSE(caps.world_collectives);
  EXPECT_EQ(caps.collective_groups.count(tensor->id()), 1u);
  EXPECT_EQ(caps.collective_groups.count(data->id()), 0u);
  EXPECT_EQ(caps.collective_groups.count(kWorldGroupId), 0u);
}

TEST(DomainGroupsTest, RefusesTheWorldNamingWhatToUseInstead) {
  const DistributedSessionDescriptor d = Descriptor(3, true);
  absl::Status s =
      CheckHeld("gloo", "all_reduce_sum", d, CollectiveScope::World());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "gloo backend: all_reduce_sum on world refused: the job recovers "
            "by data-parallel domain and this session holds only domain 1 "
            "(ranks 2-3)'s groups (3, 7, 11); the world spans every domain "
            "and is not connected, so that a replica re-forms alone; "
            "exchange world-wide through the control plane's "
            "all_gather_words (Client::AllGatherWordsWithView: its result "
            "names the domains it spans)");
}

TEST(DomainGroupsTest, RefusesAGroupSpanningDomainsNamingThem) {
  const DistributedSessionDescriptor d = Descriptor(3, true);
  const CollectiveGroupDescriptor* data = WithMembers(d, {1, 3});
  ASSERT_NE(data, nullptr);
  absl::Status s =
      CheckHeld("nccl", "all_gather", d, CollectiveScope::Group(data->id()));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(absl::StrCat(
                "nccl backend: all_gather on group ", data->id(),
                " refused: the job recovers by data-parallel domain")),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find(absl::StrCat("; group ", data->id(),
                                          " (members 1, 3) spans domains 0 "
                                          "and 1 and is not connected")),
            std::string::npos)
      << s.message();
}

TEST(DomainGroupsTest, AdmissionRefusesBeforeCapabilityAndKeepsMembership) {
  const DistributedSessionDescriptor d = Descriptor(0, true);
  const DistributedCapabilities caps = HeldCapabilities(d, std::nullopt);
  AdmissionRequest world{"gloo", "all_gather", CollectiveScope::World()};
  EXPECT_EQ(Admit(world, absl::OkStatus(), d, caps).code(),
            absl::StatusCode::kFailedPrecondition);
  // A group this rank is not in is still admission's NotFound.
  const DistributedSessionDescriptor rank3 = Descriptor(3, true);
  const CollectiveGroupDescriptor* other = WithMembers(rank3, {2, 3});
  ASSERT_NE(other, nullptr);
  AdmissionRequest foreign{"gloo", "all_gather",
                           CollectiveScope::Group(other->id())};
  EXPECT_EQ(Admit(foreign, absl::OkStatus(), d, caps).code(),
            absl::StatusCode::kNotFound);
  // A poisoned session reports its poison first.
  EXPECT_EQ(Admit(world, absl::AbortedError("lost"), d, caps).code(),
            absl::StatusCode::kAborted);
  // Its own tensor group passes.
  const CollectiveGroupDescriptor* tensor = WithMembers(d, {0, 1});
  ASSERT_NE(tensor, nullptr);
  AdmissionRequest mine{"gloo", "all_gather",
                        CollectiveScope::Group(tensor->id())};
  EXPECT_TRUE(Admit(mine, absl::OkStatus(), d, caps).ok());
}

TEST(DomainGroupsTest, ADomainThatIsTheWorldHoldsEverything) {
  ParallelTopology topology;
  topology.tensor = 4;
  auto d = DistributedSessionDescriptor::FromTopology(topology, 4, 1);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->SetRecoveryDomain({0, 0, 4}).ok());
  EXPECT_TRUE(HoldsWorld(*d));
  EXPECT_EQ(HeldGroups(*d).size(), d->groups().size());
}

TEST(DomainGroupsTest, TheDescriptorRejectsADomainWithoutItsRank) {
  DistributedSessionDescriptor d = Descriptor(3, false);
  EXPECT_EQ(d.SetRecoveryDomain({0, 0, 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.SetRecoveryDomain({1, 2, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.SetRecoveryDomain({1, 2, 3}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(d.recovery_domain().has_value());
  ASSERT_TRUE(d.SetRecoveryDomain({1, 2, 2}).ok());
  EXPECT_EQ(d.recovery_domain()->ToString(), "domain 1 (ranks 2-3)");
}

}  // namespace
}  // namespace rankd::dataplane
