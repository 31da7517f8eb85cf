// Unit tests of client/channel.h: target parsing, duration conversion and
// status conversion.

#include "client/channel.h"

#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;

struct GoodCase {
  std::string input;
  Target::Kind kind;
  std::string grpc_target;
  std::string unix_path;
};

TEST(ParseTargetTest, AcceptsEveryDocumentedForm) {
  const GoodCase cases[] = {
      {"unix:///run/rankd/rankd.sock", Target::Kind::kUnix,
       "unix:/run/rankd/rankd.sock", "/run/rankd/rankd.sock"},
      {"unix:/tmp/r.sock", Target::Kind::kUnix, "unix:/tmp/r.sock",
       "/tmp/r.sock"},
      {"unix:relative.sock", Target::Kind::kUnix, "unix:relative.sock",
       "relative.sock"},
      {"/var/run/rankd.sock", Target::Kind::kUnix, "unix:/var/run/rankd.sock",
       "/var/run/rankd.sock"},
      {"unix-abstract:rankd", Target::Kind::kUnix, "unix-abstract:rankd", ""},
      {"localhost:50051", Target::Kind::kTcp, "localhost:50051", ""},
      {"10.0.0.7:7000", Target::Kind::kTcp, "10.0.0.7:7000", ""},
      {"[::1]:7000", Target::Kind::kTcp, "[::1]:7000", ""},
      {"[fe80::1%eth0]:7000", Target::Kind::kTcp, "[fe80::1%eth0]:7000", ""},
      {"rankd-0.rankd.ns.svc:7000", Target::Kind::kTcp,
       "rankd-0.rankd.ns.svc:7000", ""},
      {"dns:///rankd-0:7000", Target::Kind::kTcp, "dns:///rankd-0:7000", ""},
      {"dns:rankd-0:7000", Target::Kind::kTcp, "dns:rankd-0:7000", ""},
      {"ipv4:10.0.0.1:7000,10.0.0.2:7000", Target::Kind::kTcp,
       "ipv4:10.0.0.1:7000,10.0.0.2:7000", ""},
  };
  for (const GoodCase& c : cases) {
    absl::StatusOr<Target> t = ParseTarget(c.input);
    ASSERT_TRUE(t.ok()) << c.input << ": " << t.status();
    EXPECT_EQ(t->kind, c.kind) << c.input;
    EXPECT_EQ(t->grpc_target, c.grpc_target) << c.input;
    EXPECT_EQ(t->unix_path, c.unix_path) << c.input;
    EXPECT_EQ(t->display, c.input);
  }
}

TEST(ParseTargetTest, RejectsMalformedAddressesWithActionableMessages) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty address"},
      {"localhost", "missing ':PORT'"},
      {"localhost:", "missing PORT after ':'"},
      {":7000", "missing HOST"},
      {"host:0", "port 0 is not in 1..65535"},
      {"host:65536", "port '65536' is not a number in 0..65535"},
      {"host:http", "port 'http' is not a number"},
      {"host:+80", "port '+80' is not a number"},
      {"::1:7000", "needs brackets: [ADDRESS]:PORT"},
      {"[::1]", "expected ':PORT' after ']'"},
      {"[::1:7000", "'[' without matching ']'"},
      {"[zz::1]:7000", "'zz::1' is not an IPv6 address"},
      {"a..b:7000", "'a..b' is not a host name"},
      {"dns:///a..b:7000", "'a..b' is not a host name"},
      {"unix://run/rankd.sock", "absolute path"},
      {"unix:", "empty socket path"},
      {"unix-abstract:", "empty abstract"},
      {"http://host:80", "unsupported scheme \"http\""},
      {"host :80", "space"},
      {"unix:///" + std::string(200, 'x'), "at most 107"},
  };
  for (const auto& [input, why] : cases) {
    absl::StatusOr<Target> t = ParseTarget(input);
    ASSERT_FALSE(t.ok()) << input;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << input;
    EXPECT_THAT(t.status().message(), HasSubstr(why)) << input;
    EXPECT_THAT(t.status().message(), HasSubstr("expected unix:///path.sock"));
  }
}

TEST(DefaultTargetTest, EnvironmentOverridesTheSocket) {
  unsetenv(kTargetEnvVar);
  EXPECT_EQ(DefaultTarget(), "unix:///run/rankd/rankd.sock");
  setenv(kTargetEnvVar, "localhost:7000", 1);
  EXPECT_EQ(DefaultTarget(), "localhost:7000");
  setenv(kTargetEnvVar, "", 1);
  EXPECT_EQ(DefaultTarget(), kDefaultTarget);
  unsetenv(kTargetEnvVar);
}

TEST(ToMillis32Test, RoundsUpAndRejectsWhatDoesNotFit) {
  EXPECT_EQ(*ToMillis32(absl::ZeroDuration(), "t"), 0u);
  EXPECT_EQ(*ToMillis32(absl::Microseconds(1), "t"), 1u);
  EXPECT_EQ(*ToMillis32(absl::Milliseconds(1500), "t"), 1500u);
  EXPECT_EQ(*ToMillis32(absl::Microseconds(1500), "t"), 2u);
  EXPECT_EQ(*ToMillis32(absl::Milliseconds(4294967295), "t"), 4294967295u);
  for (absl::Duration bad : {absl::Milliseconds(-1), absl::InfiniteDuration(),
                             absl::Milliseconds(4294967296)}) {
    absl::StatusOr<uint32_t> ms = ToMillis32(bad, "round timeout");
    ASSERT_FALSE(ms.ok());
    EXPECT_EQ(ms.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ms.status().message(), HasSubstr("round timeout"));
  }
}

TEST(FromGrpcStatusTest, KeepsCodeAndPrefixesContext) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "ctx").ok());
  absl::Status s = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "rank 3 fenced"),
      "rankd KvSet via unix:///run/rankd/rankd.sock");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "rankd KvSet via unix:///run/rankd/rankd.sock: rank 3 fenced");
  // Every gRPC code maps to the absl code with the same number.
  for (int code = 0; code <= 16; ++code) {
    absl::Status c = FromGrpcStatus(
        grpc::Status(static_cast<grpc::StatusCode>(code), "m"), "x");
    EXPECT_EQ(static_cast<int>(c.code()), code);
  }
  absl::Status deadline = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"),
      "rankd Join via h:1", absl::Seconds(30));
  EXPECT_THAT(deadline.message(), HasSubstr("within 30s"));
  absl::Status unavailable = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed"), "x");
  EXPECT_THAT(unavailable.message(), HasSubstr("rankd daemon running"));
}

}  // namespace
}  // namespace rankd
