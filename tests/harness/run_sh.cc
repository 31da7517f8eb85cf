// tools/run.sh from a test (see run_sh.h).
#include "tests/harness/run_sh.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/harness/process.h"

namespace rankd::testing {

RunResult RunScript(const std::vector<std::string>& args,
                    absl::Duration timeout) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  const std::string bin_dir =
      srcdir ? absl::StrCat(srcdir, "/", workspace ? workspace : "rankd") : ".";
  std::vector<std::string> argv = {"/bin/bash", Runfile("tools/run.sh")};
  argv.insert(argv.end(), args.begin(), args.end());
  static int runs = 0;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string log = absl::StrCat(tmp ? tmp : "/tmp", "/run_sh_", getpid(),
                                       "_", ++runs, ".log");
  RunResult result;
  auto child = ChildProcess::Spawn(argv, {{"RANKD_BIN_DIR", bin_dir}}, log);
  if (!child.ok()) {
    result.output = child.status().ToString();
    return result;
  }
  const std::optional<int> status = child->Wait(timeout);
  result.output = child->ReadLog();
  if (!status.has_value()) {
    child->Stop();
    result.output += absl::StrCat("\n(run.sh did not finish within ",
                                  absl::FormatDuration(timeout), ")");
    return result;
  }
  result.exit_code = WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  return result;
}

std::string RunDir(const std::string& output) {
  const size_t at = output.find("unix:///tmp/rankd-run-");
  if (at == std::string::npos) return "";
  const size_t start = at + strlen("unix://");
  return output.substr(start,
                       output.find('/', start + strlen("/tmp/")) - start);
}

std::vector<std::string> ProcessesMentioning(const std::string& needle) {
  std::vector<std::string> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(absl::StrCat("/proc/", e->d_name, "/cmdline"));
    std::stringstream s;
    s << in.rdbuf();
    std::string cmdline = s.str();
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (absl::StrContains(cmdline, needle)) {
      found.push_back(absl::StrCat(e->d_name, ": ", cmdline));
    }
  }
  closedir(proc);
  return found;
}

void ExpectNothingLeft(const RunResult& run) {
  const std::string dir = RunDir(run.output);
  ASSERT_FALSE(dir.empty()) << run.output;
  const std::vector<std::string> left = ProcessesMentioning(dir);
  EXPECT_TRUE(left.empty()) << "left behind: " << left.front();
}

}  // namespace rankd::testing
