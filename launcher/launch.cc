#include "launcher/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/channel.h"
#include "common/credentials.h"
#include "common/host_port.h"
#include "common/monotonic_clock.h"
#include "common/topology.h"
#include "launcher/child_process.h"
#include "launcher/node_daemon.h"
#include "launcher/process_group.h"
#include "launcher/unique_fd.h"

namespace rankd::launcher {
namespace {

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};
// The key namespace torch jobs' stores use (rankd.torch_store.DEFAULT_PREFIX),
// which the daemons rankrun starts declare shared.
constexpr absl::string_view kTorchKvPrefix = "torch/";

// A failure that ends Launch with `exit_status`, after `message` is printed.
struct Failure {
  int exit_status;
  std::string message;
};

void Say(const std::string& message) {
  WriteAll(STDERR_FILENO, absl::StrCat("rankrun: ", message, "\n"));
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

// A private folder (mode 0700) removed with everything in it at the end.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Make() {
    std::string path = "/tmp/rankrun-XXXXXX";
    if (::mkdtemp(path.data()) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot make a temporary folder under /tmp: ", strerror(errno)));
    }
    TempDir dir;
    dir.path_ = path;
    return dir;
  }
  TempDir() = default;
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  TempDir& operator=(TempDir&& other) noexcept {
    if (this != &other) {
      Remove();
      path_ = std::exchange(other.path_, "");
    }
    return *this;
  }
  ~TempDir() { Remove(); }
  const std::string& path() const { return path_; }

 private:
  void Remove() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    path_.clear();
  }
  std::string path_;
};

// The environment as a map (later entries win), and back.
std::map<std::string, std::string> EnvMap(
    const std::vector<std::string>& environment) {
  std::map<std::string, std::string> env;
  for (const std::string& entry : environment) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

std::vector<std::string> EnvList(const std::map<std::string, std::string>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// `name` as a path: itself when it has a '/', else the first executable
// on `path_var`.
absl::StatusOr<std::string> FindExecutable(const std::string& name,
                                           const std::string& path_var,
                                           absl::string_view what) {
  if (name.find('/') != std::string::npos) {
    if (IsExecutableFile(name)) return name;
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", name, " is not an executable file"));
  }
  for (absl::string_view dir : absl::StrSplit(path_var, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", name, " is not on PATH (", path_var, ")"));
}

// PROGRAM ARGS as an argv with argv[0] a path.
absl::StatusOr<std::vector<std::string>> ResolveCommand(
    const std::vector<std::string>& command,
    const std::map<std::string, std::string>& env) {
  auto path_it = env.find("PATH");
  const std::string path_var =
      path_it != env.end() ? path_it->second : "/usr/bin:/bin";
  std::vector<std::string> argv = command;
  if (absl::EndsWith(command[0], ".py")) {
    struct stat st;
    if (::stat(command[0].c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PROGRAM ", command[0], " is not a file"));
    }
    auto python = env.find("RANKD_PYTHON");
    const std::string interpreter =
        python != env.end() && !python->second.empty() ? python->second
                                                       : "/usr/bin/python3";
    absl::StatusOr<std::string> resolved = FindExecutable(
        interpreter, path_var, "the Python interpreter ($RANKD_PYTHON)");
    if (!resolved.ok()) return resolved.status();
    argv.insert(argv.begin(), *resolved);
    return argv;
  }
  absl::StatusOr<std::string> resolved =
      FindExecutable(command[0], path_var, "PROGRAM");
  if (!resolved.ok()) return resolved.status();
  argv[0] = *resolved;
  return argv;
}

// rankd next to rankrun, else on PATH.
absl::StatusOr<std::string> FindRankd(const LaunchOptions& o,
                                      const LaunchContext& context,
                                      const std::string& path_var) {
  if (!o.rankd.empty()) return FindExecutable(o.rankd, path_var, "--rankd");
  // Installed side by side (bin/), or Bazel's layout (launcher/ next to
  // daemon/): beside the path rankrun was started by, then beside the
  // binary itself.
  std::vector<std::filesystem::path> dirs;
  if (!context.self_path.empty()) {
    dirs.push_back(std::filesystem::path(context.self_path).parent_path());
  }
  std::error_code ec;
  std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", ec);
  if (!ec) dirs.push_back(self.parent_path());
  for (const std::filesystem::path& dir : dirs) {
    for (const std::filesystem::path& candidate :
         {dir / "rankd", dir.parent_path() / "daemon" / "rankd"}) {
      if (IsExecutableFile(candidate.string())) return candidate.string();
    }
  }
  return FindExecutable("rankd", path_var, "rankd (set --rankd=PATH)");
}

// A TCP port nobody listens on now (bound and released).
absl::StatusOr<int> FreePort(bool loopback) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("socket: ", strerror(errno)));
  }
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
  socklen_t len = sizeof(addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot find a free TCP port: ", strerror(errno)));
  }
  return ntohs(addr.sin_port);
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || absl::StartsWith(host, "127.") || host == "::1";
}

// The job this node takes part in, once the daemon is known.
struct Layout {
  std::string job_id;
  uint32_t nnodes = 1;
  uint32_t node_rank = 0;
  uint32_t nproc_per_node = 1;
  uint32_t world_size = 1;
  ParallelTopology topology;
};

// Options merged with the reused daemon's job: given values must agree.
absl::StatusOr<Layout> LayoutFromDaemon(const LaunchOptions& o,
                                        const DaemonJob& job,
                                        const std::string& target) {
  std::vector<std::string> disagree;
  auto check = [&](const char* flag, std::optional<uint32_t> given,
                   uint32_t daemon) {
    if (given.has_value() && *given != daemon) {
      disagree.push_back(
          absl::StrCat(flag, "=", *given, " (the daemon's ", daemon, ")"));
    }
  };
  check("--nproc_per_node", o.nproc_per_node, job.nproc_per_node);
  check("--nnodes", o.nnodes, job.nnodes);
  if (o.node_rank.has_value() && *o.node_rank != job.node_index) {
    disagree.push_back(absl::StrCat(o.node_rank_source, "=", *o.node_rank,
                                    " (the daemon's node ", job.node_index,
                                    ")"));
  }
  check("--tensor_parallel", o.tensor_parallel, job.tensor_parallel);
  check("--pipeline_parallel", o.pipeline_parallel, job.pipeline_parallel);
  check("--expert_parallel", o.expert_parallel, job.expert_parallel);
  if (!o.job_id.empty() && o.job_id != job.job_id) {
    disagree.push_back(absl::StrCat("--job_id=", o.job_id, " (the daemon's ",
                                    job.job_id, ")"));
  }
  if (!disagree.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the rankd daemon at ", target, " serves job '", job.job_id, "' (node ",
        job.node_index, " of ", job.nnodes, ", ", job.nproc_per_node,
        " per node), which contradicts ", absl::StrJoin(disagree, ", "),
        "; fix the options or start a daemon of its own (--daemon=start)"));
  }
  Layout l;
  l.job_id = job.job_id;
  l.nnodes = job.nnodes;
  l.node_rank = job.node_index;
  l.nproc_per_node = job.nproc_per_node;
  l.world_size = job.world_size;
  absl::StatusOr<ParallelTopology> t =
      TopologyFromDegrees(job.world_size, job.tensor_parallel,
                          job.pipeline_parallel, job.expert_parallel);
  if (!t.ok()) return t.status();
  l.topology = *t;
  return l;
}

// Options alone (a daemon rankrun starts).
absl::StatusOr<Layout> LayoutFromOptions(const LaunchOptions& o) {
  Layout l;
  l.job_id = o.job_id.empty() ? kDefaultJobId : o.job_id;
  l.nnodes = o.nnodes.value_or(1);
  l.node_rank = o.node_rank.value_or(0);
  l.nproc_per_node = o.nproc_per_node.value_or(1);
  if (l.node_rank >= l.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.node_rank_source, "=", l.node_rank,
                     " must be below --nnodes(", l.nnodes, ")"));
  }
  l.world_size = l.nnodes * l.nproc_per_node;
  const uint32_t tp = o.tensor_parallel.value_or(1);
  const uint32_t pp = o.pipeline_parallel.value_or(1);
  const uint32_t ep = o.expert_parallel.value_or(1);
  absl::StatusOr<ParallelTopology> t =
      TopologyFromDegrees(l.world_size, tp, pp, ep);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tensor_parallel(", tp, ") * --pipeline_parallel(", pp,
        ") * --expert_parallel(", ep, ") does not divide the world size ",
        l.world_size, " (--nnodes ", l.nnodes, " * --nproc_per_node ",
        l.nproc_per_node, "); data parallel is the quotient"));
  }
  l.topology = *t;
  if (l.nnodes > 1 && o.coordinator.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", l.nnodes,
        " needs --coordinator=HOST:PORT (node 0's daemon) to start this "
        "node's daemon (or --daemon=reuse for a running one)"));
  }
  if (l.nnodes > 1 && o.credentials_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", l.nnodes,
        " needs --credentials_dir=DIR, the job's credentials shared by every "
        "node (make them once with `rankctl credentials create DIR`)"));
  }
  return l;
}

// Stops early while waiting for a daemon: a signal, or the daemon's exit.
class Interrupts {
 public:
  explicit Interrupts(int signal_fd) : signal_fd_(signal_fd) {}
  // The forwarded signal received so far (0 = none); drains the signalfd.
  int Check() {
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      for (int sig : kForwardedSignals) {
        if (static_cast<int>(info.ssi_signo) == sig) signal_ = sig;
      }
    }
    return signal_;
  }

 private:
  int signal_fd_;
  int signal_ = 0;
};

// Everything Launch owns, in destruction order (ranks, then the daemon,
// then the folder holding its socket and credentials).
class Launcher {
 public:
  Launcher(const LaunchOptions& o, const LaunchContext& c)
      : o_(o), context_(c), env_(EnvMap(c.environment)) {}

  int Run();

 private:
  absl::Status EnsureTempDir();
  // Finds or starts the daemon; fills layout_, target_, rank_tokens_.
  std::optional<Failure> SetUpDaemon();
  std::optional<Failure> StartDaemon(const std::string& socket);
  std::optional<Failure> ReuseDaemon(const ClientOptions& client);
  std::optional<Failure> StartRanks(const std::vector<std::string>& argv);
  int Supervise();
  void Linger();

  const LaunchOptions& o_;
  const LaunchContext& context_;
  std::map<std::string, std::string> env_;
  UniqueFd signal_fd_;
  std::optional<Interrupts> interrupts_;
  TempDir temp_;
  StartedDaemon daemon_;
  bool started_daemon_ = false;
  Layout layout_;
  std::string target_;
  // Each local rank's own token (docs/operations.md, "Credentials"); empty
  // when the daemon runs without authentication.
  std::vector<std::string> rank_tokens_;
  // Fills rank_tokens_ from the node key or node token in `credentials`.
  absl::Status MintRankTokens(const std::string& credentials);
  std::optional<ProcessGroup> group_;
};

absl::Status Launcher::EnsureTempDir() {
  if (!temp_.path().empty()) return absl::OkStatus();
  absl::StatusOr<TempDir> dir = TempDir::Make();
  if (!dir.ok()) return dir.status();
  temp_ = *std::move(dir);
  return absl::OkStatus();
}

std::optional<Failure> Launcher::SetUpDaemon() {
  ClientOptions client;
  if (!o_.target.empty()) {
    absl::StatusOr<Target> t = ParseTarget(o_.target);
    if (!t.ok()) {
      return Failure{kExitUsage, absl::StrCat("--target=", o_.target, ": ",
                                              t.status().message())};
    }
    client.target = o_.target;
    if (t->kind == Target::Kind::kTcp && !o_.credentials_dir.empty()) {
      absl::StatusOr<std::string> token =
          ReadCredentialFile(o_.credentials_dir, kOperatorTokenFile);
      if (token.ok()) client.bearer_token = *token;
    }
    return ReuseDaemon(client);
  }
  // The node's own daemon: --rankd_socket, else where rankd listens by
  // default, which is also the client's default target.
  client.target = o_.rankd_socket.empty()
                      ? std::string(kDefaultTarget)
                      : absl::StrCat("unix://", o_.rankd_socket);
  switch (o_.daemon) {
    case DaemonMode::kReuse:
      return ReuseDaemon(client);
    case DaemonMode::kAuto:
      if (DaemonAnswers(client, absl::Seconds(2))) return ReuseDaemon(client);
      return StartDaemon(o_.rankd_socket);
    case DaemonMode::kStart:
      return StartDaemon(o_.rankd_socket);
  }
  return Failure{kExitFailure, "internal: unknown --daemon mode"};
}

std::optional<Failure> Launcher::ReuseDaemon(const ClientOptions& client) {
  const absl::Time deadline =
      MonotonicNow() + absl::Milliseconds(o_.daemon_timeout_ms);
  absl::Status ready = WaitUntilReady(client, deadline, [this] {
    if (int sig = interrupts_->Check(); sig != 0) {
      return absl::CancelledError(
          absl::StrCat("received ", SignalName(sig), " while waiting"));
    }
    return absl::OkStatus();
  });
  if (!ready.ok()) {
    if (absl::IsCancelled(ready)) {
      return Failure{128 + interrupts_->Check(), std::string(ready.message())};
    }
    return Failure{
        kExitFailure,
        absl::StrCat(ready.message(), o_.daemon == DaemonMode::kReuse
                                          ? " (--daemon=reuse never starts one)"
                                          : "")};
  }
  ClientOptions describe = client;
  describe.connect_timeout = absl::Seconds(10);
  describe.call_timeout = absl::Seconds(10);
  absl::StatusOr<DaemonJob> job = DescribeDaemon(describe);
  if (!job.ok()) {
    return Failure{kExitFailure, absl::StrCat("cannot ask the rankd daemon at ",
                                              client.target, " about its job: ",
                                              job.status().message())};
  }
  absl::StatusOr<Layout> layout = LayoutFromDaemon(o_, *job, client.target);
  if (!layout.ok()) {
    return Failure{kExitUsage, std::string(layout.status().message())};
  }
  layout_ = *layout;
  target_ = client.target;
  // Each rank's own token: minted here from the job's credentials when
  // rankrun has them, else handed out by the daemon beside it (once, to
  // rankrun, before any rank runs: a Kubernetes sidecar).
  if (!o_.credentials_dir.empty()) {
    absl::Status minted = MintRankTokens(o_.credentials_dir);
    if (!minted.ok())
      return Failure{kExitFailure, std::string(minted.message())};
    return std::nullopt;
  }
  ClientOptions issue = client;
  issue.bearer_token.clear();
  issue.connect_timeout = absl::Seconds(10);
  issue.call_timeout = absl::Seconds(10);
  absl::StatusOr<std::vector<std::string>> tokens =
      IssueRankTokens(issue, layout_.job_id);
  if (!tokens.ok()) {
    return Failure{
        kExitFailure,
        absl::StrCat(tokens.status().message(),
                     "; every rank needs its own rank token: give rankrun the "
                     "job's --credentials_dir, or start that rankd with "
                     "--issue_rank_tokens=true")};
  }
  rank_tokens_ = *std::move(tokens);
  return std::nullopt;
}

absl::Status Launcher::MintRankTokens(const std::string& credentials) {
  // This node's token: from the node key, or the node's own token file.
  std::string node_token;
  absl::StatusOr<std::string> key =
      ReadCredentialFile(credentials, kNodeKeyFile);
  if (key.ok()) {
    node_token = NodeToken(*key, layout_.job_id, layout_.node_rank);
  } else if (absl::IsNotFound(key.status())) {
    absl::StatusOr<std::string> own =
        ReadCredentialFile(credentials, kNodeTokenFile);
    if (!own.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot mint the ranks' tokens: ", credentials,
                       " holds neither ", kNodeKeyFile, " nor a ",
                       kNodeTokenFile, " (", own.status().message(), ")"));
    }
    node_token = *std::move(own);
  } else {
    return key.status();
  }
  rank_tokens_.clear();
  for (uint32_t local = 0; local < layout_.nproc_per_node; ++local) {
    rank_tokens_.push_back(
        RankToken(node_token, layout_.job_id,
                  layout_.node_rank * layout_.nproc_per_node + local));
  }
  return absl::OkStatus();
}

std::optional<Failure> Launcher::StartDaemon(const std::string& given_socket) {
  absl::StatusOr<Layout> layout = LayoutFromOptions(o_);
  if (!layout.ok()) {
    return Failure{kExitUsage, std::string(layout.status().message())};
  }
  layout_ = *layout;
  auto path_it = env_.find("PATH");
  absl::StatusOr<std::string> rankd = FindRankd(
      o_, context_, path_it != env_.end() ? path_it->second : "/usr/bin:/bin");
  if (!rankd.ok()) {
    return Failure{kExitUsage, std::string(rankd.status().message())};
  }
  if (absl::Status s = EnsureTempDir(); !s.ok()) {
    return Failure{kExitFailure, std::string(s.message())};
  }
  const std::string socket = given_socket.empty()
                                 ? absl::StrCat(temp_.path(), "/rankd.sock")
                                 : given_socket;
  std::string credentials = o_.credentials_dir;
  if (credentials.empty()) {
    // Only a single-node job gets here (LayoutFromOptions).
    credentials = absl::StrCat(temp_.path(), "/credentials");
    if (absl::Status s = CreateCredentials(credentials); !s.ok()) {
      return Failure{kExitFailure,
                     absl::StrCat("cannot make credentials: ", s.message())};
    }
  }
  std::string listen = o_.rankd_listen;
  std::string advertise = o_.rankd_advertise;
  std::string coordinator;
  std::optional<HostPort> coord;
  if (!o_.coordinator.empty()) coord = *ParseHostPort(o_.coordinator);
  if (layout_.nnodes == 1 && !coord.has_value()) {
    if (listen.empty()) {
      absl::StatusOr<int> port = FreePort(true);
      if (!port.ok())
        return Failure{kExitFailure, std::string(port.status().message())};
      listen = absl::StrCat("127.0.0.1:", *port);
    }
  } else if (layout_.node_rank == 0) {
    // Node 0 coordinates: it listens on the coordinator's port and
    // advertises the coordinator address the others are given.
    if (listen.empty()) listen = JoinHostPort("0.0.0.0", coord->port);
    if (advertise.empty()) advertise = o_.coordinator;
  } else {
    coordinator = o_.coordinator;
    if (listen.empty()) {
      absl::StatusOr<int> port = FreePort(false);
      if (!port.ok())
        return Failure{kExitFailure, std::string(port.status().message())};
      listen = JoinHostPort("0.0.0.0", static_cast<uint16_t>(*port));
      if (advertise.empty() && IsLoopbackHost(coord->host)) {
        advertise = JoinHostPort("127.0.0.1", static_cast<uint16_t>(*port));
      }
    }
  }
  std::vector<std::string> argv = {
      *rankd,
      absl::StrCat("--job_id=", layout_.job_id),
      absl::StrCat("--nnodes=", layout_.nnodes),
      absl::StrCat("--node_index=", layout_.node_rank),
      absl::StrCat("--nproc_per_node=", layout_.nproc_per_node),
      absl::StrCat("--world_size=", layout_.world_size),
      absl::StrCat("--tensor_parallel=", layout_.topology.tensor),
      absl::StrCat("--pipeline_parallel=", layout_.topology.pipeline),
      absl::StrCat("--expert_parallel=", layout_.topology.expert),
      absl::StrCat("--socket=", socket),
      absl::StrCat("--listen=", listen),
      absl::StrCat("--credentials_dir=", credentials),
  };
  if (!advertise.empty()) {
    argv.push_back(absl::StrCat("--advertise_address=", advertise));
  }
  if (!coordinator.empty()) {
    argv.push_back(absl::StrCat("--coordinator=", coordinator));
  }
  // torch's store keys (python/rankd/torch_store.py) are written by every
  // rank, so rankrun declares their namespace shared; a
  // --kv_shared_prefixes of the user's gets it added.
  bool declared_shared = false;
  for (const std::string& flag : o_.rankd_args) {
    constexpr absl::string_view kShared = "--kv_shared_prefixes=";
    if (absl::StartsWith(flag, kShared)) {
      declared_shared = true;
      std::vector<absl::string_view> prefixes =
          absl::StrSplit(absl::string_view(flag).substr(kShared.size()), ',',
                         absl::SkipEmpty());
      if (!absl::c_linear_search(prefixes, kTorchKvPrefix)) {
        prefixes.push_back(kTorchKvPrefix);
      }
      argv.push_back(absl::StrCat(kShared, absl::StrJoin(prefixes, ",")));
    } else {
      argv.push_back(flag);
    }
  }
  if (!declared_shared) {
    argv.push_back(absl::StrCat("--kv_shared_prefixes=", kTorchKvPrefix));
  }

  UniqueFd log;
  if (!o_.rankd_log.empty()) {
    log.Reset(::open(o_.rankd_log.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!log.valid()) {
      return Failure{kExitUsage, absl::StrCat("--rankd_log=", o_.rankd_log,
                                              ": ", strerror(errno))};
    }
  }
  absl::StatusOr<StartedDaemon> daemon = StartedDaemon::Start(
      argv, context_.environment, log.valid() ? log.get() : STDERR_FILENO);
  if (!daemon.ok()) {
    return Failure{kExitFailure, std::string(daemon.status().message())};
  }
  daemon_ = *std::move(daemon);
  started_daemon_ = true;
  ClientOptions client;
  client.target = absl::StrCat("unix://", socket);
  const absl::Time deadline =
      MonotonicNow() + absl::Milliseconds(o_.daemon_timeout_ms);
  absl::Status ready = WaitUntilReady(client, deadline, [this] {
    if (int sig = interrupts_->Check(); sig != 0) {
      return absl::CancelledError(absl::StrCat("received ", SignalName(sig),
                                               " while waiting for rankd"));
    }
    if (std::optional<int> s = daemon_.Poll()) {
      return absl::UnavailableError(absl::StrCat("rankd (pid ", daemon_.pid(),
                                                 ") ", DescribeWaitStatus(*s),
                                                 " before it was ready"));
    }
    return absl::OkStatus();
  });
  if (!ready.ok()) {
    const int sig = interrupts_->Check();
    return Failure{absl::IsCancelled(ready) ? 128 + sig : kExitFailure,
                   std::string(ready.message())};
  }
  target_ = client.target;
  if (absl::Status s = MintRankTokens(credentials); !s.ok()) {
    return Failure{kExitFailure, std::string(s.message())};
  }
  return std::nullopt;
}

std::optional<Failure> Launcher::StartRanks(
    const std::vector<std::string>& argv) {
  group_.emplace(o_.prefix_output);
  const Layout& l = layout_;
  for (uint32_t local = 0; local < l.nproc_per_node; ++local) {
    const uint32_t rank = l.node_rank * l.nproc_per_node + local;
    const std::vector<std::pair<std::string, std::string>> values = {
        {"{local_rank}", absl::StrCat(local)},
        {"{rank}", absl::StrCat(rank)},
        {"{node_rank}", absl::StrCat(l.node_rank)},
        {"{world_size}", absl::StrCat(l.world_size)},
        {"{nproc_per_node}", absl::StrCat(l.nproc_per_node)},
        {"{job_id}", l.job_id},
        {"{target}", target_},
    };
    std::vector<std::string> args = argv;
    for (size_t i = 1; i < args.size(); ++i) {
      args[i] = absl::StrReplaceAll(args[i], values);
    }
    std::map<std::string, std::string> env = env_;
    env["RANKD_TARGET"] = target_;
    env["RANKD_JOB_ID"] = l.job_id;
    env["RANKD_LOCAL_RANK"] = absl::StrCat(local);
    env["RANKD_RANK"] = absl::StrCat(rank);
    env["RANKD_WORLD_SIZE"] = absl::StrCat(l.world_size);
    env["RANKD_NPROC_PER_NODE"] = absl::StrCat(l.nproc_per_node);
    env["RANKD_NODE_RANK"] = absl::StrCat(l.node_rank);
    env["RANKD_NNODES"] = absl::StrCat(l.nnodes);
    // This rank's own token, in its environment alone; a token file of
    // rankrun's own environment would name another credential.
    env.erase("RANKD_TOKEN_FILE");
    if (local < rank_tokens_.size() && !rank_tokens_[local].empty()) {
      env[kRankTokenEnv] = rank_tokens_[local];
    } else {
      env.erase(kRankTokenEnv);
    }
    env["LOCAL_RANK"] = absl::StrCat(local);
    env["RANK"] = absl::StrCat(rank);
    env["GROUP_RANK"] = absl::StrCat(l.node_rank);
    env["WORLD_SIZE"] = absl::StrCat(l.world_size);
    env["LOCAL_WORLD_SIZE"] = absl::StrCat(l.nproc_per_node);
    if (absl::Status s = group_->Start(args, EnvList(env),
                                       absl::StrCat("[rank ", rank, "] "));
        !s.ok()) {
      const size_t started = group_->size();
      group_->Signal(SIGKILL);
      group_->Finish(absl::Seconds(1));
      return Failure{
          kExitUsage,
          absl::StrCat("local rank ", local, ": ", s.message(),
                       started > 0 ? absl::StrCat("; stopped the ", started,
                                                  " process(es) started")
                                   : "")};
    }
  }
  return std::nullopt;
}

int Launcher::Supervise() {
  ProcessGroup& group = *group_;
  const absl::Duration grace = absl::Milliseconds(o_.stop_grace_ms);
  std::optional<size_t> failed;  // The first process that failed.
  size_t stopped_others = 0;
  std::optional<int> daemon_status;  // A started daemon that died.
  int stop_signal = 0;
  std::optional<absl::Time> kill_at;
  bool killed = false;
  std::optional<size_t> first_nonzero;

  auto begin_stop = [&](int sig) {
    group.Signal(sig);
    if (!kill_at.has_value()) kill_at = MonotonicNow() + grace;
  };
  while (true) {
    for (size_t i : group.PollExits()) {
      const int status = *group.status(i);
      if (status == 0) continue;
      if (!first_nonzero.has_value()) first_nonzero = i;
      if (!failed.has_value() && stop_signal == 0 &&
          !daemon_status.has_value()) {
        failed = i;
        stopped_others = group.CountRunning();
        if (stopped_others > 0) begin_stop(SIGTERM);
      }
    }
    if (started_daemon_ && !daemon_status.has_value() && !failed.has_value()) {
      if (std::optional<int> s = daemon_.Poll()) {
        daemon_status = *s;
        stopped_others = group.CountRunning();
        if (stopped_others > 0) begin_stop(SIGTERM);
      }
    }
    if (group.CountRunning() == 0) break;
    if (kill_at.has_value() && !killed && MonotonicNow() >= *kill_at) {
      group.Signal(SIGKILL);
      killed = true;
    }
    std::vector<pollfd> polls = {{signal_fd_.get(), POLLIN, 0}};
    for (int fd : group.OutputFds()) polls.push_back({fd, POLLIN, 0});
    int timeout_ms = 100;
    if (kill_at.has_value() && !killed) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(*kill_at - MonotonicNow()) + 1, 0, 100));
    }
    if (::poll(polls.data(), polls.size(), timeout_ms) < 0 && errno != EINTR) {
      Say(absl::StrCat("poll: ", strerror(errno)));
      begin_stop(SIGKILL);
    }
    for (size_t p = 1; p < polls.size(); ++p) {
      if (polls[p].revents != 0) group.Pump(polls[p].fd);
    }
    signalfd_siginfo info;
    while (::read(signal_fd_.get(), &info, sizeof(info)) == sizeof(info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) continue;
      if (stop_signal == 0) stop_signal = sig;
      // Forwarded every time (a second Ctrl-C reaches the ranks again).
      begin_stop(sig);
    }
  }
  group.Finish(absl::Seconds(2));

  if (failed.has_value()) {
    const size_t i = *failed;
    const int status = *group.status(i);
    Say(absl::StrCat("local rank ", i, " (rank ",
                     layout_.node_rank * layout_.nproc_per_node + i, ", pid ",
                     group.pid(i), ") ", DescribeWaitStatus(status),
                     "; stopped the other ", stopped_others, " process(es)"));
    return ShellStatus(status);
  }
  if (daemon_status.has_value()) {
    Say(absl::StrCat("the rankd daemon rankrun started (pid ", daemon_.pid(),
                     ") ", DescribeWaitStatus(*daemon_status), "; stopped the ",
                     stopped_others, " process(es)"));
    return kExitFailure;
  }
  if (stop_signal != 0) {
    std::string outcome = "every one exited 0";
    int code = 0;
    if (first_nonzero.has_value()) {
      const size_t i = *first_nonzero;
      const int status = *group.status(i);
      outcome =
          absl::StrCat("local rank ", i, " (rank ",
                       layout_.node_rank * layout_.nproc_per_node + i, ", pid ",
                       group.pid(i), ") ", DescribeWaitStatus(status));
      code = ShellStatus(status);
    }
    Say(absl::StrCat("received ", SignalName(stop_signal),
                     "; forwarded it to the ", group.size(),
                     " process(es): ", outcome));
    return code;
  }
  return 0;
}

void Launcher::Linger() {
  const absl::Time until =
      MonotonicNow() + absl::Milliseconds(o_.exit_delay_ms);
  while (MonotonicNow() < until) {
    if (interrupts_->Check() != 0) return;
    pollfd p = {signal_fd_.get(), POLLIN, 0};
    const int ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(until - MonotonicNow()) + 1, 0, 100));
    ::poll(&p, 1, ms);
  }
}

int Launcher::Run() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int sig : kForwardedSignals) ::sigaddset(&set, sig);
  ::sigaddset(&set, SIGCHLD);
  signal_fd_.Reset(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_.valid()) {
    Say(absl::StrCat("signalfd: ", strerror(errno)));
    return kExitFailure;
  }
  interrupts_.emplace(signal_fd_.get());

  absl::StatusOr<std::vector<std::string>> argv =
      ResolveCommand(o_.command, env_);
  if (!argv.ok()) {
    Say(std::string(argv.status().message()));
    return kExitUsage;
  }
  if (std::optional<Failure> f = SetUpDaemon()) {
    Say(f->message);
    return f->exit_status;
  }
  const uint32_t first = layout_.node_rank * layout_.nproc_per_node;
  Say(absl::StrCat(
      "job '", layout_.job_id, "': node ", layout_.node_rank, " of ",
      layout_.nnodes, ", ranks ", first, "-",
      first + layout_.nproc_per_node - 1, " of ", layout_.world_size, " (",
      DescribeTopology(layout_.topology), "); ",
      started_daemon_
          ? absl::StrCat("started rankd (pid ", daemon_.pid(), ") at ", target_)
          : absl::StrCat("reusing rankd at ", target_)));
  if (int sig = interrupts_->Check(); sig != 0) {
    Say(absl::StrCat("received ", SignalName(sig), " before the start"));
    return 128 + sig;
  }
  if (std::optional<Failure> f = StartRanks(*argv)) {
    Say(f->message);
    return f->exit_status;
  }
  int code = Supervise();
  if (code == 0 && o_.exit_delay_ms > 0) Linger();
  if (started_daemon_) {
    std::optional<int> status =
        daemon_.Stop(absl::Milliseconds(o_.stop_grace_ms));
    if (status.has_value() && *status != 0 && code == 0) {
      Say(absl::StrCat("warning: rankd (pid ", daemon_.pid(), ") ",
                       DescribeWaitStatus(*status), " when stopped"));
    }
  }
  return code;
}

}  // namespace

void BlockLauncherSignals() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int sig : kForwardedSignals) ::sigaddset(&set, sig);
  ::sigaddset(&set, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

int Launch(const LaunchOptions& options, const LaunchContext& context) {
  Launcher launcher(options, context);
  return launcher.Run();
}

}  // namespace rankd::launcher
