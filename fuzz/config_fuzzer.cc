// Fuzzes the daemon's configuration parsing (daemon/config.h). An input is
// lines "name=value": names of RawConfig fields are flags, any other name
// is an environment variable (RANKD_*, Kubernetes' POD_IP, LWS_*, ...).
// When ResolveConfig accepts them, the promises of its contract are
// checked (sizes agree, the node index is in range, addresses parse).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "daemon/config.h"

namespace {

void Require(bool promise, const char* what) {
  if (promise) return;
  std::fprintf(stderr, "config_fuzzer: broken promise: %s\n", what);
  std::abort();
}

std::optional<std::string>* FlagNamed(rankd::RawConfig& raw,
                                      absl::string_view name) {
  const std::map<absl::string_view, std::optional<std::string>*> flags = {
      {"job_id", &raw.job_id},
      {"world_size", &raw.world_size},
      {"nnodes", &raw.nnodes},
      {"node_index", &raw.node_index},
      {"nproc_per_node", &raw.nproc_per_node},
      {"coordinator", &raw.coordinator},
      {"listen", &raw.listen},
      {"advertise_address", &raw.advertise_address},
      {"socket", &raw.socket},
      {"tensor_parallel", &raw.tensor_parallel},
      {"pipeline_parallel", &raw.pipeline_parallel},
      {"expert_parallel", &raw.expert_parallel},
      {"heartbeat_interval_ms", &raw.heartbeat_interval_ms},
      {"heartbeat_timeout_ms", &raw.heartbeat_timeout_ms},
      {"register_timeout_ms", &raw.register_timeout_ms},
      {"tls_cert", &raw.tls_cert},
      {"tls_key", &raw.tls_key},
      {"tls_ca", &raw.tls_ca},
      {"tls_require_client_cert", &raw.tls_require_client_cert},
      {"credentials_dir", &raw.credentials_dir},
      {"allow_unauthenticated", &raw.allow_unauthenticated},
      {"admin_kv_read", &raw.admin_kv_read},
      {"metrics_listen", &raw.metrics_listen},
  };
  auto it = flags.find(name);
  return it == flags.end() ? nullptr : it->second;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  rankd::RawConfig raw;
  std::map<std::string, std::string, std::less<>> env;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (std::optional<std::string>* flag = FlagNamed(raw, kv.first)) {
      *flag = std::string(kv.second);
    } else {
      env[std::string(kv.first)] = std::string(kv.second);
    }
  }
  (void)rankd::ParseHostPort(std::string_view(text.data(), text.size()));
  absl::StatusOr<rankd::DaemonConfig> config = rankd::ResolveConfig(
      raw, [&env](std::string_view name) -> std::optional<std::string> {
        auto it = env.find(name);
        if (it == env.end()) return std::nullopt;
        return it->second;
      });
  if (!config.ok()) {
    Require(config.status().code() == absl::StatusCode::kInvalidArgument,
            "a refused configuration is not InvalidArgument");
    return 0;
  }
  Require(config->nnodes >= 1 && config->node_index < config->nnodes,
          "node index outside [0, nnodes)");
  Require(static_cast<uint64_t>(config->nnodes) * config->nproc_per_node ==
              config->world_size,
          "world_size != nnodes * nproc_per_node");
  Require(rankd::IsJobId(config->job_id), "the job id is not a job id");
  Require(rankd::ParseHostPort(config->advertise_address).ok(),
          "the advertise address does not parse");
  if (!config->coordinator_address.empty()) {
    Require(rankd::ParseHostPort(config->coordinator_address).ok(),
            "the coordinator address does not parse");
  }
  (void)rankd::DescribeConfig(*config);
  return 0;
}
