// LocalCluster: a real rankd job on this machine for integration tests: one
// `rankd` process per node on loopback TCP ports, each with its own Unix
// socket, plus helpers to start rank processes (tests/rank_worker) against
// them. By default the job gets fresh credentials of its own (like
// tools/run.sh). Everything it starts it stops, by pid. Depends on the
// harness process helpers, common/credentials and the client library (for
// readiness probes).
#ifndef RANKD_TESTS_HARNESS_CLUSTER_H_
#define RANKD_TESTS_HARNESS_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "rankd/v1/admin.pb.h"
#include "tests/harness/process.h"

namespace rankd::testing {

// A member-list condition: every rank of `ranks` is in a round (has sent
// its frame of a round that has not finished).
std::function<bool(const v1::MemberList&)> MembersInRound(
    std::vector<uint32_t> ranks);

struct ClusterOptions {
  // How the daemons authenticate callers (docs/operations.md,
  // "Credentials"):
  //   kGenerated  fresh credentials in dir()/credentials (the default);
  //               the coordinator gets that folder, every other node one
  //               with only its own node.token (and the rank and operator
  //               tokens), as a careful deployment would;
  //   kNone       --allow_unauthenticated=true;
  //   kCustom     nothing added: the test passes its own flags.
  enum class Credentials { kGenerated, kNone, kCustom };
  Credentials credentials = Credentials::kGenerated;
  std::string job_id = "itest";
  uint32_t nnodes = 3;
  uint32_t nproc_per_node = 2;
  uint32_t tensor_parallel = 1;
  uint32_t pipeline_parallel = 1;
  uint32_t expert_parallel = 1;
  int heartbeat_interval_ms = 100;
  int heartbeat_timeout_ms = 1000;
  // Extra flags for every daemon (after the harness's own, which include
  // --kv_shared_prefixes=shared/ for rank_worker's shared counter).
  std::vector<std::string> extra_flags;
  // Extra flags for one daemon (index = node), after extra_flags (so they
  // win when both set a flag).
  std::vector<std::vector<std::string>> node_flags;
  // Extra environment for every daemon and rank process it starts.
  std::map<std::string, std::string> env;
  // The rankd binary the daemons run; empty: this build's daemon/rankd. A
  // drill points it at another build (an older one, to show what it let
  // through); such a daemon gets no flag it may not know
  // (declare_shared_prefix is then ignored).
  std::string rankd_binary;
  // --kv_shared_prefixes=shared/ for rank_worker's shared counter.
  bool declare_shared_prefix = true;
  // When set, Start() starts the coordinator (node 0) alone, waits until it
  // is ready, runs this, and only then starts the other nodes: a drill's
  // way to load the coordinator before the nodes join. An error stops
  // Start().
  std::function<absl::Status()> after_coordinator_ready;
  // How the harness's own readiness probes reach each daemon's TCP listener
  // (TLS files, bearer token). `target` is ignored (set per node).
  ClientOptions probe;
};

class LocalCluster {
 public:
  explicit LocalCluster(ClusterOptions options);
  // Stops every process it started and removes its folder.
  ~LocalCluster();

  // Starts every daemon and waits until each reports readiness (registered
  // with the coordinator) through grpc.health.v1.
  // A daemon that lost its port to another process (FreePort's race) makes
  // it start the whole cluster again on new ports, at most three times.
  absl::Status Start(absl::Duration timeout = absl::Seconds(20));

  const ClusterOptions& options() const { return options_; }
  // For settings that need dir() (certificates, token files); only before
  // Start().
  ClusterOptions& mutable_options() { return options_; }
  uint32_t world_size() const {
    return options_.nnodes * options_.nproc_per_node;
  }
  std::string dir() const { return dir_; }
  // dir()/credentials: node.key and operator.token of the job (with
  // Credentials::kGenerated, from construction on).
  std::string credentials_dir() const { return dir_ + "/credentials"; }
  // The operator token there ("" when there is none).
  std::string operator_token() const;
  // Rank `rank`'s own token for joining through `node` (default: the node
  // it belongs to node-major), minted from the node key as a launcher
  // does; "" without credentials.
  std::string rank_token(uint32_t rank) const;
  std::string rank_token(uint32_t rank, uint32_t node) const;
  // How an operator reaches node `node`'s TCP listener: options().probe
  // with that target and the operator token.
  ClientOptions AdminOptions(uint32_t node) const;
  // The credentials folder node `node`'s daemon gets with kGenerated:
  // credentials_dir() for node 0, else one made with only that node's
  // node.token plus the operator token.
  absl::StatusOr<std::string> NodeCredentials(uint32_t node) const;
  // "unix:///tmp/.../node1.sock"
  std::string socket_target(uint32_t node) const;
  // "/tmp/.../node1.sock"
  std::string socket_path(uint32_t node) const;
  // "127.0.0.1:PORT"
  std::string tcp_address(uint32_t node) const;
  ChildProcess& daemon(uint32_t node) { return daemons_[node]; }
  // Starts node `node`'s daemon again with the arguments it first had (the
  // same port and socket; a new daemon incarnation) once the old one
  // exited, and waits until it reports readiness. FailedPrecondition while
  // the old one still runs. Its log is dir()/daemon<N>.<restart>.log.
  absl::Status RestartDaemon(uint32_t node,
                             absl::Duration timeout = absl::Seconds(20));

  // The environment of a rank process joining as `rank` through `node`:
  // options().env, then `extra`, and the rank's own token in
  // $RANKD_RANK_TOKEN unless one of them sets it.
  std::map<std::string, std::string> RankEnv(
      uint32_t node, uint32_t rank,
      std::map<std::string, std::string> extra = {}) const;

  // Starts one rank process (tests/rank_worker) on `node` with `args`
  // (--target, --job_id, --local_rank and --world_size are added), with its
  // own rank token in $RANKD_RANK_TOKEN (for --rank=N in `args`, rank N's)
  // unless options().env sets one.
  absl::StatusOr<ChildProcess> StartWorker(
      uint32_t node, uint32_t local_rank, const std::vector<std::string>& args);

  // Starts workers for every rank, node-major. Worker logs are
  // dir()/rank<R>.log.
  absl::StatusOr<std::vector<ChildProcess>> StartAllWorkers(
      const std::vector<std::string>& args);

  // Polls node `node`'s view of the job (Admin.GetJob, every 20 ms: a
  // condition, not a sleep) until `done` holds for it; returns that status.
  // DeadlineExceeded after `patience`, with the last status seen.
  absl::StatusOr<v1::JobStatus> AwaitJob(
      uint32_t node, const std::function<bool(const v1::JobStatus&)>& done,
      absl::Duration patience = absl::Seconds(20));

  // Polls node `node`'s member list (Admin.ListMembers) the same way until
  // `done` holds for it. DeadlineExceeded after `patience`.
  absl::Status AwaitMembers(
      uint32_t node, const std::function<bool(const v1::MemberList&)>& done,
      absl::Duration patience = absl::Seconds(20));

 private:
  // Waits until daemon `n` reports readiness, or `deadline` (MonotonicNow).
  absl::Status WaitReady(uint32_t n, absl::Time deadline);

  // One try of Start.
  absl::Status StartOnce(absl::Duration timeout);

  ClusterOptions options_;
  std::string dir_;
  std::vector<int> ports_;
  std::vector<ChildProcess> daemons_;
  // Each daemon's argv, for RestartDaemon, and how often it restarted.
  std::vector<std::vector<std::string>> argvs_;
  std::vector<int> restarts_;
};

// Waits for every worker to exit within `timeout`; returns their wait
// statuses (-1 for a worker still running, which is then killed).
std::vector<int> WaitAll(std::vector<ChildProcess>& workers,
                         absl::Duration timeout);

// The last "ERROR ..." line a worker printed (prefix stripped), or "".
std::string LastErrorLine(ChildProcess& worker);

// Lines of `text` that start with `prefix` (prefix stripped).
std::vector<std::string> LinesWithPrefix(const std::string& text,
                                         const std::string& prefix);

}  // namespace rankd::testing

#endif  // RANKD_TESTS_HARNESS_CLUSTER_H_
