#include "launcher/node_daemon.h"

#include <signal.h>
#include <sys/stat.h>

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/admin_client.h"
#include "common/monotonic_clock.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/rank.grpc.pb.h"

namespace rankd::launcher {
namespace {

constexpr char kReadinessService[] = "readiness";

// The socket path of a unix target, "" for other targets.
std::string UnixPath(const std::string& target) {
  for (const char* prefix : {"unix://", "unix:"}) {
    if (absl::StartsWith(target, prefix)) {
      return target.substr(std::string(prefix).size());
    }
  }
  return absl::StartsWith(target, "/") ? target : "";
}

absl::StatusOr<std::unique_ptr<AdminClient>> ConnectWithin(
    const ClientOptions& client, absl::Duration timeout) {
  ClientOptions options = client;
  options.connect_timeout = std::max(timeout, absl::Milliseconds(1));
  options.call_timeout = std::max(timeout, absl::Milliseconds(1));
  return AdminClient::Connect(options);
}

}  // namespace

bool DaemonAnswers(const ClientOptions& client, absl::Duration timeout) {
  if (const std::string path = UnixPath(client.target); !path.empty()) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  }
  absl::StatusOr<std::unique_ptr<AdminClient>> admin =
      ConnectWithin(client, timeout);
  if (!admin.ok()) return false;
  return (*admin)->Health("").ok();
}

absl::Status WaitUntilReady(const ClientOptions& client, absl::Time deadline,
                            const std::function<absl::Status()>& stop) {
  std::string last = "no answer";
  while (true) {
    if (absl::Status s = stop(); !s.ok()) return s;
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) break;
    const absl::Duration attempt = std::min(left, absl::Seconds(1));
    const std::string path = UnixPath(client.target);
    struct stat st;
    if (!path.empty() && ::stat(path.c_str(), &st) != 0) {
      last = absl::StrCat("no socket at ", path);
    } else if (absl::StatusOr<std::unique_ptr<AdminClient>> admin =
                   ConnectWithin(client, attempt);
               !admin.ok()) {
      last = std::string(admin.status().message());
    } else {
      absl::StatusOr<std::string> health = (*admin)->Health(kReadinessService);
      if (health.ok() && *health == "SERVING") return absl::OkStatus();
      last = health.ok() ? absl::StrCat("readiness ", *health)
                         : std::string(health.status().message());
    }
    absl::SleepFor(
        std::min(absl::Milliseconds(50),
                 std::max(deadline - MonotonicNow(), absl::ZeroDuration())));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the rankd daemon at ", client.target,
                   " was not ready in time (registered with its "
                   "coordinator); last: ",
                   last));
}

absl::StatusOr<std::vector<std::string>> IssueRankTokens(
    const ClientOptions& client, const std::string& job_id) {
  absl::StatusOr<std::shared_ptr<const Connection>> connection =
      Connection::Open(client);
  if (!connection.ok()) return connection.status();
  auto stub = v1::Rank::NewStub((*connection)->channel());
  v1::IssueRankTokensRequest request;
  request.set_job_id(job_id);
  v1::IssueRankTokensResponse response;
  grpc::ClientContext context;
  (*connection)->PrepareContext(&context, client.call_timeout);
  grpc::Status status = stub->IssueRankTokens(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(status.error_code()),
        absl::StrCat("the rankd daemon at ", client.target,
                     " issued no rank tokens: ", status.error_message()));
  }
  std::vector<std::string> tokens;
  for (const auto& t : response.tokens()) {
    if (t.local_rank() >= tokens.size()) tokens.resize(t.local_rank() + 1);
    tokens[t.local_rank()] = t.token();
  }
  return tokens;
}

absl::StatusOr<DaemonJob> DescribeDaemon(const ClientOptions& client) {
  absl::StatusOr<std::unique_ptr<AdminClient>> admin =
      AdminClient::Connect(client);
  if (!admin.ok()) return admin.status();
  absl::StatusOr<v1::Topology> topology = (*admin)->GetTopology();
  if (!topology.ok()) return topology.status();
  absl::StatusOr<v1::JobStatus> job = (*admin)->GetJob();
  if (!job.ok()) return job.status();
  DaemonJob out;
  out.job_id = topology->job_id();
  out.world_size = topology->world_size();
  out.nnodes = topology->nnodes();
  out.nproc_per_node = topology->nproc_per_node();
  out.node_index = job->served_by_node();
  out.tensor_parallel = std::max(1u, topology->topology().tensor());
  out.pipeline_parallel = std::max(1u, topology->topology().pipeline());
  out.expert_parallel = std::max(1u, topology->topology().expert());
  return out;
}

absl::StatusOr<StartedDaemon> StartedDaemon::Start(
    std::vector<std::string> argv, std::vector<std::string> env,
    int output_fd) {
  SpawnOptions options;
  options.argv = std::move(argv);
  options.env = std::move(env);
  options.stdout_fd = output_fd;
  options.stderr_fd = output_fd;
  absl::StatusOr<ChildProcess> child = ChildProcess::Spawn(options);
  if (!child.ok()) return child.status();
  StartedDaemon daemon;
  daemon.child_ = *std::move(child);
  daemon.stopped_ = false;
  return daemon;
}

std::optional<int> StartedDaemon::Stop(absl::Duration grace) {
  if (stopped_) return std::nullopt;
  stopped_ = true;
  if (child_.running()) {
    child_.Signal(SIGTERM);
    if (!child_.WaitFor(grace).has_value()) {
      child_.Signal(SIGKILL);
      child_.WaitFor(absl::Seconds(5));
    }
  }
  // What the daemon left in its group (it starts nothing, normally).
  child_.SignalGroup(SIGKILL);
  return child_.Reap();
}

}  // namespace rankd::launcher
