// The public TCP listener's limits through a real daemon (review of issue
// 36, holes 2 and 5): a token-less grpc.health.v1 Watch stream (a load
// balancer's) outlives --tcp_unauthenticated_ms; the daemon raises its open
// files limit for what --max_tcp_connections lets it hold, lowers that flag
// with a warning where the hard limit is too low, and refuses to start when
// not even its nodes would fit. Daemons run under /usr/bin/prlimit for the
// last three. Depends on the test harness and the generated health stubs.
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"
#include "tests/harness/process.h"
#include "tests/harness/raw_h2.h"

namespace rankd::testing {
namespace {

// The soft and hard "Max open files" of `pid`, from /proc/PID/limits.
std::pair<uint64_t, uint64_t> OpenFilesLimit(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/limits"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "Max open files")) continue;
    std::vector<std::string> parts =
        absl::StrSplit(line.substr(14), ' ', absl::SkipWhitespace());
    uint64_t soft = 0, hard = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[0], &soft) &&
        absl::SimpleAtoi(parts[1], &hard)) {
      return {soft, hard};
    }
  }
  return {0, 0};
}

// A one-node job whose daemon runs under `prlimit --nofile=SOFT:HARD`.
ClusterOptions UnderLimit(LocalCluster* scratch, uint64_t soft, uint64_t hard) {
  const std::string script = absl::StrCat(scratch->dir(), "/rankd-prlimit");
  std::ofstream(script) << "#!/bin/sh\nexec /usr/bin/prlimit --nofile=" << soft
                        << ":" << hard << " -- " << Runfile("daemon/rankd")
                        << " \"$@\"\n";
  ::chmod(script.c_str(), 0755);
  ClusterOptions o;
  o.nnodes = 1;
  o.nproc_per_node = 1;
  o.rankd_binary = script;
  return o;
}

TEST(TcpListenerLimitsTest, RaisesTheOpenFilesSoftLimit) {
  LocalCluster scratch(ClusterOptions{});
  LocalCluster cluster(UnderLimit(&scratch, 64, 4096));
  ASSERT_TRUE(cluster.Start().ok()) << cluster.daemon(0).ReadLog();
  const auto [soft, hard] = OpenFilesLimit(cluster.daemon(0).pid());
  EXPECT_EQ(hard, 4096u);
  // Room for the default 256 TCP connections and the rest; no more than
  // needed.
  EXPECT_GT(soft, 256u + 64u);
  EXPECT_LT(soft, 4096u);
  EXPECT_FALSE(absl::StrContains(cluster.daemon(0).ReadLog(), "warning"));
}

TEST(TcpListenerLimitsTest, LowersMaxTcpConnectionsToTheHardLimit) {
  LocalCluster scratch(ClusterOptions{});
  ClusterOptions o = UnderLimit(&scratch, 64, 1024);
  o.extra_flags.push_back("--max_tcp_connections=5000");
  LocalCluster cluster(o);
  ASSERT_TRUE(cluster.Start().ok()) << cluster.daemon(0).ReadLog();
  const std::string log = cluster.daemon(0).ReadLog();
  EXPECT_TRUE(absl::StrContains(log, "warning: --max_tcp_connections=5000"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "hard limit (RLIMIT_NOFILE) of 1024"))
      << log;
  // As many connections as fit: what one more needs (its descriptor, the
  // gate's duplicate, and one in four for a shut one) would not.
  const uint64_t soft = OpenFilesLimit(cluster.daemon(0).pid()).first;
  EXPECT_LE(soft, 1024u);
  EXPECT_GT(soft + 3, 1024u);
}

TEST(TcpListenerLimitsTest, RefusesToStartWhenNotEvenTheNodesFit) {
  LocalCluster scratch(ClusterOptions{});
  LocalCluster cluster(UnderLimit(&scratch, 64, 300));
  EXPECT_FALSE(cluster.Start(absl::Seconds(5)).ok());
  auto status = cluster.daemon(0).Wait(absl::Seconds(5));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(ExitCode(*status), 1);
  const std::string log = cluster.daemon(0).ReadLog();
  EXPECT_TRUE(absl::StrContains(log, "cannot start")) << log;
  EXPECT_TRUE(absl::StrContains(log, "RLIMIT_NOFILE, 300")) << log;
}

// A load balancer's Watch carries no credential: it stays open past
// --tcp_unauthenticated_ms (before: closed then), while a silent
// connection beside it does not.
TEST(TcpListenerLimitsTest,
     ATokenlessHealthWatchOutlivesTheUnauthenticatedTime) {
  ClusterOptions o;
  o.nnodes = 1;
  o.nproc_per_node = 1;
  o.extra_flags.push_back("--tcp_unauthenticated_ms=1000");
  LocalCluster cluster(o);
  ASSERT_TRUE(cluster.Start().ok()) << cluster.daemon(0).ReadLog();
  auto channel = grpc::CreateChannel(cluster.tcp_address(0),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  auto reader = stub->Watch(&context, {});
  grpc::health::v1::HealthCheckResponse first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(first.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  // The next Read waits for a change: it returns only if the stream ends.
  std::atomic<bool> ended{false};
  std::thread watch([&] {
    grpc::health::v1::HealthCheckResponse next;
    while (reader->Read(&next)) {
    }
    ended.store(true);
  });
  const std::string address = cluster.tcp_address(0);
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  const int silent = ConnectLoopback(port);
  ASSERT_GE(silent, 0);
  // Three times the unauthenticated time: the silent one is closed, the
  // Watch is not.
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  bool silent_closed = false;
  char buffer[256];
  while (absl::Now() < deadline && !ended.load()) {
    ssize_t n = ::recv(silent, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) silent_closed = true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(silent_closed);
  EXPECT_FALSE(ended.load()) << "the Watch stream ended";
  context.TryCancel();
  watch.join();
  ::close(silent);
}

}  // namespace
}  // namespace rankd::testing
