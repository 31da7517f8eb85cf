// program.h: finding what rankrun runs, PROGRAM and the rankd daemon, and
// the environment both are given.
//
// rankrun resolves PROGRAM before it starts anything, so a typo costs no
// daemon start; a ".py" PROGRAM runs under $RANKD_PYTHON (else
// /usr/bin/python3). rankd is looked for beside rankrun (installed side by
// side, or Bazel's layout) before PATH.
//
// Depends only on abseil and the C++ standard library (stat, access).
#ifndef RANKD_LAUNCHER_PROGRAM_H_
#define RANKD_LAUNCHER_PROGRAM_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::launcher {

// "NAME=value" entries as a map; later entries win, entries without '='
// are dropped.
std::map<std::string, std::string> EnvMap(
    const std::vector<std::string>& environment);

// The map back as "NAME=value" entries, sorted by name.
std::vector<std::string> EnvList(const std::map<std::string, std::string>& m);

// `name` as a path: itself when it has a '/', else the first executable
// file named `name` in `path_var`'s folders (':'-separated; an empty entry
// is "."). Returns InvalidArgument starting with `what` when there is none.
absl::StatusOr<std::string> FindExecutable(const std::string& name,
                                           const std::string& path_var,
                                           absl::string_view what);

// PROGRAM ARGS (`command`, not empty) as an argv whose argv[0] is a path:
// PROGRAM found on env's PATH (else /usr/bin:/bin), or, for a PROGRAM ending
// ".py" that is a file, the interpreter ($RANKD_PYTHON, else
// /usr/bin/python3) followed by the command. Returns InvalidArgument naming
// PROGRAM or the interpreter when it cannot run.
absl::StatusOr<std::vector<std::string>> ResolveCommand(
    const std::vector<std::string>& command,
    const std::map<std::string, std::string>& env);

// The rankd binary: `given` (--rankd) when not empty, else "rankd" beside
// `self_path` (rankrun's argv[0], may be empty) or beside /proc/self/exe
// (also ../daemon/rankd, Bazel's layout), else on `path_var`. Returns
// InvalidArgument suggesting --rankd=PATH when none is found.
absl::StatusOr<std::string> FindRankd(const std::string& given,
                                      const std::string& self_path,
                                      const std::string& path_var);

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_PROGRAM_H_
