// daemon/internal/setting.h: one configuration setting -- its value and
// where it came from -- and the strict parsers every stage of ResolveConfig
// (daemon/config.h) applies to it. Errors are InvalidArgument naming the
// setting's flag or variable and its value, e.g. "--world_size=x is not a
// whole number in 0..4294967295". Private to //daemon. Depends on
// daemon/config.h (EnvLookup, HostPort) and abseil.
#ifndef RANKD_DAEMON_INTERNAL_SETTING_H_
#define RANKD_DAEMON_INTERNAL_SETTING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/config.h"

namespace rankd::internal {

// Renders a value for an error message: as is when it is plain, quoted and
// escaped when it is empty or has spaces or unprintable characters.
std::string Show(std::string_view value);

// One setting's value and the name of where it came from: "--world_size"
// for a flag, "RANKD_WORLD_SIZE" or "LWS_GROUP_SIZE" for a variable, and the
// flag's name for a default (that is what a person would set to change it).
struct Setting {
  std::string value;
  std::string source;

  // "--world_size=7", "RANKD_WORLD_SIZE=7".
  std::string Assignment() const;
};

// "--world_size(8)" style reference to an already-parsed number.
std::string Ref(const Setting& s, uint64_t value);

// Where settings are looked up: a flag, else its RANKD_ variable (taken
// literally, even when empty), else a Kubernetes variable (empty counts as
// absent). `env` must outlive the lookup.
class SettingLookup {
 public:
  explicit SettingLookup(const EnvLookup& env) : env_(env) {}

  // The explicit value of setting `name`: its flag, else its RANKD_
  // variable; nullopt when neither is given.
  std::optional<Setting> Given(const std::optional<std::string>& flag,
                               std::string_view name) const;
  // The Kubernetes variable `name`; nullopt when absent or empty.
  std::optional<Setting> Kube(std::string_view name) const;
  // Given(flag, name), else `fallback` named after the flag.
  Setting GivenOr(const std::optional<std::string>& flag, std::string_view name,
                  std::string fallback) const;

 private:
  const EnvLookup& env_;
};

// `value` as the default of setting `name` (named after its flag).
Setting Default(std::string_view name, std::string value);

// InvalidArgument with `message`.
absl::Status Invalid(std::string_view message);

// Strict unsigned decimal: digits only, at most 10 of them, <= 2^32-1.
absl::StatusOr<uint32_t> ParseUint32(const Setting& s);
// true/1/yes or false/0/no, in any case.
absl::StatusOr<bool> ParseBool(const Setting& s);
// InvalidArgument "<assignment> must be >= 1" when `value` is 0.
absl::Status RequirePositive(const Setting& s, uint32_t value);
// HOST:PORT (common/host_port.h), the parser's reason in the error.
absl::StatusOr<HostPort> ParseAddress(const Setting& s);

// Parsed numeric setting plus where it came from.
struct Number {
  uint32_t value;
  Setting setting;
  std::string Ref() const { return internal::Ref(setting, value); }
};

// The number `s` holds, or nullopt when `s` is absent.
absl::StatusOr<std::optional<Number>> ParseOptional(
    const std::optional<Setting>& s);

// Resolves a number that may be given explicitly and by Kubernetes
// variables. All given values must agree (InvalidArgument naming two that
// do not); the explicit one wins, then the Kubernetes ones in order, then
// `fallback` as the default of `name`.
absl::StatusOr<Number> ResolveAgreeing(
    const std::optional<Setting>& explicit_setting,
    const std::vector<std::optional<Setting>>& kubernetes,
    std::string_view name, uint32_t fallback);

}  // namespace rankd::internal

#endif  // RANKD_DAEMON_INTERNAL_SETTING_H_
