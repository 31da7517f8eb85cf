// TcpPeer: gRPC's peer names and socket addresses give the same peer, and
// IPv6 addresses are grouped by /64.
#include "daemon/transport/tcp_peer.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

TEST(TcpPeerTest, ParsesIpv4) {
  auto p = ParseGrpcPeer("ipv4:10.0.0.1:51234");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->address, "10.0.0.1");
  EXPECT_EQ(p->port, 51234);
  EXPECT_EQ(p->group, "10.0.0.1");
  EXPECT_EQ(p->key(), "10.0.0.1 51234");
}

TEST(TcpPeerTest, ParsesIpv6AndGroupsItsSlash64) {
  auto p = ParseGrpcPeer("ipv6:%5B2001:db8:1:2:aaaa::7%5D:443");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->address, "2001:db8:1:2:aaaa::7");
  EXPECT_EQ(p->port, 443);
  EXPECT_EQ(p->group, "2001:db8:1:2::/64");
  auto other = ParseGrpcPeer("ipv6:%5B2001:db8:1:2:ffff:1:2:3%5D:443");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->group, p->group);
  auto elsewhere = ParseGrpcPeer("ipv6:%5B2001:db8:1:3::7%5D:443");
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_NE(elsewhere->group, p->group);
  // Loopback, as gRPC names it.
  auto loopback = ParseGrpcPeer("ipv6:%5B::1%5D:5000");
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_EQ(loopback->address, "::1");
  EXPECT_EQ(loopback->group, "::/64");
}

TEST(TcpPeerTest, Ipv4MappedIsTheIpv4Address) {
  auto p = ParseGrpcPeer("ipv6:%5B::ffff:127.0.0.5%5D:9");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->address, "127.0.0.5");
  EXPECT_EQ(p->group, "127.0.0.5");
}

// gRPC 1.51 writes fe80::1 on interface 2 as "[fe80::1%252]" (RFC 6874) and
// percent-encodes that as a URI path: the zone is decoded twice.
TEST(TcpPeerTest, ZoneIsDecodedTwice) {
  auto p = ParseGrpcPeer("ipv6:%5Bfe80::1%25252%5D:51234");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->address, "fe80::1%2");
  EXPECT_EQ(p->port, 51234);
  EXPECT_EQ(p->group, "fe80::%2/64");
  // A zone by interface name, as other writers put it, is its index.
  const unsigned lo = ::if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  for (const char* name :
       {"ipv6:%5Bfe80::1%2525lo%5D:7", "ipv6:%5Bfe80::1%25lo%5D:7"}) {
    auto named = ParseGrpcPeer(name);
    ASSERT_TRUE(named.ok()) << name << ": " << named.status();
    EXPECT_EQ(named->address, absl::StrCat("fe80::1%", lo)) << name;
  }
}

TEST(TcpPeerTest, SocketAddressGivesTheSamePeer) {
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  ASSERT_EQ(::inet_pton(AF_INET6, "fe80::1", &in6.sin6_addr), 1);
  in6.sin6_port = htons(51234);
  in6.sin6_scope_id = 2;
  auto from_socket =
      TcpPeerFromSockaddr(reinterpret_cast<sockaddr*>(&in6), sizeof(in6));
  ASSERT_TRUE(from_socket.ok()) << from_socket.status();
  auto from_grpc = ParseGrpcPeer("ipv6:%5Bfe80::1%25252%5D:51234");
  ASSERT_TRUE(from_grpc.ok());
  EXPECT_EQ(from_socket->key(), from_grpc->key());
  EXPECT_EQ(from_socket->group, from_grpc->group);

  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  ASSERT_EQ(::inet_pton(AF_INET6, "::ffff:10.1.2.3", &mapped.sin6_addr), 1);
  mapped.sin6_port = htons(80);
  auto m =
      TcpPeerFromSockaddr(reinterpret_cast<sockaddr*>(&mapped), sizeof(mapped));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->key(), "10.1.2.3 80");
  EXPECT_EQ(m->group, "10.1.2.3");
}

TEST(TcpPeerTest, RefusesWhatIsNotATcpPeer) {
  for (const char* bad : {
           "unix:/tmp/x.sock",
           "ipv4:10.0.0.1",
           "ipv4:10.0.0.300:1",
           "ipv4:10.0.0.1:70000",
           "ipv6:::1:5",
           "ipv6:%5B::1%5D",
           "ipv6:%5Bnot-an-address%5D:1",
           "ipv6:%5Bfe80::1%25%5D:1",
           "ipv6:%5Bfe80::1%2525no-such-interface9%5D:1",
           "ipv6:%ZZ::1:1",
           "",
       }) {
    EXPECT_FALSE(ParseGrpcPeer(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace rankd
