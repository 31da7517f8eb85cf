// The open files plan: the soft limit raised as far as the limits need,
// --max_tcp_connections lowered to what the hard limit allows, a refusal
// when not even the nodes' connections fit.
#include "daemon/descriptor_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

DaemonConfig Config(uint32_t max_tcp_connections) {
  DaemonConfig c;
  c.nnodes = 4;
  c.nproc_per_node = 8;
  c.network.max_tcp_connections = max_tcp_connections;
  c.network.max_tcp_unauthenticated = max_tcp_connections / 2;
  c.network.max_tcp_health_connections = 32;
  return c;
}

TEST(DescriptorLimitTest, RaisesTheSoftLimitToWhatTheLimitsNeed) {
  const DaemonConfig c = Config(256);
  const uint64_t needed = TcpListenerDescriptors(256) + OtherDescriptors(c);
  // 2 x 256 + 64 + 8 for the listener; metrics 65, nodes 16, the round
  // link's handshakes 2 x 4 + 16, ranks 32, 256.
  EXPECT_EQ(needed, 584u + 65 + 16 + 24 + 32 + 256);
  auto plan = PlanDescriptors(c, /*soft=*/64, /*hard=*/4096);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->needed, needed);
  EXPECT_EQ(plan->soft_limit, needed);
  EXPECT_EQ(plan->max_tcp_connections, 256u);
  EXPECT_FALSE(plan->lowered);
  // Never lowered below what it is; no hard limit is no bound.
  EXPECT_EQ(PlanDescriptors(c, 10000, 20000)->soft_limit, 10000u);
  EXPECT_EQ(PlanDescriptors(c, 64, RLIM_INFINITY)->soft_limit, needed);
}

TEST(DescriptorLimitTest, LowersTheConnectionsToWhatTheHardLimitAllows) {
  DaemonConfig c = Config(100000);
  auto plan = PlanDescriptors(c, 1024, 4096);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->lowered);
  EXPECT_LE(plan->needed, 4096u);
  EXPECT_EQ(plan->soft_limit, plan->needed);
  // The most that fit: one more would not.
  EXPECT_LE(
      TcpListenerDescriptors(plan->max_tcp_connections) + OtherDescriptors(c),
      4096u);
  EXPECT_GT(TcpListenerDescriptors(plan->max_tcp_connections + 1) +
                OtherDescriptors(c),
            4096u);
}

TEST(DescriptorLimitTest, RefusesWhenNotEvenTheNodesFit) {
  DaemonConfig c = Config(256);
  auto plan = PlanDescriptors(c, 64, 300);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "RLIMIT_NOFILE, 300"))
      << plan.status();
}

TEST(DescriptorLimitTest, ApplyKeepsTheOtherTcpLimitsBelowTheTotal) {
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  if (before.rlim_max == RLIM_INFINITY || before.rlim_max > (1u << 30)) {
    GTEST_SKIP() << "no finite hard limit to exceed";
  }
  DaemonConfig c = Config(UINT32_MAX - 1);
  c.network.max_tcp_unauthenticated = UINT32_MAX - 2;
  auto warning = ApplyDescriptorLimit(&c);
  ASSERT_TRUE(warning.ok()) << warning.status();
  EXPECT_TRUE(absl::StrContains(*warning, "--max_tcp_connections="))
      << *warning;
  EXPECT_TRUE(absl::StrContains(*warning, "RLIMIT_NOFILE")) << *warning;
  EXPECT_LT(c.network.max_tcp_connections, UINT32_MAX - 1);
  EXPECT_LT(c.network.max_tcp_unauthenticated, c.network.max_tcp_connections);
  EXPECT_LT(c.network.max_tcp_health_connections,
            c.network.max_tcp_connections);
  rlimit after{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(
      after.rlim_cur,
      std::max<uint64_t>(before.rlim_cur,
                         TcpListenerDescriptors(c.network.max_tcp_connections) +
                             OtherDescriptors(c)));
  EXPECT_LE(after.rlim_cur, before.rlim_max);
}

}  // namespace
}  // namespace rankd
