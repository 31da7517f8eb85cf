#include "common/command_help.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rankd {
namespace {

// Wraps `text` at 76 columns, each line indented by `indent`.
void AppendWrapped(absl::string_view text, absl::string_view indent,
                   std::string* out) {
  constexpr size_t kWidth = 76;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() &&
        indent.size() + line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(out, indent, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(out, indent, line, "\n");
}

}  // namespace

std::string FlagsHelp(absl::string_view usage,
                      std::initializer_list<absl::string_view> flag_files) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    for (absl::string_view suffix : flag_files) {
      if (absl::EndsWith(file, suffix)) {
        flags.push_back(flag);
        break;
      }
    }
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  std::string out = absl::StrCat(usage, "\n\nFlags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    const std::string value = flag->DefaultValue();
    absl::StrAppend(&out, "  --", flag->Name(),
                    value.empty() ? "" : absl::StrCat("=", value), "\n");
    AppendWrapped(flag->Help(), "      ", &out);
  }
  absl::StrAppend(&out,
                  "\n  --help      print this help and exit\n"
                  "  --version   print the version and exit\n");
  return out;
}

bool HandleHelpOrVersion(int argc, char** argv, absl::string_view program,
                         absl::string_view usage,
                         std::initializer_list<absl::string_view> flag_files) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h" || arg == "-help" ||
        arg == "--helpfull") {
      std::fputs(FlagsHelp(usage, flag_files).c_str(), stdout);
      return true;
    }
    if (arg == "--version") {
      std::printf("%s %s\n", std::string(program).c_str(), kRankdVersion);
      return true;
    }
  }
  return false;
}

}  // namespace rankd
