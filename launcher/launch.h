// Launch: one node's part of a job, from parsed options to exit status.
//
//   1. Finds PROGRAM (on PATH; a .py script runs under $RANKD_PYTHON, else
//      /usr/bin/python3).
//   2. Finds the node's daemon (options.daemon): reuses one that answers on
//      its socket (or --target), after checking that the job it serves
//      agrees with every size the command line gave (and taking the ones it
//      did not give from it); or starts one (node 0 of several coordinates
//      on the --coordinator port, the others register with it; a
//      single-node job without --credentials_dir gets fresh credentials in
//      a private temporary folder) and waits until it is ready.
//   3. Starts nproc_per_node processes in one process group, each with the
//      environment the rankd libraries read (HelpText() in options.h).
//   4. Supervises them: forwards SIGINT, SIGTERM and SIGHUP to the group;
//      when one exits non-zero or by a signal, starts a new process for
//      its rank while options.max_restarts allows (after a backoff,
//      RANKD_RESTART_COUNT telling it which restart it is), else SIGTERMs
//      the rest and SIGKILLs what is left after the grace; a daemon rankrun
//      started that dies stops the job too. Nothing is restarted once
//      rankrun is stopping. Every wait has a deadline.
//   5. Cleans up: kills what the processes left in their group, reaps them,
//      stays options.exit_delay_ms after a clean exit, stops the daemon it
//      started (SIGTERM, then SIGKILL after the grace) and removes its
//      temporary folder.
// Messages go to stderr, prefixed "rankrun: ", e.g.
//   rankrun: local rank 1 (rank 1, pid 4242) exited with status 3; stopped
//   the other 1 process(es)
//   rankrun: rank 5 (local rank 1, pid 4243) was killed by signal 9
//   (Killed); restarting it (restart 1 of 3)
//
// Step 1 is program.h, the job's sizes job_layout.h, step 2
// daemon_setup.cc, steps 3 and 4 supervise.cc, over one Launcher
// (launcher.h).
//
// Precondition: the caller has blocked SIGINT, SIGTERM, SIGHUP and SIGCHLD
// in every thread (Launch reads them from a signalfd) and ignores SIGPIPE;
// main.cc does this first thing.
#ifndef RANKD_LAUNCHER_LAUNCH_H_
#define RANKD_LAUNCHER_LAUNCH_H_

#include <string>
#include <vector>

#include "launcher/options.h"

namespace rankd::launcher {

// What Launch needs to know about its own process.
struct LaunchContext {
  // The path rankrun was started by when it has a '/' (argv[0]), else "";
  // rankd is looked for beside it and beside /proc/self/exe.
  std::string self_path;
  // rankrun's environment, "NAME=value" each; the processes inherit it.
  std::vector<std::string> environment;
};

// The signals Launch expects blocked (see the precondition above).
void BlockLauncherSignals();

// Runs the job and returns rankrun's exit status: 0 when every process
// exited 0; the first failed process's status (128 + N for signal N);
// kExitUsage when PROGRAM cannot run or the daemon's job contradicts the
// options; kExitFailure when the daemon could not be started or reached.
int Launch(const LaunchOptions& options, const LaunchContext& context);

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_LAUNCH_H_
