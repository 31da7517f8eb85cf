// program.cc: see program.h.

#include "launcher/program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rankd::launcher {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::map<std::string, std::string> EnvMap(
    const std::vector<std::string>& environment) {
  std::map<std::string, std::string> env;
  for (const std::string& entry : environment) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> EnvList(const std::map<std::string, std::string>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

absl::StatusOr<std::string> FindExecutable(const std::string& name,
                                           const std::string& path_var,
                                           absl::string_view what) {
  if (name.find('/') != std::string::npos) {
    if (IsExecutableFile(name)) return name;
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", name, " is not an executable file"));
  }
  for (absl::string_view dir : absl::StrSplit(path_var, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", name, " is not on PATH (", path_var, ")"));
}

absl::StatusOr<std::vector<std::string>> ResolveCommand(
    const std::vector<std::string>& command,
    const std::map<std::string, std::string>& env) {
  auto path_it = env.find("PATH");
  const std::string path_var =
      path_it != env.end() ? path_it->second : "/usr/bin:/bin";
  std::vector<std::string> argv = command;
  if (absl::EndsWith(command[0], ".py")) {
    struct stat st;
    if (::stat(command[0].c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PROGRAM ", command[0], " is not a file"));
    }
    auto python = env.find("RANKD_PYTHON");
    const std::string interpreter =
        python != env.end() && !python->second.empty() ? python->second
                                                       : "/usr/bin/python3";
    absl::StatusOr<std::string> resolved = FindExecutable(
        interpreter, path_var, "the Python interpreter ($RANKD_PYTHON)");
    if (!resolved.ok()) return resolved.status();
    argv.insert(argv.begin(), *resolved);
    return argv;
  }
  absl::StatusOr<std::string> resolved =
      FindExecutable(command[0], path_var, "PROGRAM");
  if (!resolved.ok()) return resolved.status();
  argv[0] = *resolved;
  return argv;
}

absl::StatusOr<std::string> FindRankd(const std::string& given,
                                      const std::string& self_path,
                                      const std::string& path_var) {
  if (!given.empty()) return FindExecutable(given, path_var, "--rankd");
  // Installed side by side (bin/), or Bazel's layout (launcher/ next to
  // daemon/): beside the path rankrun was started by, then beside the
  // binary itself.
  std::vector<std::filesystem::path> dirs;
  if (!self_path.empty()) {
    dirs.push_back(std::filesystem::path(self_path).parent_path());
  }
  std::error_code ec;
  std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", ec);
  if (!ec) dirs.push_back(self.parent_path());
  for (const std::filesystem::path& dir : dirs) {
    for (const std::filesystem::path& candidate :
         {dir / "rankd", dir.parent_path() / "daemon" / "rankd"}) {
      if (IsExecutableFile(candidate.string())) return candidate.string();
    }
  }
  return FindExecutable("rankd", path_var, "rankd (set --rankd=PATH)");
}

}  // namespace rankd::launcher
