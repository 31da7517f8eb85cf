// The node's rankd daemon as rankrun sees it: a running one it asks about
// (is it ready, what job does it run), or one it starts and later stops.
//
// Readiness is rankd's own: grpc.health.v1 service "readiness" SERVING,
// which means the daemon is registered with its coordinator and the job has
// not failed (the Kubernetes readiness probe of deploy/ uses the same).
// Every call here is bounded by the deadline or timeout it is given.
//
// Depends on //client:admin_client (the probes), launcher/child_process.h,
// POSIX and absl. Not thread-safe.
#ifndef RANKD_LAUNCHER_NODE_DAEMON_H_
#define RANKD_LAUNCHER_NODE_DAEMON_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "launcher/child_process.h"

namespace rankd::launcher {

// The job a running daemon serves, from its Admin service.
struct DaemonJob {
  std::string job_id;
  uint32_t world_size = 0;
  uint32_t nnodes = 0;
  uint32_t nproc_per_node = 0;
  // The daemon's own node index.
  uint32_t node_index = 0;
  uint32_t tensor_parallel = 1;
  uint32_t pipeline_parallel = 1;
  uint32_t expert_parallel = 1;
};

// True when something answers gRPC at `client.target` within `timeout`
// (whether ready or not). For a Unix socket, false at once when the socket
// file does not exist.
bool DaemonAnswers(const ClientOptions& client, absl::Duration timeout);

// OK once the daemon at `client.target` reports readiness, polling until
// `deadline` (on MonotonicNow's clock, common/monotonic_clock.h). Stops early
// with the status `stop()` returns when that is not OK (e.g. a signal arrived,
// or a daemon rankrun started exited). DeadlineExceeded names the target and
// the last answer otherwise.
absl::Status WaitUntilReady(const ClientOptions& client, absl::Time deadline,
                            const std::function<absl::Status()>& stop);

// The job the daemon at `client.target` serves. Errors name the target.
absl::StatusOr<DaemonJob> DescribeDaemon(const ClientOptions& client);

// The rank tokens of the node's local ranks, by local rank, which the
// daemon at `client.target` (a Unix socket) hands to its first caller when
// it runs with --issue_rank_tokens (Rank.IssueRankTokens); empty when the
// daemon runs without authentication. The daemon's error otherwise
// (FailedPrecondition: it does not issue them; PermissionDenied: they went
// to another caller already), naming the target.
absl::StatusOr<std::vector<std::string>> IssueRankTokens(
    const ClientOptions& client, const std::string& job_id);

// A daemon rankrun started: stopped (SIGTERM, then SIGKILL after a grace)
// when Stop() is called or the object is destroyed.
class StartedDaemon {
 public:
  // Starts `argv` (argv[0] the rankd binary) with `env`; its stdout and
  // stderr go to `output_fd`. It leads a process group of its own, so a
  // terminal's Ctrl-C does not reach it before the ranks have stopped.
  static absl::StatusOr<StartedDaemon> Start(std::vector<std::string> argv,
                                             std::vector<std::string> env,
                                             int output_fd);

  StartedDaemon() = default;
  StartedDaemon(StartedDaemon&& other) noexcept
      : child_(std::move(other.child_)),
        stopped_(std::exchange(other.stopped_, true)) {}
  StartedDaemon& operator=(StartedDaemon&& other) noexcept {
    if (this != &other) {
      Stop(absl::Seconds(5));
      child_ = std::move(other.child_);
      stopped_ = std::exchange(other.stopped_, true);
    }
    return *this;
  }
  ~StartedDaemon() { Stop(absl::Seconds(5)); }

  pid_t pid() const { return child_.pid(); }
  // The wait status once it has exited by itself, else nullopt.
  std::optional<int> Poll() { return child_.Poll(); }
  // SIGTERM, then SIGKILL after `grace`; reaps it. The wait status, or
  // nullopt when it was already stopped (or never started).
  std::optional<int> Stop(absl::Duration grace);

 private:
  ChildProcess child_;
  bool stopped_ = true;
};

}  // namespace rankd::launcher

#endif  // RANKD_LAUNCHER_NODE_DAEMON_H_
