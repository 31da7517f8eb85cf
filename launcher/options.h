// rankrun's command line: what it is told, parsed and checked, before it
// looks at any daemon or starts anything.
//
//   rankrun [OPTIONS] [--] PROGRAM [ARGS...]
//
// Options come before PROGRAM; the first word that is not an option (or the
// word after "--") is PROGRAM and everything after it is PROGRAM's own.
// Every option is accepted as --name=value and as --name value, with '-'
// and '_' interchangeable in the name (--nproc-per-node = --nproc_per_node).
// Boolean options are --name, --name=true or --name=false. HelpText() lists
// them all.
//
// ParseOptions checks each value on its own and the rules that need no
// daemon (node_rank < nnodes, a coordinator for several nodes, ...). What
// depends on the daemon rankrun reuses (its job id and sizes) is checked
// later, in launcher/launch.h. Every error is InvalidArgument naming the
// option and the value it had, e.g. "--node_rank=2 must be below
// --nnodes(2)"; rankrun prints it and exits with kExitUsage.
//
// Pure: the environment is passed in (only the Kubernetes node index
// variables the daemon reads are consulted, see `node_rank`).
#ifndef RANKD_LAUNCHER_OPTIONS_H_
#define RANKD_LAUNCHER_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rankd::launcher {

// Exit status for a bad command line (and for a PROGRAM that cannot run).
inline constexpr int kExitUsage = 2;
// Exit status when rankrun itself fails (daemon did not start, ...).
inline constexpr int kExitFailure = 1;

// The job id used when none is given and no daemon is reused.
inline constexpr char kDefaultJobId[] = "local";
inline constexpr int64_t kDefaultStopGraceMs = 10'000;
inline constexpr int64_t kDefaultDaemonTimeoutMs = 60'000;
inline constexpr int64_t kDefaultRestartBackoffMs = 1'000;
// The most restarts --max_restarts may allow each rank.
inline constexpr uint32_t kMaxRestartsLimit = 1'000;

// Where the node's daemon comes from.
enum class DaemonMode {
  kAuto,   // Reuse the daemon that answers on the socket, else start one.
  kStart,  // Start one (its socket must be free).
  kReuse,  // Use the running one; fail when none answers in time.
};

struct LaunchOptions {
  // Sizes and place of this node. nullopt = not given: defaulted from the
  // reused daemon's job, else 1 / 1.
  std::optional<uint32_t> nproc_per_node;
  std::optional<uint32_t> nnodes;
  // --node_rank, else RANKD_NODE_INDEX, LWS_WORKER_INDEX or
  // JOB_COMPLETION_INDEX (which must agree when several are set), else
  // nullopt (the reused daemon's node index, else 0). node_rank_source names
  // where it came from ("--node_rank", "LWS_WORKER_INDEX").
  std::optional<uint32_t> node_rank;
  std::string node_rank_source;
  // HOST:PORT of node 0's daemon; "" when not given. Required to start a
  // daemon for a job of more than one node.
  std::string coordinator;
  // Parallel degrees; nullopt = 1 (or the reused daemon's). Data parallel is
  // what is left of the world size.
  std::optional<uint32_t> tensor_parallel;
  std::optional<uint32_t> pipeline_parallel;
  std::optional<uint32_t> expert_parallel;
  // "" = the reused daemon's job, else kDefaultJobId.
  std::string job_id;

  DaemonMode daemon = DaemonMode::kAuto;
  // Unix socket of the node's daemon; "" = not given (see HelpText()).
  std::string rankd_socket;
  // Any daemon address the ranks should use instead (unix:///..., host:port);
  // only for a daemon rankrun reuses. "" = not given.
  std::string target;
  // The job's credentials folder; "" = none given.
  std::string credentials_dir;
  // The rankd binary to start; "" = next to rankrun, else on PATH.
  std::string rankd;
  // TCP listen / advertise addresses of a daemon rankrun starts; "" =
  // chosen by rankrun (see HelpText()).
  std::string rankd_listen;
  std::string rankd_advertise;
  // Where a daemon rankrun starts writes its output ("" = rankrun's
  // stderr).
  std::string rankd_log;
  // Extra flags for a daemon rankrun starts, in order.
  std::vector<std::string> rankd_args;

  int64_t daemon_timeout_ms = kDefaultDaemonTimeoutMs;
  int64_t stop_grace_ms = kDefaultStopGraceMs;
  // How long rankrun stays after every process exited 0 (0 = none).
  int64_t exit_delay_ms = 0;
  // Label every output line of a process "[rank N] ", copying whole lines
  // only; false: the processes write to rankrun's stdout and stderr
  // directly (launcher/process_group.h).
  bool prefix_output = true;

  // In-place recovery (docs/operations.md, "Restarting failed ranks"): how
  // many times each local rank may be restarted into its own rank after
  // it exits non-zero or by a signal (0 = never: any failure stops the
  // job). Above 0, a daemon rankrun starts runs with --recovery=on.
  uint32_t max_restarts = 0;
  // How long rankrun waits before restart k of a rank: (k - 1) times this
  // (RestartBackoff).
  int64_t restart_backoff_ms = kDefaultRestartBackoffMs;
  // --recovery_deadline_ms for a daemon rankrun starts; nullopt = the
  // daemon's default.
  std::optional<int64_t> recovery_deadline_ms;
  // The --recovery mode of a daemon rankrun starts with restarts: "on" (the
  // whole job re-forms) or "domain" (only the hit data-parallel replica:
  // docs/operations.md, "By replica"); nullopt = "on".
  std::optional<std::string> recovery;

  // PROGRAM and its arguments; never empty after a successful parse.
  std::vector<std::string> command;
};

// What the command line asked for: a launch, or the help text.
struct ParsedCommandLine {
  bool help = false;
  LaunchOptions options;
};

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(absl::string_view)>;

// Parses `args` (without argv[0]). InvalidArgument as described above.
absl::StatusOr<ParsedCommandLine> ParseOptions(
    const std::vector<std::string>& args, const EnvLookup& env);

// The text -h / --help prints: usage, every option with its default, the
// environment each process gets, and the exit statuses.
std::string HelpText();

// How long rankrun waits, after a rank's exit, before restart `restart`
// (1, 2, ...) of that rank: none before the first (one lost process is the
// common case, and every moment waited is the whole job's recovery time),
// then (restart - 1) x options.restart_backoff_ms, so that a process that
// fails at once over and over does not spin.
absl::Duration RestartBackoff(const LaunchOptions& options, uint32_t restart);

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_OPTIONS_H_
