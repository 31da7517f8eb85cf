// --help and --version for rankd's commands (rankd, and any other binary
// whose flags are absl flags), the way Unix commands behave: --help lists the
// command's own flags with their help text and default and exits 0.
//
// Why not absl's own --help: it lists only flags defined in a file named
// after the binary's main file ("No flags matched" for rankd, whose flags
// live in daemon/flags.cc) and exits with status 1.
//
// Depends on absl only.
#ifndef RANKD_COMMON_COMMAND_HELP_H_
#define RANKD_COMMON_COMMAND_HELP_H_

#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"

namespace rankd {

// rankd's release version, printed by every command's --version and written
// into the installed pkg-config and CMake package files.
inline constexpr char kRankdVersion[] = "0.1.0";

// The help text: `usage`, then every registered absl flag defined in a source
// file whose path ends with one of `flag_files` (e.g. "daemon/flags.cc"),
// sorted by name, as "  --name=<default>  help" paragraphs. Flags of other
// files (absl's own, libraries') are not listed.
std::string FlagsHelp(absl::string_view usage,
                      std::initializer_list<absl::string_view> flag_files);

// Handles the informational flags before absl::ParseCommandLine sees them:
// when argv[1..] holds --help, -h, -help or --helpfull, prints FlagsHelp to
// stdout and returns true; when it holds --version, prints
// "<program> <kRankdVersion>" and returns true. The caller then exits 0.
// Returns false otherwise (nothing printed). Arguments after "--" are not
// looked at.
bool HandleHelpOrVersion(int argc, char** argv, absl::string_view program,
                         absl::string_view usage,
                         std::initializer_list<absl::string_view> flag_files);

}  // namespace rankd

#endif  // RANKD_COMMON_COMMAND_HELP_H_
