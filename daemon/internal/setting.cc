// daemon/internal/setting.cc: see setting.h.
#include "daemon/internal/setting.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rankd::internal {
namespace {

// Debian's abseil has its own string_view, distinct from std::string_view.
absl::string_view Av(std::string_view s) { return {s.data(), s.size()}; }

std::string FlagName(std::string_view name) {
  return absl::StrCat("--", Av(name));
}

std::string EnvName(std::string_view name) {
  return absl::StrCat("RANKD_", absl::AsciiStrToUpper(Av(name)));
}

}  // namespace

std::string Show(std::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c)) || c == '"') {
      plain = false;
    }
  }
  if (plain) return std::string(value);
  return absl::StrCat("\"", absl::CHexEscape(Av(value)), "\"");
}

std::string Setting::Assignment() const {
  return absl::StrCat(source, "=", Show(value));
}

std::string Ref(const Setting& s, uint64_t value) {
  return absl::StrCat(s.source, "(", value, ")");
}

std::optional<Setting> SettingLookup::Given(
    const std::optional<std::string>& flag, std::string_view name) const {
  if (flag.has_value()) return Setting{*flag, FlagName(name)};
  std::string env_name = EnvName(name);
  if (std::optional<std::string> v = env_(env_name); v.has_value()) {
    return Setting{*v, std::move(env_name)};
  }
  return std::nullopt;
}

std::optional<Setting> SettingLookup::Kube(std::string_view name) const {
  std::optional<std::string> v = env_(name);
  if (!v.has_value() || v->empty()) return std::nullopt;
  return Setting{*v, std::string(name)};
}

Setting SettingLookup::GivenOr(const std::optional<std::string>& flag,
                               std::string_view name,
                               std::string fallback) const {
  std::optional<Setting> s = Given(flag, name);
  return s.has_value() ? *s : Default(name, std::move(fallback));
}

Setting Default(std::string_view name, std::string value) {
  return Setting{std::move(value), FlagName(name)};
}

absl::Status Invalid(std::string_view message) {
  return absl::InvalidArgumentError(Av(message));
}

absl::StatusOr<uint32_t> ParseUint32(const Setting& s) {
  const std::string& v = s.value;
  bool digits = !v.empty() && v.size() <= 10;
  for (char c : v)
    digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
  uint64_t n = 0;
  if (digits) {
    for (char c : v) n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!digits || n > 0xFFFFFFFFull) {
    return Invalid(absl::StrCat(s.Assignment(),
                                " is not a whole number in 0..4294967295"));
  }
  return static_cast<uint32_t>(n);
}

absl::StatusOr<bool> ParseBool(const Setting& s) {
  const std::string v = absl::AsciiStrToLower(s.value);
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return Invalid(
      absl::StrCat(s.Assignment(), " is not a boolean (true or false)"));
}

absl::Status RequirePositive(const Setting& s, uint32_t value) {
  if (value == 0) return Invalid(absl::StrCat(s.Assignment(), " must be >= 1"));
  return absl::OkStatus();
}

absl::StatusOr<HostPort> ParseAddress(const Setting& s) {
  absl::StatusOr<HostPort> hp = ParseHostPort(s.value);
  if (!hp.ok()) {
    return Invalid(absl::StrCat(s.Assignment(),
                                " is not HOST:PORT: ", hp.status().message()));
  }
  return hp;
}

absl::StatusOr<std::optional<Number>> ParseOptional(
    const std::optional<Setting>& s) {
  if (!s.has_value()) return std::optional<Number>();
  absl::StatusOr<uint32_t> v = ParseUint32(*s);
  if (!v.ok()) return v.status();
  return std::optional<Number>(Number{*v, *s});
}

absl::StatusOr<Number> ResolveAgreeing(
    const std::optional<Setting>& explicit_setting,
    const std::vector<std::optional<Setting>>& kubernetes,
    std::string_view name, uint32_t fallback) {
  std::vector<Number> given;
  absl::StatusOr<std::optional<Number>> e = ParseOptional(explicit_setting);
  if (!e.ok()) return e.status();
  if (e->has_value()) given.push_back(**e);
  for (const std::optional<Setting>& k : kubernetes) {
    absl::StatusOr<std::optional<Number>> n = ParseOptional(k);
    if (!n.ok()) return n.status();
    if (n->has_value()) given.push_back(**n);
  }
  for (size_t i = 1; i < given.size(); ++i) {
    if (given[i].value != given[0].value) {
      return Invalid(absl::StrCat(given[0].setting.Assignment(), " but ",
                                  given[i].setting.Assignment(),
                                  "; they must agree (drop one or fix it)"));
    }
  }
  if (!given.empty()) return given[0];
  return Number{fallback, Default(name, absl::StrCat(fallback))};
}

}  // namespace rankd::internal
