// TcpPeer: the far end of a TCP connection on the daemon's public listener,
// as TcpGate counts and recognises it (docs/operations.md, "Listeners").
// One connection's peer is named twice: by the socket (getpeername, when
// the gate accepts it) and by gRPC (ServerContext::peer(), when one of its
// calls authenticates or calls grpc.health.v1); both must give the same
// TcpPeer. Depends on POSIX socket types and absl only.
#ifndef RANKD_DAEMON_TCP_PEER_H_
#define RANKD_DAEMON_TCP_PEER_H_

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd {

struct TcpPeer {
  // The address as inet_ntop writes it; an IPv4-mapped IPv6 address as its
  // IPv4 address; a scoped IPv6 address (link-local) with "%" and its
  // interface index ("fe80::1%2").
  std::string address;
  uint16_t port = 0;
  // What per-address limits count together: the IPv4 address, or the /64
  // an IPv6 address belongs to ("2001:db8:1:2::/64", scope kept): one
  // host is commonly given a whole /64, so counting IPv6 addresses one by
  // one would bound nothing.
  std::string group;

  // "address port": names one connection while it is open.
  std::string key() const;
};

// The peer in a socket address (from getpeername or accept). InvalidArgument
// for a family other than AF_INET and AF_INET6 or a short `len`.
absl::StatusOr<TcpPeer> TcpPeerFromSockaddr(const sockaddr* addr,
                                            socklen_t len);

// The peer of connected socket `fd` (getpeername). Unavailable with the
// system's reason when it has none (closed, not connected); the errors of
// TcpPeerFromSockaddr otherwise.
absl::StatusOr<TcpPeer> TcpPeerOfSocket(int fd);

// The peer in gRPC's name for a TCP connection: "ipv4:10.0.0.1:51234",
// "ipv6:%5B2001:db8::1%5D:51234". gRPC (1.51) writes the address as a URI
// path, percent-encoded, and a scoped IPv6 address in it as RFC 6874 does
// ("[fe80::1%252]", the "%" itself written "%25"), so a zone is
// percent-decoded twice: "ipv6:%5Bfe80::1%25252%5D:51234" is fe80::1 on
// interface 2. A zone given by interface name ("eth0") is turned into its
// index. InvalidArgument naming the problem for anything else (a Unix
// socket's peer, a malformed address or port, an unknown interface).
absl::StatusOr<TcpPeer> ParseGrpcPeer(absl::string_view peer);

}  // namespace rankd

#endif  // RANKD_DAEMON_TCP_PEER_H_
