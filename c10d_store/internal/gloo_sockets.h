// Gloo's TCP endpoints and how to end this process's connections to them:
// the stand-in for a process-group abort that torch 1.13's
// ProcessGroupGloo lacks (the Python twin is in python/rankd/torch.py).
//
// ProcessGroupGloo's rendezvous publishes, through the c10d store, one
// value per rank that is a sequence of gloo tcp Address records (a
// sockaddr_storage, 128 bytes, then a 64-bit sequence number): one per
// pair. Every connection of a Gloo context has one end at such an address,
// so shutting down the sockets with an end there ends every wait in them.
//
// Depends on POSIX sockets, /proc/self/fd and abseil only.
#ifndef RANKD_C10D_STORE_INTERNAL_GLOO_SOCKETS_H_
#define RANKD_C10D_STORE_INTERNAL_GLOO_SOCKETS_H_

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace rankd::c10d_store::internal {

// Bytes of one gloo tcp Address record: sockaddr_storage + int64 sequence.
inline constexpr size_t kGlooAddressBytes = 136;

// An IPv4 or IPv6 TCP endpoint. `address` holds 4 (AF_INET) or 16
// (AF_INET6) significant bytes, the rest zero; `port` is in host order.
struct Endpoint {
  int family = 0;
  std::array<uint8_t, 16> address{};
  uint16_t port = 0;

  friend auto operator<=>(const Endpoint&, const Endpoint&) = default;
  // "127.0.0.1:4711" or "[::1]:4711", for messages.
  std::string ToString() const;
};

// The endpoints in `value` when it is a sequence of one or more gloo tcp
// Address records whose families are all AF_INET or AF_INET6; empty for
// any other value (a length that is not a multiple of kGlooAddressBytes,
// another family). Never fails: values that are not Gloo's are simply not
// addresses.
std::vector<Endpoint> GlooEndpoints(absl::Span<const uint8_t> value);

// The endpoint a socket address names; family 0 for one that is neither
// IPv4 nor IPv6.
Endpoint EndpointOf(const void* sockaddr, size_t length);

// Shuts down (SHUT_RDWR) every TCP socket of this process whose local or
// peer end is in `endpoints`: a Gloo read or write pending on it fails at
// once, and so does every later one. Listening sockets at such an endpoint
// are shut down too. Returns how many sockets it shut down. Best effort and
// never fails: a descriptor that closes meanwhile, or that is not a TCP
// socket, is skipped. Safe to call from any thread, any number of times.
int ShutDownSocketsAt(const std::set<Endpoint>& endpoints);

}  // namespace rankd::c10d_store::internal

#endif  // RANKD_C10D_STORE_INTERNAL_GLOO_SOCKETS_H_
