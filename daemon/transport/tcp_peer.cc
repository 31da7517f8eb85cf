#include "daemon/transport/tcp_peer.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rankd {
namespace {

// The peer of an IPv4 address and port (network byte order).
TcpPeer FromIpv4(const in_addr& in, uint16_t port) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &in, text, sizeof(text));
  TcpPeer p;
  p.address = text;
  p.port = port;
  p.group = p.address;
  return p;
}

// The peer of an IPv6 address, interface index and port.
TcpPeer FromIpv6(const in6_addr& in6, uint32_t scope, uint16_t port) {
  if (IN6_IS_ADDR_V4MAPPED(&in6)) {
    in_addr in{};
    std::memcpy(&in, &in6.s6_addr[12], sizeof(in));
    return FromIpv4(in, port);
  }
  const std::string zone = scope == 0 ? "" : absl::StrCat("%", scope);
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, &in6, text, sizeof(text));
  in6_addr prefix = in6;
  std::memset(&prefix.s6_addr[8], 0, 8);
  char prefix_text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, &prefix, prefix_text, sizeof(prefix_text));
  TcpPeer p;
  p.address = absl::StrCat(text, zone);
  p.port = port;
  p.group = absl::StrCat(prefix_text, zone, "/64");
  return p;
}

// `text` with every %XX replaced by its byte; nullopt when a "%" is not
// followed by two hex digits.
std::optional<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size() || !absl::ascii_isxdigit(text[i + 1]) ||
        !absl::ascii_isxdigit(text[i + 2])) {
      return std::nullopt;
    }
    auto hex = [](char c) {
      return absl::ascii_isdigit(c) ? c - '0'
                                    : absl::ascii_tolower(c) - 'a' + 10;
    };
    out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
    i += 2;
  }
  return out;
}

absl::Status Invalid(absl::string_view peer, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("gRPC peer \"", absl::CHexEscape(peer), "\": ", why));
}

}  // namespace

std::string TcpPeer::key() const { return absl::StrCat(address, " ", port); }

absl::StatusOr<TcpPeer> TcpPeerOfSocket(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(std::strerror(errno));
  }
  return TcpPeerFromSockaddr(reinterpret_cast<const sockaddr*>(&addr), len);
}

absl::StatusOr<TcpPeer> TcpPeerFromSockaddr(const sockaddr* addr,
                                            socklen_t len) {
  if (addr->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    return FromIpv4(in->sin_addr, ntohs(in->sin_port));
  }
  if (addr->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    return FromIpv6(in6->sin6_addr, in6->sin6_scope_id, ntohs(in6->sin6_port));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "not an IPv4 or IPv6 socket address (family ", addr->sa_family, ")"));
}

absl::StatusOr<TcpPeer> ParseGrpcPeer(absl::string_view peer) {
  absl::string_view rest = peer;
  const bool v4 = absl::ConsumePrefix(&rest, "ipv4:");
  if (!v4 && !absl::ConsumePrefix(&rest, "ipv6:")) {
    return Invalid(peer, "not a TCP peer (ipv4: or ipv6:)");
  }
  // The URI path: undo gRPC's percent-encoding once.
  std::optional<std::string> path = PercentDecode(rest);
  if (!path.has_value()) return Invalid(peer, "bad percent-encoding");
  const size_t colon = path->rfind(':');
  if (colon == std::string::npos) return Invalid(peer, "no port");
  uint32_t port = 0;
  if (!absl::SimpleAtoi(absl::string_view(*path).substr(colon + 1), &port) ||
      port > 65535) {
    return Invalid(peer, "bad port");
  }
  absl::string_view host = absl::string_view(*path).substr(0, colon);
  if (v4) {
    in_addr in{};
    const std::string text(host);
    if (::inet_pton(AF_INET, text.c_str(), &in) != 1) {
      return Invalid(peer, "bad IPv4 address");
    }
    return FromIpv4(in, static_cast<uint16_t>(port));
  }
  if (!absl::ConsumePrefix(&host, "[") || !absl::ConsumeSuffix(&host, "]")) {
    return Invalid(peer, "IPv6 address not in brackets");
  }
  uint32_t scope = 0;
  if (const size_t percent = host.find('%');
      percent != absl::string_view::npos) {
    // RFC 6874: the zone's "%" is itself written "%25", and the zone is
    // percent-encoded. A bare "%zone" is taken too.
    absl::string_view zone = host.substr(percent + 1);
    host = host.substr(0, percent);
    if (zone.size() > 2 && absl::StartsWith(zone, "25")) zone.remove_prefix(2);
    std::optional<std::string> name = PercentDecode(zone);
    if (!name.has_value() || name->empty()) {
      return Invalid(peer, "bad IPv6 zone");
    }
    if (!absl::SimpleAtoi(*name, &scope)) {
      scope = ::if_nametoindex(name->c_str());
      if (scope == 0) {
        return Invalid(peer, absl::StrCat("unknown interface \"",
                                          absl::CHexEscape(*name), "\""));
      }
    }
  }
  in6_addr in6{};
  const std::string text(host);
  if (::inet_pton(AF_INET6, text.c_str(), &in6) != 1) {
    return Invalid(peer, "bad IPv6 address");
  }
  return FromIpv6(in6, scope, static_cast<uint16_t>(port));
}

}  // namespace rankd
