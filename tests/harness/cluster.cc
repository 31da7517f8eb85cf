#include "tests/harness/cluster.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "common/credentials.h"
#include "common/monotonic_clock.h"

namespace rankd::testing {

LocalCluster::LocalCluster(ClusterOptions options)
    : options_(std::move(options)), dir_(MakeTempDir("rankd-cluster")) {
  if (options_.credentials == ClusterOptions::Credentials::kGenerated) {
    absl::Status created = CreateCredentials(credentials_dir());
    if (!created.ok()) {
      std::fprintf(stderr, "cannot create test credentials: %s\n",
                   created.ToString().c_str());
      std::abort();
    }
  }
}

std::string LocalCluster::operator_token() const {
  return ReadCredentialFile(credentials_dir(), kOperatorTokenFile).value_or("");
}

std::string LocalCluster::rank_token(uint32_t rank) const {
  return rank_token(rank, rank / options_.nproc_per_node);
}

std::string LocalCluster::rank_token(uint32_t rank, uint32_t node) const {
  auto key = ReadCredentialFile(credentials_dir(), kNodeKeyFile);
  if (!key.ok()) return "";
  return RankToken(NodeToken(*key, options_.job_id, node), options_.job_id,
                   rank);
}

absl::StatusOr<std::string> LocalCluster::NodeCredentials(uint32_t node) const {
  if (node == 0) return credentials_dir();
  auto key = ReadCredentialFile(credentials_dir(), kNodeKeyFile);
  if (!key.ok()) return key.status();
  const std::string dir = absl::StrCat(dir_, "/credentials-node", node);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(absl::StrCat(dir, "/", kNodeTokenFile))
      << NodeToken(*key, options_.job_id, node) << "\n";
  for (const char* name : {kOperatorTokenFile}) {
    std::filesystem::copy_file(
        absl::StrCat(credentials_dir(), "/", name),
        absl::StrCat(dir, "/", name),
        std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("copying ", name, ": ", ec.message()));
    }
  }
  return dir;
}

ClientOptions LocalCluster::AdminOptions(uint32_t node) const {
  ClientOptions options = options_.probe;
  options.target = tcp_address(node);
  options.bearer_token = operator_token();
  return options;
}

LocalCluster::~LocalCluster() {
  // Coordinator last: it waits for the other daemons' event streams to end
  // before it exits, so stopping it first costs its whole shutdown grace.
  for (auto d = daemons_.rbegin(); d != daemons_.rend(); ++d) {
    d->Stop(absl::Seconds(5));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string LocalCluster::socket_target(uint32_t node) const {
  return absl::StrCat("unix://", socket_path(node));
}

std::string LocalCluster::socket_path(uint32_t node) const {
  return absl::StrCat(dir_, "/node", node, ".sock");
}

std::string LocalCluster::tcp_address(uint32_t node) const {
  return absl::StrCat("127.0.0.1:", ports_[node]);
}

absl::Status LocalCluster::Start(absl::Duration timeout) {
  // FreePort's port is free when it returns, not when the daemon binds it:
  // another test's connection may take it meanwhile. Then every daemon
  // started is stopped (by pid) and the cluster starts again on new ports.
  absl::Status started;
  for (int attempt = 0; attempt < 3; ++attempt) {
    started = StartOnce(timeout);
    if (started.ok() ||
        !absl::StrContains(started.message(), "Address already in use")) {
      return started;
    }
    daemons_.clear();
    argvs_.clear();
    restarts_.clear();
    ports_.clear();
  }
  return started;
}

absl::Status LocalCluster::StartOnce(absl::Duration timeout) {
  // Distinct ports (FreePort never repeats one): a node listening on the
  // coordinator's address would take the coordinator's role.
  for (uint32_t n = 0; n < options_.nnodes; ++n) ports_.push_back(FreePort());
  absl::Time deadline = MonotonicNow() + timeout;
  for (uint32_t n = 0; n < options_.nnodes; ++n) {
    if (n == 1 && options_.after_coordinator_ready) {
      if (auto s = WaitReady(0, deadline); !s.ok()) return s;
      if (auto s = options_.after_coordinator_ready(); !s.ok()) return s;
    }
    std::vector<std::string> argv = {
        options_.rankd_binary.empty() ? Runfile("daemon/rankd")
                                      : options_.rankd_binary,
        absl::StrCat("--job_id=", options_.job_id),
        absl::StrCat("--nnodes=", options_.nnodes),
        absl::StrCat("--node_index=", n),
        absl::StrCat("--nproc_per_node=", options_.nproc_per_node),
        absl::StrCat("--tensor_parallel=", options_.tensor_parallel),
        absl::StrCat("--pipeline_parallel=", options_.pipeline_parallel),
        absl::StrCat("--expert_parallel=", options_.expert_parallel),
        absl::StrCat("--listen=", tcp_address(n)),
        absl::StrCat("--socket=", dir_, "/node", n, ".sock"),
        absl::StrCat("--heartbeat_interval_ms=",
                     options_.heartbeat_interval_ms),
        absl::StrCat("--heartbeat_timeout_ms=", options_.heartbeat_timeout_ms),
    };
    if (n != 0) argv.push_back(absl::StrCat("--coordinator=", tcp_address(0)));
    // rank_worker --kv_keys bumps a counter every rank writes (a later
    // --kv_shared_prefixes in extra_flags replaces this).
    if (options_.declare_shared_prefix && options_.rankd_binary.empty()) {
      argv.push_back("--kv_shared_prefixes=shared/");
    }
    switch (options_.credentials) {
      case ClusterOptions::Credentials::kGenerated: {
        auto dir = NodeCredentials(n);
        if (!dir.ok()) return dir.status();
        argv.push_back(absl::StrCat("--credentials_dir=", *dir));
        break;
      }
      case ClusterOptions::Credentials::kNone:
        argv.push_back("--allow_unauthenticated=true");
        break;
      case ClusterOptions::Credentials::kCustom:
        break;
    }
    for (const auto& f : options_.extra_flags) argv.push_back(f);
    if (n < options_.node_flags.size()) {
      for (const auto& f : options_.node_flags[n]) argv.push_back(f);
    }
    auto child = ChildProcess::Spawn(argv, options_.env,
                                     absl::StrCat(dir_, "/daemon", n, ".log"));
    if (!child.ok()) return child.status();
    daemons_.push_back(*std::move(child));
    argvs_.push_back(argv);
    restarts_.push_back(0);
  }
  for (uint32_t n = 0; n < options_.nnodes; ++n) {
    if (auto s = WaitReady(n, deadline); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartDaemon(uint32_t node,
                                         absl::Duration timeout) {
  if (node >= daemons_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("no daemon ", node));
  }
  if (daemons_[node].running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("daemon ", node, " still runs"));
  }
  auto child = ChildProcess::Spawn(
      argvs_[node], options_.env,
      absl::StrCat(dir_, "/daemon", node, ".", ++restarts_[node], ".log"));
  if (!child.ok()) return child.status();
  daemons_[node] = *std::move(child);
  return WaitReady(node, MonotonicNow() + timeout);
}

absl::Status LocalCluster::WaitReady(uint32_t n, absl::Time deadline) {
  ClientOptions client = options_.probe;
  client.target = tcp_address(n);
  client.connect_timeout = absl::Seconds(5);
  while (true) {
    if (!daemons_[n].running()) {
      return absl::InternalError(absl::StrCat(
          "daemon ", n, " exited during start:\n", daemons_[n].ReadLog()));
    }
    auto admin = AdminClient::Connect(client);
    if (admin.ok()) {
      auto health = (*admin)->Health("readiness");
      if (health.ok() && *health == "SERVING") return absl::OkStatus();
    }
    if (MonotonicNow() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("daemon ", n, " not ready:\n", daemons_[n].ReadLog()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::map<std::string, std::string> LocalCluster::RankEnv(
    uint32_t node, uint32_t rank,
    std::map<std::string, std::string> extra) const {
  std::map<std::string, std::string> env = options_.env;
  for (auto& [name, value] : extra) env[name] = std::move(value);
  // Its own token, as a launcher hands it (docs/operations.md,
  // "Credentials"), unless the test set one.
  if (!env.contains(kRankTokenEnv)) {
    const std::string token = rank_token(rank, node);
    if (!token.empty()) env[kRankTokenEnv] = token;
  }
  return env;
}

absl::StatusOr<ChildProcess> LocalCluster::StartWorker(
    uint32_t node, uint32_t local_rank, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      Runfile("tests/rank_worker"),
      absl::StrCat("--target=", socket_target(node)),
      absl::StrCat("--job_id=", options_.job_id),
      absl::StrCat("--local_rank=", local_rank),
      absl::StrCat("--world_size=", world_size()),
  };
  uint32_t rank = node * options_.nproc_per_node + local_rank;
  for (const auto& a : args) {
    argv.push_back(a);
    // A worker joining as an explicit rank gets that rank's token.
    absl::string_view flag = a;
    uint32_t explicit_rank = 0;
    if (absl::ConsumePrefix(&flag, "--rank=") &&
        absl::SimpleAtoi(flag, &explicit_rank)) {
      rank = explicit_rank;
    }
  }
  return ChildProcess::Spawn(argv, RankEnv(node, rank),
                             absl::StrCat(dir_, "/rank", rank, ".log"));
}

absl::StatusOr<std::vector<ChildProcess>> LocalCluster::StartAllWorkers(
    const std::vector<std::string>& args) {
  std::vector<ChildProcess> workers;
  for (uint32_t n = 0; n < options_.nnodes; ++n) {
    for (uint32_t l = 0; l < options_.nproc_per_node; ++l) {
      auto w = StartWorker(n, l, args);
      if (!w.ok()) return w.status();
      workers.push_back(*std::move(w));
    }
  }
  return workers;
}

std::vector<int> WaitAll(std::vector<ChildProcess>& workers,
                         absl::Duration timeout) {
  absl::Time deadline = MonotonicNow() + timeout;
  std::vector<int> statuses;
  for (auto& w : workers) {
    absl::Duration left =
        std::max(deadline - MonotonicNow(), absl::ZeroDuration());
    auto s = w.Wait(left);
    if (!s.has_value()) {
      w.Stop(absl::ZeroDuration());
      statuses.push_back(-1);
    } else {
      statuses.push_back(*s);
    }
  }
  return statuses;
}

std::string LastErrorLine(ChildProcess& worker) {
  auto lines = LinesWithPrefix(worker.ReadLog(), "ERROR ");
  return lines.empty() ? "" : lines.back();
}

std::vector<std::string> LinesWithPrefix(const std::string& text,
                                         const std::string& prefix) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) {
      out.emplace_back(line.substr(prefix.size()));
    }
  }
  return out;
}

absl::StatusOr<v1::JobStatus> LocalCluster::AwaitJob(
    uint32_t node, const std::function<bool(const v1::JobStatus&)>& done,
    absl::Duration patience) {
  const absl::Time give_up = absl::Now() + patience;
  v1::JobStatus last;
  while (absl::Now() < give_up) {
    auto admin = AdminClient::Connect(AdminOptions(node));
    if (admin.ok()) {
      auto job = (*admin)->GetJob();
      if (job.ok()) {
        last = *job;
        if (done(last)) return last;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "node ", node, " never saw the job so in ",
      absl::FormatDuration(patience), "; last: ", last.ShortDebugString()));
}

absl::Status LocalCluster::AwaitMembers(
    uint32_t node, const std::function<bool(const v1::MemberList&)>& done,
    absl::Duration patience) {
  const absl::Time give_up = absl::Now() + patience;
  while (absl::Now() < give_up) {
    auto admin = AdminClient::Connect(AdminOptions(node));
    if (admin.ok()) {
      auto members = (*admin)->ListMembers();
      if (members.ok() && done(*members)) return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("node ", node, " never listed the members so in ",
                   absl::FormatDuration(patience)));
}

std::function<bool(const v1::MemberList&)> MembersInRound(
    std::vector<uint32_t> ranks) {
  return [ranks = std::move(ranks)](const v1::MemberList& list) {
    for (uint32_t r : ranks) {
      if (list.members(r).state() != v1::MEMBER_STATE_IN_ROUND) return false;
    }
    return true;
  };
}

}  // namespace rankd::testing
