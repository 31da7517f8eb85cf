// host_port.cc: see host_port.h.

#include "common/host_port.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace rankd {
namespace {

// Debian's abseil has its own string_view, distinct from std::string_view.
absl::string_view Av(std::string_view s) { return {s.data(), s.size()}; }

// A value for an error message: in single quotes when plain, in double quotes
// and escaped when it is empty or holds spaces, quotes or unprintable bytes.
std::string Quote(std::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c)) || c == '"') {
      plain = false;
    }
  }
  if (plain) return absl::StrCat("'", Av(value), "'");
  return absl::StrCat("\"", absl::CHexEscape(Av(value)), "\"");
}

absl::Status Invalid(std::string_view message) {
  return absl::InvalidArgumentError(Av(message));
}

}  // namespace

bool IsHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(Av(host), '.')) {
    if (label.empty() || label.size() > 63) return false;
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
          c != '_') {
        return false;
      }
    }
  }
  return true;
}

bool IsIpv6Literal(std::string_view host) {
  std::string_view address = host;
  if (size_t pct = host.find('%'); pct != std::string_view::npos) {
    address = host.substr(0, pct);
    if (!IsHostName(host.substr(pct + 1))) return false;
  }
  if (address.size() < 2 || address.size() > 45) return false;
  if (address.find(':') == std::string_view::npos) return false;
  for (char c : address) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' &&
        c != '.') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<HostPort> ParseHostPort(std::string_view address) {
  std::string_view host;
  std::string_view port;
  if (absl::StartsWith(Av(address), "[")) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) {
      return Invalid("'[' without matching ']'");
    }
    host = address.substr(1, close - 1);
    std::string_view rest = address.substr(close + 1);
    if (!absl::StartsWith(Av(rest), ":")) {
      return Invalid("expected ':PORT' after ']'");
    }
    port = rest.substr(1);
    if (!IsIpv6Literal(host)) {
      return Invalid(absl::StrCat(Quote(host), " is not an IPv6 address"));
    }
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return Invalid("missing ':PORT'");
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return Invalid("an IPv6 address needs brackets: [ADDRESS]:PORT");
    }
    if (host.empty()) return Invalid("missing HOST before ':'");
    if (!IsHostName(host)) {
      return Invalid(absl::StrCat(Quote(host), " is not a host name"));
    }
  }
  if (port.empty()) return Invalid("missing PORT after ':'");
  bool digits = port.size() <= 5;
  uint32_t n = 0;
  for (char c : port) {
    digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    if (digits) n = n * 10 + static_cast<uint32_t>(c - '0');
  }
  if (!digits || n > 65535) {
    return Invalid(
        absl::StrCat("port ", Quote(port), " is not a number in 0..65535"));
  }
  return HostPort{std::string(host), static_cast<uint16_t>(n)};
}

std::string JoinHostPort(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) {
    return absl::StrCat("[", Av(host), "]:", port);
  }
  return absl::StrCat(Av(host), ":", port);
}

bool IsWildcardHost(std::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "0::0";
}

}  // namespace rankd
