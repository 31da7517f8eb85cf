// rankrun: starts one node's ranks of a rankd job, the way torchrun does
// (launcher/launch.h; `rankrun --help` lists the options).
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "launcher/launch.h"
#include "launcher/options.h"
#include "launcher/process_group.h"

extern char** environ;

int main(int argc, char** argv) {
  using rankd::launcher::WriteAll;
  // First, before any thread exists, so every thread inherits the mask.
  rankd::launcher::BlockLauncherSignals();
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<rankd::launcher::ParsedCommandLine> parsed =
      rankd::launcher::ParseOptions(
          args, [](absl::string_view name) -> std::optional<std::string> {
            const char* v = std::getenv(std::string(name).c_str());
            if (v == nullptr) return std::nullopt;
            return std::string(v);
          });
  if (!parsed.ok()) {
    WriteAll(STDERR_FILENO,
             absl::StrCat("rankrun: ", parsed.status().message(), "\n"));
    return rankd::launcher::kExitUsage;
  }
  if (parsed->help) {
    WriteAll(STDOUT_FILENO, rankd::launcher::HelpText());
    return 0;
  }
  rankd::launcher::LaunchContext context;
  if (std::string(argv[0]).find('/') != std::string::npos) {
    context.self_path = argv[0];
  }
  for (char** e = environ; *e != nullptr; ++e) {
    context.environment.emplace_back(*e);
  }
  return rankd::launcher::Launch(parsed->options, context);
}
