// Running tools/run.sh from a test (//tests:run_sh_test,
// //tests:run_sh_recover_test): with the binaries the test depends on
// (RANKD_BIN_DIR = the runfiles root: no install, no build), its output in
// a log, and the checks that it left nothing behind. Depends on the
// harness's ChildProcess and abseil.
#ifndef RANKD_TESTS_HARNESS_RUN_SH_H_
#define RANKD_TESTS_HARNESS_RUN_SH_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace rankd::testing {

struct RunResult {
  // run.sh's exit status; -1 when it did not exit normally or in time.
  int exit_code = -1;
  // stdout and stderr, as written.
  std::string output;
};

// Runs `bash tools/run.sh args...` and waits up to `timeout`; a run still
// going then is stopped (by pid) and says so at the end of its output.
RunResult RunScript(const std::vector<std::string>& args,
                    absl::Duration timeout = absl::Seconds(150));

// The run's folder (/tmp/rankd-run-XXXXXX), from the socket paths run.sh
// prints; "" when it printed none.
std::string RunDir(const std::string& output);

// "PID: command line" of every process whose command line mentions
// `needle`.
std::vector<std::string> ProcessesMentioning(const std::string& needle);

// Expects (gtest) that the run printed its folder and that no process
// mentioning it is left.
void ExpectNothingLeft(const RunResult& run);

}  // namespace rankd::testing

#endif  // RANKD_TESTS_HARNESS_RUN_SH_H_
