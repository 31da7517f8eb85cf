// Unit tests for common/host_port.h: what ParseHostPort accepts, what it
// rejects and with which words, and that JoinHostPort undoes it.

#include "common/host_port.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;

struct Good {
  std::string text;
  std::string host;
  uint16_t port;
};

const std::vector<Good>& GoodAddresses() {
  static const auto* const kGood = new std::vector<Good>{
      {"a:1", "a", 1},
      {"10.0.0.1:7421", "10.0.0.1", 7421},
      {"127.0.0.1:0", "127.0.0.1", 0},
      {"rankd-0.rankd.ns.svc.cluster.local:65535",
       "rankd-0.rankd.ns.svc.cluster.local", 65535},
      {"under_score:80", "under_score", 80},
      {"host:0", "host", 0},
      {"host:00080", "host", 80},
      {"[::1]:7421", "::1", 7421},
      {"[::]:80", "::", 80},
      {"[fe80::1%eth0]:80", "fe80::1%eth0", 80},
      {"[fe80::1%2]:80", "fe80::1%2", 80},
      {"[::ffff:10.0.0.1]:8", "::ffff:10.0.0.1", 8},
      {"[2001:db8:0:0:0:0:0:1]:65535", "2001:db8:0:0:0:0:0:1", 65535},
  };
  return *kGood;
}

TEST(ParseHostPortTest, AcceptsHostNamesIpv4Ipv6AndZones) {
  for (const Good& c : GoodAddresses()) {
    absl::StatusOr<HostPort> hp = ParseHostPort(c.text);
    ASSERT_TRUE(hp.ok()) << c.text << ": " << hp.status();
    EXPECT_EQ(hp->host, c.host) << c.text;
    EXPECT_EQ(hp->port, c.port) << c.text;
  }
}

TEST(ParseHostPortTest, RejectsWithThePreciseReason) {
  struct Bad {
    std::string text;
    std::string why;
  };
  const std::vector<Bad> cases = {
      {"", "missing ':PORT'"},
      {"host", "missing ':PORT'"},
      {"host:", "missing PORT after ':'"},
      {":80", "missing HOST before ':'"},
      {"host:65536", "port '65536' is not a number in 0..65535"},
      {"host:123456", "is not a number in 0..65535"},
      {"host:8x", "port '8x' is not"},
      {"host:-1", "port '-1' is not"},
      {"host:+80", "port '+80' is not"},
      {"host: 80", "port \" 80\" is not"},
      {"::1:80", "an IPv6 address needs brackets: [ADDRESS]:PORT"},
      {"[::1]80", "expected ':PORT' after ']'"},
      {"[::1]", "expected ':PORT' after ']'"},
      {"[::1]:", "missing PORT after ':'"},
      {"[::1:80", "'[' without matching ']'"},
      {"[]:80", "\"\" is not an IPv6 address"},
      {"[zz::1]:80", "'zz::1' is not an IPv6 address"},
      {"[1.2.3.4]:80", "'1.2.3.4' is not an IPv6 address"},
      {"[fe80::1%]:80", "is not an IPv6 address"},
      {"[fe80::1%a b]:80", "is not an IPv6 address"},
      {"bad host:80", "\"bad host\" is not a host name"},
      {"a..b:80", "'a..b' is not a host name"},
      {".a:80", "is not a host name"},
      {"a/b:80", "'a/b' is not a host name"},
      {std::string(64, 'x') + ":80", "is not a host name"},
      {std::string(254, 'x') + ":80", "is not a host name"},
  };
  for (const Bad& c : cases) {
    absl::StatusOr<HostPort> hp = ParseHostPort(c.text);
    ASSERT_FALSE(hp.ok()) << c.text;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(hp.status().message(), HasSubstr(c.why)) << c.text;
  }
}

TEST(ParseHostPortTest, TakesTheLastColonAsThePortSeparator) {
  // Only the last ':' can start the port; an earlier one makes the host an
  // unbracketed IPv6 address, which is rejected rather than guessed at.
  EXPECT_FALSE(ParseHostPort("a:1:2").ok());
}

TEST(JoinHostPortTest, BracketsIpv6AndRoundTrips) {
  EXPECT_EQ(JoinHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(JoinHostPort("fd00::1", 80), "[fd00::1]:80");
  EXPECT_EQ(JoinHostPort("host", 7421), "host:7421");
  for (const Good& c : GoodAddresses()) {
    absl::StatusOr<HostPort> hp = ParseHostPort(JoinHostPort(c.host, c.port));
    ASSERT_TRUE(hp.ok()) << c.text << ": " << hp.status();
    EXPECT_EQ(hp->host, c.host);
    EXPECT_EQ(hp->port, c.port);
  }
}

TEST(IsWildcardHostTest, NamesEveryInterfaceOnly) {
  for (const char* any : {"", "0.0.0.0", "::", "0::0"}) {
    EXPECT_TRUE(IsWildcardHost(any)) << any;
  }
  for (const char* one : {"127.0.0.1", "::1", "localhost", "0.0.0.1"}) {
    EXPECT_FALSE(IsWildcardHost(one)) << one;
  }
}

TEST(HostNameTest, LabelLimits) {
  EXPECT_TRUE(IsHostName(std::string(63, 'a')));
  EXPECT_FALSE(IsHostName(std::string(64, 'a')));
  std::string long_name;
  while (long_name.size() < 253) long_name += "abcdefgh.";
  long_name.resize(253);
  if (long_name.back() == '.') long_name.back() = 'z';
  EXPECT_TRUE(IsHostName(long_name));
  EXPECT_FALSE(IsHostName(long_name + "z"));
  EXPECT_FALSE(IsHostName("trailing."));
  EXPECT_TRUE(IsIpv6Literal("::1"));
  EXPECT_FALSE(IsIpv6Literal("1"));
  EXPECT_FALSE(IsIpv6Literal(std::string(46, ':')));
}

}  // namespace
}  // namespace rankd
