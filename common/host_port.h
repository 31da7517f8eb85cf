// host_port.h: the one reading of "HOST:PORT" network addresses in rankd.
//
// The daemon's flags (--listen, --advertise_address, --coordinator,
// --metrics_listen), rankrun's --coordinator and the client library's TCP
// targets all name a peer the same way, so they share this parser and accept
// the same text: a host name or IPv4 address, or a bracketed IPv6 address
// (optionally with a "%zone"), then ':' and a decimal port in 0..65535.
// Whether port 0 ("any port") makes sense is the caller's decision: a
// listener may take it, a connecting client may not.
//
// Depends only on the C++ standard library and absl. Every function is pure
// and thread-safe.
#ifndef RANKD_COMMON_HOST_PORT_H_
#define RANKD_COMMON_HOST_PORT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rankd {

// A parsed network address. Copyable value type.
struct HostPort {
  std::string host;  // Without brackets, e.g. "::1" or "rankd-0.svc".
  uint16_t port = 0;
};

// Parses "HOST:PORT" or "[IPV6]:PORT", where
//   - HOST is a host name or IPv4 address (IsHostName);
//   - IPV6 is an IPv6 literal, optionally with "%zone" (IsIpv6Literal), and
//     must be bracketed: "::1:80" is rejected, not guessed at;
//   - PORT is 1 to 5 decimal digits with a value in 0..65535 (no sign, no
//     spaces).
// Returns InvalidArgument saying what is wrong with `address` (missing
// ':PORT', missing HOST, a port out of range, a host that is not a host
// name, ...) without naming a flag or option: callers add that.
absl::StatusOr<HostPort> ParseHostPort(std::string_view address);

// Returns "host:port", or "[host]:port" when host contains ':' (IPv6), so
// that ParseHostPort(JoinHostPort(h, p)) gives back h and p for every host
// ParseHostPort accepts.
std::string JoinHostPort(std::string_view host, uint16_t port);

// True for hosts that bind every interface ("", "0.0.0.0", "::", "0::0")
// and so cannot be advertised to peers.
bool IsWildcardHost(std::string_view host);

// True for a DNS name or dotted IPv4 address: 1..253 bytes of '.'-separated
// labels, each 1..63 of letters, digits, '-' and '_'. ('_' is allowed
// because Kubernetes and hosts files use it, though DNS does not.)
bool IsHostName(std::string_view host);

// True for what may stand between '[' and ']': 2..45 of hex digits, ':' and
// '.' (an embedded IPv4 address) with at least one ':', optionally followed
// by "%zone" where the zone is a host name such as "eth0" or "2".
bool IsIpv6Literal(std::string_view host);

}  // namespace rankd

#endif  // RANKD_COMMON_HOST_PORT_H_
