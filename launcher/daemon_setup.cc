// daemon_setup.cc: the node's daemon for a Launch (launcher.h): reusing the
// one that answers (after checking its job against the options) or
// starting one with the right flags and waiting until it is ready, then
// each local rank's token (minted from the job's credentials, or issued by
// a reused daemon).

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/credentials.h"
#include "common/host_port.h"
#include "common/monotonic_clock.h"
#include "launcher/child_process.h"
#include "launcher/launcher.h"

namespace rankd::launcher {
namespace {

// The key namespace torch jobs' stores use (rankd.torch_store.DEFAULT_PREFIX),
// which the daemons rankrun starts declare shared.
constexpr absl::string_view kTorchKvPrefix = "torch/";

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

}  // namespace

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
  if (o_.max_restarts > 0) {
    // Its flags are not ours to set, nor visible through DescribeDaemon.
    Say(absl::StrCat("--max_restarts=", o_.max_restarts,
                     " with a reused daemon: it must run with --recovery=on, "
                     "else the loss of a rank rankrun restarts fails the "
                     "job"));
  }
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
  absl::StatusOr<std::string> rankd =
      FindRankd(o_.rankd, context_.self_path,
                path_it != env_.end() ? path_it->second : "/usr/bin:/bin");
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
  // A rank rankrun restarts must find its job waiting for it (RECOVERING),
  // not failed by its predecessor's loss.
  if (o_.max_restarts > 0) {
    argv.push_back(absl::StrCat("--recovery=", o_.recovery.value_or("on")));
    if (o_.recovery_deadline_ms.has_value()) {
      argv.push_back(
          absl::StrCat("--recovery_deadline_ms=", *o_.recovery_deadline_ms));
    }
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
  if (o_.credentials_dir.empty()) {
    // Made here, and read by the daemon as it started (it never reads them
    // again): gone before any rank starts, so that a rank, which runs as
    // this user and can read the daemon's --credentials_dir, finds no node
    // key to mint other ranks' tokens from. The ranks' tokens are minted.
    if (absl::Status s = RemoveCredentials(credentials); !s.ok()) {
      return Failure{kExitFailure, std::string(s.message())};
    }
  }
  return std::nullopt;
}

}  // namespace rankd::launcher
