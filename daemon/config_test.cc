#include "daemon/config.h"

#include <stdlib.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "daemon/flags.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  // Fixed host name so results do not depend on the machine.
  std::map<std::string, std::string> env_ = {{"HOSTNAME", "host-a"}};
  RawConfig raw_;

  EnvLookup Lookup() {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }

  absl::StatusOr<DaemonConfig> Resolve() {
    return ResolveConfig(raw_, Lookup());
  }

  DaemonConfig MustResolve() {
    absl::StatusOr<DaemonConfig> c = Resolve();
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : DaemonConfig{};
  }

  // Expects InvalidArgument whose message contains every one of `parts`.
  void ExpectError(const std::vector<std::string>& parts) {
    absl::StatusOr<DaemonConfig> c = Resolve();
    ASSERT_FALSE(c.ok()) << DescribeConfig(*c);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& part : parts) {
      EXPECT_TRUE(absl::StrContains(c.status().message(), part))
          << "missing '" << part << "' in: " << c.status().message();
    }
  }
};

// ---------------------------------------------------------------- defaults

TEST_F(ConfigTest, SingleNodeDefaults) {
  raw_.world_size = "4";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.job_id, "rankd-job");
  EXPECT_EQ(c.job_id, kDefaultJobId);
  EXPECT_EQ(c.world_size, 4u);
  EXPECT_EQ(c.nnodes, 1u);
  EXPECT_EQ(c.nproc_per_node, 4u);
  EXPECT_EQ(c.node_index, 0u);
  EXPECT_EQ(c.topology, (ParallelTopology{1, 1, 1, 4}));
  EXPECT_TRUE(c.is_coordinator);
  EXPECT_EQ(c.listen_address, "0.0.0.0:7421");
  EXPECT_EQ(c.advertise_address, "host-a:7421");
  EXPECT_EQ(c.coordinator_address, "host-a:7421");
  EXPECT_EQ(c.socket_path, "/run/rankd/rankd.sock");
  EXPECT_EQ(c.heartbeat_interval, absl::Milliseconds(250));
  EXPECT_EQ(c.heartbeat_timeout, absl::Milliseconds(2000));
  EXPECT_FALSE(c.tls.enabled());
  EXPECT_FALSE(c.tls.require_client_cert);
  EXPECT_EQ(c.credentials_dir, "");
  EXPECT_FALSE(c.allow_unauthenticated);
  EXPECT_FALSE(c.admin_kv_read);
  EXPECT_EQ(c.limits.kv_max_bytes, 256u << 20);
  EXPECT_EQ(c.limits.kv_max_keys, 65536u);
  EXPECT_EQ(c.limits.kv_max_keys_per_rank, 4096u);
  EXPECT_EQ(c.limits.max_waiting_gets_per_rank, 64u);
  EXPECT_EQ(c.limits.max_streams_per_caller, 8u);
  EXPECT_EQ(c.limits.max_operator_streams, 64u);
  EXPECT_EQ(c.metrics_address, "");
  EXPECT_EQ(c.hostname, "host-a");
  EXPECT_EQ(c.pod_name, "");
  EXPECT_EQ(c.node_name, "");
}

TEST_F(ConfigTest, HostnameFallsBackToOperatingSystem) {
  env_.clear();
  raw_.world_size = "1";
  const DaemonConfig c = MustResolve();
  EXPECT_FALSE(c.hostname.empty());
  EXPECT_EQ(c.advertise_address, JoinHostPort(c.hostname, 7421));
}

// ------------------------------------------------------------- sizes

TEST_F(ConfigTest, NprocPerNodeGivesWorldSize) {
  raw_.nnodes = "2";
  raw_.nproc_per_node = "4";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.world_size, 8u);
  EXPECT_EQ(c.nproc_per_node, 4u);
}

TEST_F(ConfigTest, WorldSizeGivesNprocPerNode) {
  raw_.nnodes = "2";
  raw_.world_size = "8";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.nproc_per_node, 4u);
}

TEST_F(ConfigTest, BothSizesConsistent) {
  raw_.nnodes = "2";
  raw_.world_size = "8";
  raw_.nproc_per_node = "4";
  EXPECT_EQ(MustResolve().world_size, 8u);
}

TEST_F(ConfigTest, WorldSizeMismatchNamesAllThree) {
  raw_.nnodes = "2";
  raw_.world_size = "7";
  raw_.nproc_per_node = "4";
  ExpectError({"--world_size=7 is not --nnodes(2) * --nproc_per_node(4)"});
}

TEST_F(ConfigTest, WorldSizeMismatchNamesEnvironmentSources) {
  env_["RANKD_WORLD_SIZE"] = "7";
  env_["LWS_GROUP_SIZE"] = "2";
  raw_.nproc_per_node = "4";
  ExpectError(
      {"RANKD_WORLD_SIZE=7 is not LWS_GROUP_SIZE(2) * --nproc_per_node(4)"});
}

TEST_F(ConfigTest, WorldSizeNotDivisibleByNnodes) {
  raw_.nnodes = "2";
  raw_.world_size = "7";
  ExpectError(
      {"--world_size=7 is not divisible by --nnodes(2)", "--nproc_per_node"});
}

TEST_F(ConfigTest, NeedsWorldSizeOrNprocPerNode) {
  ExpectError({"--world_size", "--nproc_per_node"});
}

TEST_F(ConfigTest, ZeroSizesRejected) {
  raw_.world_size = "0";
  ExpectError({"--world_size=0 must be >= 1"});
  raw_.world_size.reset();
  raw_.nproc_per_node = "0";
  ExpectError({"--nproc_per_node=0 must be >= 1"});
  raw_.nproc_per_node = "1";
  raw_.nnodes = "0";
  ExpectError({"--nnodes=0 must be >= 1"});
}

TEST_F(ConfigTest, WorldSizeUpperBound) {
  raw_.world_size = std::to_string(kMaxWorldSize + 1);
  ExpectError({"--world_size=", "exceeds the largest world size"});
  raw_.world_size.reset();
  raw_.nnodes = "65536";
  raw_.nproc_per_node = "65536";
  ExpectError({"--nnodes(65536) * --nproc_per_node(65536) exceeds"});
}

TEST_F(ConfigTest, NumbersParseStrictly) {
  for (const char* bad : {"4x", "-1", "+4", " 4", "4 ", "", "0x10", "4.0",
                          "4294967296", "99999999999", "１"}) {
    SCOPED_TRACE(bad);
    raw_.world_size = bad;
    ExpectError({"--world_size=", "is not a whole number"});
  }
  raw_.world_size = "08";
  EXPECT_EQ(MustResolve().world_size, 8u);
  raw_.world_size = "4";
  raw_.tensor_parallel = "2x";
  ExpectError({"--tensor_parallel=2x is not a whole number"});
}

TEST_F(ConfigTest, EmptyValueIsQuotedInError) {
  raw_.world_size = "";
  ExpectError({"--world_size=\"\" is not a whole number"});
}

// ------------------------------------------------------------- job id

TEST_F(ConfigTest, JobIdSyntax) {
  raw_.world_size = "1";
  raw_.job_id = "llama-70B_v1.2";
  EXPECT_EQ(MustResolve().job_id, "llama-70B_v1.2");
  raw_.job_id = std::string(128, 'a');
  EXPECT_TRUE(Resolve().ok());
  for (const std::string& bad :
       {std::string(""), std::string("a b"), std::string("a/b"),
        std::string("job:1"), std::string(129, 'a'), std::string("é")}) {
    SCOPED_TRACE(bad);
    raw_.job_id = bad;
    ExpectError({"--job_id=", "is not a job id", "A-Z a-z 0-9 . _ -"});
  }
  raw_.job_id.reset();
  env_["RANKD_JOB_ID"] = "bad id";
  ExpectError({"RANKD_JOB_ID=\"bad id\" is not a job id"});
}

// ------------------------------------------------------------- topology

TEST_F(ConfigTest, TopologyFromDegrees) {
  raw_.world_size = "16";
  raw_.tensor_parallel = "2";
  raw_.pipeline_parallel = "2";
  raw_.expert_parallel = "2";
  EXPECT_EQ(MustResolve().topology, (ParallelTopology{2, 2, 2, 2}));
  raw_.expert_parallel.reset();
  EXPECT_EQ(MustResolve().topology, (ParallelTopology{2, 2, 1, 4}));
}

TEST_F(ConfigTest, TopologyMustDivideWorldSize) {
  raw_.world_size = "8";
  raw_.tensor_parallel = "3";
  ExpectError(
      {"--tensor_parallel(3) * --pipeline_parallel(1) * "
       "--expert_parallel(1) does not divide --world_size(8)"});
  raw_.tensor_parallel = "4";
  raw_.pipeline_parallel = "4";
  ExpectError({"--tensor_parallel(4) * --pipeline_parallel(4)"});
}

TEST_F(ConfigTest, TopologyDerivedWorldSizeNamed) {
  raw_.nproc_per_node = "6";
  env_["RANKD_EXPERT_PARALLEL"] = "4";
  ExpectError(
      {"--tensor_parallel(1) * --pipeline_parallel(1) * "
       "RANKD_EXPERT_PARALLEL(4) does not divide --world_size(6)"});
}

TEST_F(ConfigTest, ZeroDegreeRejected) {
  raw_.world_size = "8";
  raw_.pipeline_parallel = "0";
  ExpectError({"--pipeline_parallel=0 must be >= 1"});
}

// ------------------------------------------------------------- precedence

TEST_F(ConfigTest, FlagBeatsRankdEnvironment) {
  raw_.world_size = "8";
  env_["RANKD_WORLD_SIZE"] = "16";
  raw_.job_id = "from-flag";
  env_["RANKD_JOB_ID"] = "from-env";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.world_size, 8u);
  EXPECT_EQ(c.job_id, "from-flag");
}

TEST_F(ConfigTest, EveryFlagHasRankdEnvironmentFallback) {
  env_["RANKD_JOB_ID"] = "env-job";
  env_["RANKD_WORLD_SIZE"] = "16";
  env_["RANKD_NNODES"] = "2";
  env_["RANKD_NODE_INDEX"] = "1";
  env_["RANKD_NPROC_PER_NODE"] = "8";
  env_["RANKD_COORDINATOR"] = "head:7000";
  env_["RANKD_LISTEN"] = "0.0.0.0:7000";
  env_["RANKD_ADVERTISE_ADDRESS"] = "worker-1:7000";
  env_["RANKD_SOCKET"] = "/tmp/r.sock";
  env_["RANKD_TENSOR_PARALLEL"] = "2";
  env_["RANKD_PIPELINE_PARALLEL"] = "2";
  env_["RANKD_EXPERT_PARALLEL"] = "2";
  env_["RANKD_HEARTBEAT_INTERVAL_MS"] = "100";
  env_["RANKD_HEARTBEAT_TIMEOUT_MS"] = "1000";
  env_["RANKD_TLS_CERT"] = "/c.pem";
  env_["RANKD_TLS_KEY"] = "/k.pem";
  env_["RANKD_TLS_CA"] = "/ca.pem";
  env_["RANKD_TLS_REQUIRE_CLIENT_CERT"] = "yes";
  env_["RANKD_CREDENTIALS_DIR"] = "/creds";
  env_["RANKD_METRICS_LISTEN"] = "0.0.0.0:9090";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.job_id, "env-job");
  EXPECT_EQ(c.world_size, 16u);
  EXPECT_EQ(c.nnodes, 2u);
  EXPECT_EQ(c.node_index, 1u);
  EXPECT_EQ(c.nproc_per_node, 8u);
  EXPECT_FALSE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "head:7000");
  EXPECT_EQ(c.listen_address, "0.0.0.0:7000");
  EXPECT_EQ(c.advertise_address, "worker-1:7000");
  EXPECT_EQ(c.socket_path, "/tmp/r.sock");
  EXPECT_EQ(c.topology, (ParallelTopology{2, 2, 2, 2}));
  EXPECT_EQ(c.heartbeat_interval, absl::Milliseconds(100));
  EXPECT_EQ(c.heartbeat_timeout, absl::Milliseconds(1000));
  EXPECT_EQ(c.tls.cert_file, "/c.pem");
  EXPECT_EQ(c.tls.key_file, "/k.pem");
  EXPECT_EQ(c.tls.ca_file, "/ca.pem");
  EXPECT_TRUE(c.tls.require_client_cert);
  EXPECT_EQ(c.credentials_dir, "/creds");
  EXPECT_EQ(c.metrics_address, "0.0.0.0:9090");
}

TEST_F(ConfigTest, RankdEnvironmentBeatsKubernetes) {
  // An explicit setting that agrees with Kubernetes is fine, and the
  // coordinator from RANKD_COORDINATOR beats LWS_LEADER_ADDRESS.
  env_["LWS_GROUP_SIZE"] = "2";
  env_["LWS_WORKER_INDEX"] = "1";
  env_["LWS_LEADER_ADDRESS"] = "leader.ns";
  env_["RANKD_NODE_INDEX"] = "1";
  env_["RANKD_COORDINATOR"] = "other:7421";
  raw_.nproc_per_node = "1";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.node_index, 1u);
  EXPECT_EQ(c.coordinator_address, "other:7421");
}

TEST_F(ConfigTest, EmptyFlagIsGivenEmptyKubernetesVariableIsAbsent) {
  raw_.world_size = "1";
  env_["RANKD_SOCKET"] = "/tmp/env.sock";
  raw_.socket = "";
  EXPECT_EQ(MustResolve().socket_path, "");
  raw_.socket.reset();
  EXPECT_EQ(MustResolve().socket_path, "/tmp/env.sock");
  env_["RANKD_SOCKET"] = "";
  EXPECT_EQ(MustResolve().socket_path, "");

  env_["LWS_WORKER_INDEX"] = "";
  env_["POD_IP"] = "";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.node_index, 0u);
  EXPECT_EQ(c.advertise_address, "host-a:7421");
}

// ---------------------------------------------------------- node index

TEST_F(ConfigTest, NodeIndexMustBeBelowNnodes) {
  raw_.nnodes = "2";
  raw_.node_index = "2";
  raw_.nproc_per_node = "1";
  raw_.coordinator = "head:7421";
  ExpectError({"--node_index=2 must be below --nnodes(2)"});
  raw_.nnodes.reset();
  ExpectError({"--node_index=2 must be below --nnodes(1)"});
}

// ---------------------------------------------------------- Kubernetes

TEST_F(ConfigTest, LeaderWorkerSetLeader) {
  env_ = {{"LWS_LEADER_ADDRESS", "rankd-0.rankd.default"},
          {"LWS_GROUP_SIZE", "2"},
          {"LWS_WORKER_INDEX", "0"},
          {"POD_IP", "10.0.0.1"},
          {"POD_NAME", "rankd-0"},
          {"NODE_NAME", "gpu-node-7"},
          {"HOSTNAME", "rankd-0"}};
  raw_.nproc_per_node = "4";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.nnodes, 2u);
  EXPECT_EQ(c.node_index, 0u);
  EXPECT_EQ(c.world_size, 8u);
  EXPECT_TRUE(c.is_coordinator);
  EXPECT_EQ(c.advertise_address, "10.0.0.1:7421");
  EXPECT_EQ(c.coordinator_address, "10.0.0.1:7421");
  EXPECT_EQ(c.pod_name, "rankd-0");
  EXPECT_EQ(c.node_name, "gpu-node-7");
  EXPECT_EQ(c.hostname, "rankd-0");
}

TEST_F(ConfigTest, LeaderWorkerSetWorker) {
  env_ = {{"LWS_LEADER_ADDRESS", "rankd-0.rankd.default"},
          {"LWS_GROUP_SIZE", "3"},
          {"LWS_WORKER_INDEX", "2"},
          {"POD_IP", "10.0.0.3"},
          {"HOSTNAME", "rankd-0-2"}};
  raw_.nproc_per_node = "8";
  raw_.listen = "0.0.0.0:9000";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.nnodes, 3u);
  EXPECT_EQ(c.node_index, 2u);
  EXPECT_EQ(c.world_size, 24u);
  EXPECT_FALSE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "rankd-0.rankd.default:9000");
  EXPECT_EQ(c.advertise_address, "10.0.0.3:9000");
}

TEST_F(ConfigTest, ExplicitCoordinatorBeatsLeaderWorkerSet) {
  env_ = {{"LWS_LEADER_ADDRESS", "rankd-0.rankd.default"},
          {"LWS_GROUP_SIZE", "2"},
          {"LWS_WORKER_INDEX", "1"},
          {"HOSTNAME", "rankd-0-1"}};
  raw_.nproc_per_node = "1";
  raw_.coordinator = "rankd-coordinator.default.svc:8000";
  const DaemonConfig c = MustResolve();
  EXPECT_FALSE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "rankd-coordinator.default.svc:8000");
}

TEST_F(ConfigTest, LeaderAddressMustBeHostName) {
  env_["LWS_LEADER_ADDRESS"] = "bad host";
  env_["LWS_GROUP_SIZE"] = "2";
  env_["LWS_WORKER_INDEX"] = "1";
  raw_.nproc_per_node = "1";
  ExpectError(
      {"LWS_LEADER_ADDRESS=\"bad host\" is not a host name", "--coordinator"});
}

TEST_F(ConfigTest, IndexedJobCompletionIndex) {
  env_["JOB_COMPLETION_INDEX"] = "3";
  raw_.nnodes = "4";
  raw_.nproc_per_node = "2";
  raw_.coordinator = "rankd-0.rankd:7421";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.node_index, 3u);
  EXPECT_FALSE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "rankd-0.rankd:7421");
}

TEST_F(ConfigTest, IndexedJobNodeZeroCoordinatesViaPodHostname) {
  // An Indexed Job pod "rankd-0" with a headless service: the coordinator
  // address names this pod by its first DNS label.
  env_ = {{"JOB_COMPLETION_INDEX", "0"},
          {"HOSTNAME", "rankd-0"},
          {"POD_IP", "10.1.2.3"}};
  raw_.nnodes = "2";
  raw_.nproc_per_node = "2";
  raw_.coordinator = "rankd-0.rankd.ns.svc.cluster.local:7421";
  const DaemonConfig c = MustResolve();
  EXPECT_TRUE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "10.1.2.3:7421");
}

TEST_F(ConfigTest, ExplicitNodeIndexConflictsWithLeaderWorkerSet) {
  env_["LWS_WORKER_INDEX"] = "2";
  env_["LWS_GROUP_SIZE"] = "4";
  raw_.node_index = "1";
  raw_.nproc_per_node = "1";
  ExpectError({"--node_index=1", "LWS_WORKER_INDEX=2", "must agree"});
}

TEST_F(ConfigTest, RankdNodeIndexConflictsWithCompletionIndex) {
  env_["JOB_COMPLETION_INDEX"] = "2";
  env_["RANKD_NODE_INDEX"] = "1";
  raw_.nnodes = "4";
  raw_.nproc_per_node = "1";
  raw_.coordinator = "head:7421";
  ExpectError({"RANKD_NODE_INDEX=1", "JOB_COMPLETION_INDEX=2"});
}

TEST_F(ConfigTest, KubernetesIndicesConflict) {
  env_["JOB_COMPLETION_INDEX"] = "2";
  env_["LWS_WORKER_INDEX"] = "1";
  raw_.nnodes = "4";
  raw_.nproc_per_node = "1";
  raw_.coordinator = "head:7421";
  ExpectError({"LWS_WORKER_INDEX=1", "JOB_COMPLETION_INDEX=2"});
}

TEST_F(ConfigTest, AgreeingValuesCompareNumerically) {
  env_["LWS_WORKER_INDEX"] = "01";
  env_["LWS_GROUP_SIZE"] = "2";
  env_["LWS_LEADER_ADDRESS"] = "leader";
  raw_.node_index = "1";
  raw_.nnodes = "2";
  raw_.nproc_per_node = "1";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.node_index, 1u);
  EXPECT_EQ(c.coordinator_address, "leader:7421");
}

TEST_F(ConfigTest, ExplicitNnodesConflictsWithGroupSize) {
  env_["LWS_GROUP_SIZE"] = "2";
  raw_.nnodes = "3";
  raw_.nproc_per_node = "1";
  ExpectError({"--nnodes=3", "LWS_GROUP_SIZE=2"});
}

TEST_F(ConfigTest, BadKubernetesNumbersNamed) {
  raw_.nproc_per_node = "1";
  env_["LWS_WORKER_INDEX"] = "abc";
  ExpectError({"LWS_WORKER_INDEX=abc is not a whole number"});
  env_.erase("LWS_WORKER_INDEX");
  env_["LWS_GROUP_SIZE"] = "-2";
  ExpectError({"LWS_GROUP_SIZE=-2 is not a whole number"});
  env_.erase("LWS_GROUP_SIZE");
  env_["JOB_COMPLETION_INDEX"] = "1.0";
  ExpectError({"JOB_COMPLETION_INDEX=1.0"});
}

// ---------------------------------------------------------- addresses

TEST_F(ConfigTest, AdvertiseFromPodIp) {
  raw_.world_size = "1";
  env_["POD_IP"] = "10.4.5.6";
  EXPECT_EQ(MustResolve().advertise_address, "10.4.5.6:7421");
  env_["POD_IP"] = "fd00::5";
  EXPECT_EQ(MustResolve().advertise_address, "[fd00::5]:7421");
  raw_.listen = "[::]:7500";
  EXPECT_EQ(MustResolve().advertise_address, "[fd00::5]:7500");
}

TEST_F(ConfigTest, BadPodIpNamed) {
  raw_.world_size = "1";
  env_["POD_IP"] = "not an ip";
  ExpectError({"POD_IP=\"not an ip\"", "--advertise_address"});
  env_["POD_IP"] = "0.0.0.0";
  ExpectError({"POD_IP=0.0.0.0"});
}

TEST_F(ConfigTest, AdvertiseFromSpecificListenHost) {
  raw_.world_size = "1";
  env_["POD_IP"] = "10.4.5.6";
  raw_.listen = "127.0.0.1:7500";
  EXPECT_EQ(MustResolve().advertise_address, "127.0.0.1:7500");
}

TEST_F(ConfigTest, ExplicitAdvertiseAddress) {
  raw_.world_size = "1";
  env_["POD_IP"] = "10.4.5.6";
  raw_.advertise_address = "public.example.com:443";
  const DaemonConfig c = MustResolve();
  EXPECT_EQ(c.advertise_address, "public.example.com:443");
  EXPECT_EQ(c.coordinator_address, "public.example.com:443");

  raw_.advertise_address = "0.0.0.0:7421";
  ExpectError({"--advertise_address=0.0.0.0:7421 must name a reachable"});
  raw_.advertise_address = "host:0";
  ExpectError({"--advertise_address=host:0"});
  raw_.advertise_address = "host";
  ExpectError({"--advertise_address=host is not HOST:PORT", "missing ':PORT'"});
}

TEST_F(ConfigTest, UnusableHostnameNeedsAdvertiseAddress) {
  raw_.world_size = "1";
  env_["HOSTNAME"] = "bad name!";
  ExpectError({"--advertise_address=HOST:PORT"});
}

TEST_F(ConfigTest, ListenSyntax) {
  raw_.world_size = "1";
  raw_.listen = "7421";
  ExpectError({"--listen=7421 is not HOST:PORT"});
  raw_.listen = "::1:7421";
  ExpectError({"--listen=::1:7421", "brackets"});
  raw_.listen = "[::1]:7421";
  EXPECT_EQ(MustResolve().advertise_address, "[::1]:7421");
}

TEST_F(ConfigTest, ListenPortZeroOnlyForSingleNode) {
  raw_.world_size = "2";
  raw_.listen = "127.0.0.1:0";
  EXPECT_EQ(MustResolve().listen_address, "127.0.0.1:0");
  raw_.nnodes = "2";
  ExpectError({"--listen=127.0.0.1:0", "--nnodes(2)"});
}

// ---------------------------------------------------------- coordinator

TEST_F(ConfigTest, NonZeroNodeNeedsCoordinator) {
  raw_.nnodes = "4";
  raw_.node_index = "2";
  raw_.nproc_per_node = "1";
  ExpectError({"node 2 needs --coordinator=HOST:PORT (or LWS_LEADER_ADDRESS)"});
}

TEST_F(ConfigTest, NodeZeroCoordinatesWithoutAddress) {
  raw_.nnodes = "4";
  raw_.nproc_per_node = "1";
  env_["POD_IP"] = "10.0.0.9";
  const DaemonConfig c = MustResolve();
  EXPECT_TRUE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "10.0.0.9:7421");
}

TEST_F(ConfigTest, LocalDaemonsOnOneHost) {
  // Two daemons on one machine, told apart by port.
  raw_.nnodes = "2";
  raw_.nproc_per_node = "1";
  raw_.coordinator = "127.0.0.1:7421";
  raw_.listen = "127.0.0.1:7421";
  DaemonConfig c = MustResolve();
  EXPECT_TRUE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "127.0.0.1:7421");

  raw_.node_index = "1";
  raw_.listen = "127.0.0.1:7422";
  c = MustResolve();
  EXPECT_FALSE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "127.0.0.1:7421");
  EXPECT_EQ(c.advertise_address, "127.0.0.1:7422");
}

TEST_F(ConfigTest, NodeZeroFollowsCoordinatorNamingAnotherHost) {
  raw_.nnodes = "2";
  raw_.nproc_per_node = "1";
  raw_.coordinator = "host-b:7421";
  const DaemonConfig c = MustResolve();
  EXPECT_FALSE(c.is_coordinator);
  EXPECT_EQ(c.coordinator_address, "host-b:7421");
}

TEST_F(ConfigTest, CoordinatorNamedByHostnamePodIpOrPodName) {
  raw_.nnodes = "2";
  raw_.node_index = "1";
  raw_.nproc_per_node = "1";
  env_["POD_IP"] = "10.0.0.2";
  env_["POD_NAME"] = "pod-b";
  for (const char* self :
       {"host-a:7421", "HOST-A:7421", "host-a.example.com:7421",
        "10.0.0.2:7421", "pod-b:7421", "pod-b.svc:7421"}) {
    SCOPED_TRACE(self);
    raw_.coordinator = self;
    const DaemonConfig c = MustResolve();
    EXPECT_TRUE(c.is_coordinator);
    EXPECT_EQ(c.coordinator_address, "10.0.0.2:7421");
  }
  for (const char* other : {"host-a:7422", "host-ab:7421", "10.0.0.3:7421",
                            "10.0.0.2:1", "example.host-a:7421"}) {
    SCOPED_TRACE(other);
    raw_.coordinator = other;
    EXPECT_FALSE(MustResolve().is_coordinator);
  }
}

TEST_F(ConfigTest, NumericCoordinatorHostIsNotMatchedByLabel) {
  env_["HOSTNAME"] = "10";
  raw_.nnodes = "2";
  raw_.nproc_per_node = "1";
  raw_.coordinator = "10.0.0.1:7421";
  EXPECT_FALSE(MustResolve().is_coordinator);
}

TEST_F(ConfigTest, CoordinatorSyntax) {
  raw_.nnodes = "2";
  raw_.nproc_per_node = "1";
  raw_.node_index = "1";
  raw_.coordinator = "head";
  ExpectError({"--coordinator=head is not HOST:PORT"});
  raw_.coordinator = "head:99999";
  ExpectError({"--coordinator=head:99999", "0..65535"});
  raw_.coordinator = "0.0.0.0:7421";
  ExpectError({"--coordinator=0.0.0.0:7421 must name a reachable host"});
  raw_.coordinator = "head:0";
  ExpectError({"--coordinator=head:0"});
  raw_.coordinator = "[fd00::1]:7421";
  EXPECT_EQ(MustResolve().coordinator_address, "[fd00::1]:7421");
}

// ---------------------------------------------------------- socket

TEST_F(ConfigTest, SocketPath) {
  raw_.world_size = "1";
  raw_.socket = "/tmp/rankd.sock";
  EXPECT_EQ(MustResolve().socket_path, "/tmp/rankd.sock");
  raw_.socket = "";
  EXPECT_EQ(MustResolve().socket_path, "");
  raw_.socket = "relative.sock";
  ExpectError({"--socket=relative.sock must be an absolute path"});
  raw_.socket = "/" + std::string(kMaxSocketPathLength, 'a');
  ExpectError({"--socket=", "longer than 107 bytes"});
  raw_.socket = "/" + std::string(kMaxSocketPathLength - 1, 'a');
  EXPECT_TRUE(Resolve().ok());
}

// ---------------------------------------------------------- heartbeat

TEST_F(ConfigTest, HeartbeatBounds) {
  raw_.world_size = "1";
  raw_.heartbeat_interval_ms = "100";
  raw_.heartbeat_timeout_ms = "201";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.heartbeat_interval, absl::Milliseconds(100));
  EXPECT_EQ(c.heartbeat_timeout, absl::Milliseconds(201));

  raw_.heartbeat_timeout_ms = "200";
  ExpectError(
      {"--heartbeat_timeout_ms=200 must be more than 2 * "
       "--heartbeat_interval_ms(100)"});

  raw_.heartbeat_interval_ms.reset();
  raw_.heartbeat_timeout_ms = "500";
  ExpectError(
      {"--heartbeat_timeout_ms=500 must be more than 2 * "
       "--heartbeat_interval_ms(250)"});

  raw_.heartbeat_timeout_ms.reset();
  raw_.heartbeat_interval_ms = "1000";
  ExpectError({"--heartbeat_timeout_ms=2000", "--heartbeat_interval_ms(1000)"});

  raw_.heartbeat_interval_ms = "9";
  ExpectError({"--heartbeat_interval_ms=9 must be in 10..60000"});
  raw_.heartbeat_interval_ms = "60001";
  ExpectError({"--heartbeat_interval_ms=60001"});
  raw_.heartbeat_interval_ms = "250";
  raw_.heartbeat_timeout_ms = "600001";
  ExpectError({"--heartbeat_timeout_ms=600001 must be at most 600000"});
  raw_.heartbeat_timeout_ms = "600000";
  EXPECT_TRUE(Resolve().ok());
  raw_.heartbeat_timeout_ms = "2s";
  ExpectError({"--heartbeat_timeout_ms=2s is not a whole number"});
}

// ------------------------------------------------------------ recovery

TEST_F(ConfigTest, RecoveryIsOffByDefaultAndValidated) {
  raw_.world_size = "1";
  DaemonConfig c = MustResolve();
  EXPECT_FALSE(c.recovery);
  EXPECT_EQ(c.recovery_deadline, absl::Minutes(5));
  raw_.recovery = "ON";
  raw_.recovery_deadline_ms = "2500";
  c = MustResolve();
  EXPECT_TRUE(c.recovery);
  EXPECT_EQ(c.recovery_deadline, absl::Milliseconds(2500));
  raw_.recovery = "maybe";
  ExpectError({"--recovery=maybe is not \"on\", \"domain\" or \"off\""});
  raw_.recovery = "domain";
  c = MustResolve();
  EXPECT_TRUE(c.recovery);
  EXPECT_TRUE(c.recovery_by_domain);
  raw_.recovery = "off";
  raw_.recovery_deadline_ms = "99";
  ExpectError({"--recovery_deadline_ms=99 must be in 100..86400000"});
  raw_.recovery_deadline_ms = "5m";
  ExpectError({"--recovery_deadline_ms=5m is not a whole number"});
  raw_.recovery_deadline_ms.reset();
  raw_.recovery.reset();
  env_["RANKD_RECOVERY"] = "on";
  EXPECT_TRUE(MustResolve().recovery);
}

// ---------------------------------------------------------- TLS and token

TEST_F(ConfigTest, TlsRules) {
  raw_.world_size = "1";
  raw_.tls_cert = "/etc/rankd/tls.crt";
  ExpectError({"--tls_cert=/etc/rankd/tls.crt needs --tls_key"});
  raw_.tls_cert.reset();
  raw_.tls_key = "/etc/rankd/tls.key";
  ExpectError({"--tls_key=/etc/rankd/tls.key needs --tls_cert"});
  raw_.tls_key.reset();
  raw_.tls_ca = "/etc/rankd/ca.crt";
  ExpectError({"--tls_ca=/etc/rankd/ca.crt needs --tls_cert and --tls_key"});

  raw_.tls_cert = "/etc/rankd/tls.crt";
  raw_.tls_key = "/etc/rankd/tls.key";
  DaemonConfig c = MustResolve();
  EXPECT_TRUE(c.tls.enabled());
  EXPECT_FALSE(c.tls.require_client_cert);
  EXPECT_EQ(c.tls.ca_file, "/etc/rankd/ca.crt");

  raw_.tls_require_client_cert = "true";
  c = MustResolve();
  EXPECT_TRUE(c.tls.require_client_cert);

  raw_.tls_ca.reset();
  ExpectError({"--tls_require_client_cert=true needs --tls_ca"});

  raw_.tls_require_client_cert = "maybe";
  ExpectError({"--tls_require_client_cert=maybe is not a boolean"});
}

TEST_F(ConfigTest, TlsBooleanSpellingsAndPrecedence) {
  raw_.world_size = "1";
  raw_.tls_cert = "/c";
  raw_.tls_key = "/k";
  raw_.tls_ca = "/ca";
  for (const char* yes : {"true", "TRUE", "1", "yes"}) {
    raw_.tls_require_client_cert = yes;
    EXPECT_TRUE(MustResolve().tls.require_client_cert) << yes;
  }
  for (const char* no : {"false", "False", "0", "no"}) {
    raw_.tls_require_client_cert = no;
    EXPECT_FALSE(MustResolve().tls.require_client_cert) << no;
  }
  env_["RANKD_TLS_REQUIRE_CLIENT_CERT"] = "true";
  raw_.tls_require_client_cert = "false";
  EXPECT_FALSE(MustResolve().tls.require_client_cert);
  raw_.tls_require_client_cert.reset();
  EXPECT_TRUE(MustResolve().tls.require_client_cert);
}

TEST_F(ConfigTest, EmptyTlsFlagsMeanOff) {
  raw_.world_size = "1";
  raw_.tls_cert = "";
  raw_.tls_key = "";
  EXPECT_FALSE(MustResolve().tls.enabled());
}

TEST_F(ConfigTest, LimitsComeFromFlagsOrEnvironmentAndMustBePositive) {
  raw_.world_size = "1";
  raw_.kv_max_bytes = "1048576";
  raw_.kv_max_keys = "100";
  raw_.kv_max_keys_per_rank = "10";
  raw_.max_waiting_gets_per_rank = "2";
  raw_.max_streams_per_caller = "3";
  env_["RANKD_MAX_OPERATOR_STREAMS"] = "4";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.limits.kv_max_bytes, 1048576u);
  EXPECT_EQ(c.limits.kv_max_keys, 100u);
  EXPECT_EQ(c.limits.kv_max_keys_per_rank, 10u);
  EXPECT_EQ(c.limits.max_waiting_gets_per_rank, 2u);
  EXPECT_EQ(c.limits.max_streams_per_caller, 3u);
  EXPECT_EQ(c.limits.max_operator_streams, 4u);
  EXPECT_TRUE(absl::StrContains(
      DescribeConfig(c),
      "kv_limit=1048576B,100keys,10keys/rank waiting_gets=2/rank "
      "streams=3/caller,4/operators"))
      << DescribeConfig(c);
  raw_.kv_max_keys_per_rank = "0";
  ExpectError({"--kv_max_keys_per_rank=0 must be >= 1"});
  raw_.kv_max_keys_per_rank = "10";
  env_["RANKD_MAX_OPERATOR_STREAMS"] = "-1";
  ExpectError({"RANKD_MAX_OPERATOR_STREAMS=-1 is not a whole number"});
  env_.erase("RANKD_MAX_OPERATOR_STREAMS");
  raw_.kv_max_bytes = "5000000000";
  ExpectError({"--kv_max_bytes=5000000000 is not a whole number"});
}

// Issue 36's limits: each rank's key-value quota (a fair share of the
// broker by default), the bytes a rank's rounds may hold, the job's shared
// key prefixes, and whether the daemon issues its ranks' tokens.
TEST_F(ConfigTest, PerRankLimitsSharedPrefixesAndRankTokenIssuing) {
  raw_.world_size = "4";
  raw_.kv_max_bytes = "1000000";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.limits.kv_max_bytes_per_rank, 250000u);  // 1000000 / 4
  EXPECT_EQ(c.limits.max_round_bytes_per_rank, kMaxRoundBytesPerRank);
  EXPECT_TRUE(c.kv_shared_prefixes.empty());
  EXPECT_FALSE(c.issue_rank_tokens);
  raw_.kv_max_bytes_per_rank = "4096";
  env_["RANKD_MAX_ROUND_BYTES_PER_RANK"] = "65536";
  raw_.kv_shared_prefixes = "shared/, leases/";
  raw_.issue_rank_tokens = "true";
  c = MustResolve();
  EXPECT_EQ(c.limits.kv_max_bytes_per_rank, 4096u);
  EXPECT_EQ(c.limits.max_round_bytes_per_rank, 65536u);
  EXPECT_EQ(c.limits.max_reflection_streams, kMaxReflectionStreams);
  EXPECT_EQ(c.limits.max_reflection_requests_per_stream,
            kMaxReflectionRequestsPerStream);
  EXPECT_EQ(c.kv_shared_prefixes,
            (std::vector<std::string>{"shared/", "leases/"}));
  EXPECT_TRUE(c.issue_rank_tokens);
  EXPECT_TRUE(absl::StrContains(
      DescribeConfig(c),
      "kv_per_rank=4096B round_bytes=65536B/rank kv_shared=shared/,leases/ "
      "issue_rank_tokens=on"))
      << DescribeConfig(c);
  raw_.kv_max_bytes_per_rank = "0";
  ExpectError({"--kv_max_bytes_per_rank=0 must be >= 1"});
  raw_.kv_max_bytes_per_rank = "4096";
  raw_.kv_shared_prefixes = "r1/";
  ExpectError({"'r1/' starts like a rank's own keys"});
  raw_.kv_shared_prefixes = "";
  raw_.issue_rank_tokens = "maybe";
  ExpectError({"--issue_rank_tokens=maybe"});
}

TEST_F(ConfigTest, CredentialsAndMetrics) {
  raw_.world_size = "1";
  raw_.credentials_dir = "/var/run/secrets/rankd";
  raw_.admin_kv_read = "yes";
  raw_.metrics_listen = "0.0.0.0:9090";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.credentials_dir, "/var/run/secrets/rankd");
  EXPECT_FALSE(c.allow_unauthenticated);
  EXPECT_TRUE(c.admin_kv_read);
  EXPECT_EQ(c.metrics_address, "0.0.0.0:9090");
  raw_.metrics_listen = "";
  EXPECT_EQ(MustResolve().metrics_address, "");
  raw_.metrics_listen = "9090";
  ExpectError({"--metrics_listen=9090 is not HOST:PORT"});
}

TEST_F(ConfigTest, RoundLinkPortIsAPortOrOff) {
  raw_.world_size = "1";
  EXPECT_EQ(MustResolve().round_link_port, 0);
  raw_.round_link_port = "7422";
  EXPECT_EQ(MustResolve().round_link_port, 7422);
  raw_.round_link_port = "OFF";
  EXPECT_EQ(MustResolve().round_link_port, -1);
  raw_.round_link_port.reset();
  env_["RANKD_ROUND_LINK_PORT"] = "off";
  EXPECT_EQ(MustResolve().round_link_port, -1);
  env_.erase("RANKD_ROUND_LINK_PORT");
  raw_.round_link_port = "70000";
  ExpectError({"--round_link_port=70000 is not a port (0..65535) or \"off\""});
  raw_.round_link_port = "-1";
  ExpectError({"--round_link_port=-1 is not a port"});
}

TEST_F(ConfigTest, RunningWithoutCredentialsIsAnExplicitExclusiveChoice) {
  raw_.world_size = "1";
  raw_.allow_unauthenticated = "true";
  EXPECT_TRUE(MustResolve().allow_unauthenticated);
  EXPECT_TRUE(absl::StrContains(DescribeConfig(MustResolve()),
                                "credentials=NONE (--allow_unauthenticated)"));
  raw_.credentials_dir = "/creds";
  ExpectError(
      {"--allow_unauthenticated=true contradicts "
       "--credentials_dir=/creds"});
  raw_.allow_unauthenticated = "maybe";
  ExpectError({"--allow_unauthenticated=maybe"});
}

// ---------------------------------------------------------- description

TEST_F(ConfigTest, DescribeConfigIsOneInformativeLine) {
  raw_.job_id = "llama";
  raw_.nnodes = "2";
  raw_.node_index = "1";
  raw_.nproc_per_node = "4";
  raw_.tensor_parallel = "4";
  raw_.coordinator = "head:7421";
  raw_.tls_cert = "/c";
  raw_.tls_key = "/k";
  raw_.tls_ca = "/ca";
  raw_.tls_require_client_cert = "true";
  env_["POD_NAME"] = "llama-1";
  const std::string d = DescribeConfig(MustResolve());
  EXPECT_EQ(d.find('\n'), std::string::npos);
  for (const char* part :
       {"job=llama", "world_size=8", "nnodes=2", "nproc_per_node=4",
        "node_index=1", "tp=4 pp=1 ep=1 dp=2", "role=worker",
        "coordinator=head:7421", "listen=0.0.0.0:7421", "advertise=host-a:7421",
        "socket=/run/rankd/rankd.sock", "heartbeat=250ms/2s", "tls=mutual",
        "credentials=-", "admin_kv_read=off", "metrics=off", "host=host-a",
        "pod=llama-1", "node=-"}) {
    EXPECT_TRUE(absl::StrContains(d, part)) << part << " not in " << d;
  }
}

// ---------------------------------------------------------------- listeners

TEST_F(ConfigTest, UnauthenticatedAndHealthConnectionsDeriveFromTheTotal) {
  raw_.world_size = "4";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.network.max_tcp_connections, 256u);
  EXPECT_EQ(c.network.max_tcp_unauthenticated, 128u);
  EXPECT_EQ(c.network.max_tcp_health_connections, 32u);
  EXPECT_EQ(c.network.max_tcp_health_connections_per_peer, 4u);
  raw_.max_tcp_connections = "40";
  c = MustResolve();
  EXPECT_EQ(c.network.max_tcp_unauthenticated, 20u);
  EXPECT_EQ(c.network.max_tcp_health_connections, 10u);
  raw_.max_tcp_unauthenticated = "39";
  raw_.max_tcp_health_connections = "0";
  raw_.max_tcp_health_connections_per_peer = "0";
  c = MustResolve();
  EXPECT_EQ(c.network.max_tcp_unauthenticated, 39u);
  EXPECT_EQ(c.network.max_tcp_health_connections, 0u);
  EXPECT_EQ(c.network.max_tcp_health_connections_per_peer, 0u);
}

TEST_F(ConfigTest, UnauthenticatedConnectionsStayBelowTheTotal) {
  raw_.world_size = "4";
  raw_.max_tcp_connections = "40";
  raw_.max_tcp_unauthenticated = "40";
  ExpectError(
      {"--max_tcp_unauthenticated=40", "below", "--max_tcp_connections(40)"});
  raw_.max_tcp_unauthenticated = "0";
  ExpectError({"--max_tcp_unauthenticated=0", ">= 1"});
  raw_.max_tcp_unauthenticated.reset();
  raw_.max_tcp_health_connections = "41";
  ExpectError({"--max_tcp_health_connections=41", "below"});
  raw_.max_tcp_health_connections.reset();
  raw_.max_tcp_connections = "1";
  ExpectError({"--max_tcp_connections=1", ">= 2"});
}

TEST_F(ConfigTest, LimitsHandedOnAsAnIntStopAtInt32Max) {
  raw_.world_size = "4";
  raw_.tcp_max_connection_age_ms = "2147483647";
  EXPECT_EQ(MustResolve().network.tcp_max_connection_age_ms, 2147483647u);
  raw_.tcp_max_connection_age_ms = "3000000000";
  ExpectError({"--tcp_max_connection_age_ms=3000000000", "above 2147483647"});
  raw_.tcp_max_connection_age_ms.reset();
  raw_.tcp_max_connection_idle_ms = "2147483648";
  ExpectError({"--tcp_max_connection_idle_ms=2147483648", "above"});
  raw_.tcp_max_connection_idle_ms.reset();
  raw_.tcp_max_threads = "4294967295";
  ExpectError({"--tcp_max_threads=4294967295", "above"});
  raw_.tcp_max_threads.reset();
  raw_.metrics_request_timeout_ms = "3000000000";
  ExpectError({"--metrics_request_timeout_ms=3000000000", "above"});
}

// ---------------------------------------------------------- environment

TEST(ProcessEnvTest, ReadsProcessEnvironment) {
  ASSERT_EQ(setenv("RANKD_CONFIG_TEST_VAR", "", 1), 0);
  EXPECT_EQ(ProcessEnv()("RANKD_CONFIG_TEST_VAR"),
            std::optional<std::string>(""));
  ASSERT_EQ(setenv("RANKD_CONFIG_TEST_VAR", "x y", 1), 0);
  EXPECT_EQ(ProcessEnv()("RANKD_CONFIG_TEST_VAR"),
            std::optional<std::string>("x y"));
  ASSERT_EQ(unsetenv("RANKD_CONFIG_TEST_VAR"), 0);
  EXPECT_EQ(ProcessEnv()("RANKD_CONFIG_TEST_VAR"), std::nullopt);
}

// ---------------------------------------------------------- flags

TEST(FlagsTest, CollectsOnlyGivenFlags) {
  const char* argv[] = {"rankd",
                        "--job_id=j1",
                        "--world_size=8",
                        "--nnodes=2",
                        "--coordinator=[fd00::1]:7421",
                        "--socket=",
                        "--tls_require_client_cert=true",
                        "--heartbeat_interval_ms",
                        "100"};
  absl::ParseCommandLine(sizeof(argv) / sizeof(argv[0]),
                         const_cast<char**>(argv));
  const RawConfig raw = RawConfigFromFlags();
  EXPECT_EQ(raw.job_id, "j1");
  EXPECT_EQ(raw.world_size, "8");
  EXPECT_EQ(raw.nnodes, "2");
  EXPECT_EQ(raw.coordinator, "[fd00::1]:7421");
  EXPECT_EQ(raw.socket, std::optional<std::string>(""));
  EXPECT_EQ(raw.tls_require_client_cert, "true");
  EXPECT_EQ(raw.heartbeat_interval_ms, "100");
  EXPECT_EQ(raw.node_index, std::nullopt);
  EXPECT_EQ(raw.nproc_per_node, std::nullopt);
  EXPECT_EQ(raw.listen, std::nullopt);
  EXPECT_EQ(raw.advertise_address, std::nullopt);
  EXPECT_EQ(raw.tensor_parallel, std::nullopt);
  EXPECT_EQ(raw.pipeline_parallel, std::nullopt);
  EXPECT_EQ(raw.expert_parallel, std::nullopt);
  EXPECT_EQ(raw.heartbeat_timeout_ms, std::nullopt);
  EXPECT_EQ(raw.tls_cert, std::nullopt);
  EXPECT_EQ(raw.tls_key, std::nullopt);
  EXPECT_EQ(raw.tls_ca, std::nullopt);
  EXPECT_EQ(raw.credentials_dir, std::nullopt);
  EXPECT_EQ(raw.metrics_listen, std::nullopt);
  EXPECT_EQ(raw.round_link_port, std::nullopt);
  EXPECT_EQ(raw.job_id, "j1");

  // Flags feed ResolveConfig like any RawConfig (mutual TLS would need
  // certificates, so leave that one out).
  RawConfig resolvable = raw;
  resolvable.tls_require_client_cert.reset();
  absl::StatusOr<DaemonConfig> c = ResolveConfig(
      resolvable, [](std::string_view name) -> std::optional<std::string> {
        if (name == "HOSTNAME") return "host-a";
        return std::nullopt;
      });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->world_size, 8u);
  EXPECT_EQ(c->socket_path, "");
  EXPECT_FALSE(c->is_coordinator);
}

// The metrics endpoint's bounds (issue 36 item 12).
TEST_F(ConfigTest, MetricsLimitsComeFromFlagsOrEnvironment) {
  raw_.world_size = "1";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.network.metrics_max_connections, 64u);
  EXPECT_EQ(c.network.metrics_max_connections_per_address, 8u);
  raw_.metrics_max_connections_per_address = "3";
  c = MustResolve();
  EXPECT_EQ(c.network.metrics_max_connections_per_address, 3u);
  raw_.metrics_max_connections_per_address.reset();
  env_["RANKD_METRICS_MAX_CONNECTIONS_PER_ADDRESS"] = "5";
  c = MustResolve();
  EXPECT_EQ(c.network.metrics_max_connections_per_address, 5u);
  env_["RANKD_METRICS_MAX_CONNECTIONS_PER_ADDRESS"] = "0";
  EXPECT_FALSE(Resolve().ok());
}

// A per-address bound above its total bounds nothing: given, it is
// refused naming both; by default it is lowered to the total.
TEST_F(ConfigTest, PerAddressBoundsAreAtMostTheirTotals) {
  raw_.world_size = "1";
  raw_.metrics_max_connections = "4";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.network.metrics_max_connections_per_address, 4u);
  raw_.metrics_max_connections_per_address = "4";
  EXPECT_EQ(MustResolve().network.metrics_max_connections_per_address, 4u);
  raw_.metrics_max_connections_per_address = "5";
  absl::StatusOr<DaemonConfig> refused = Resolve();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(),
                        "--metrics_max_connections_per_address=5 must be at "
                        "most --metrics_max_connections(4)"))
      << refused.status();
  raw_.metrics_max_connections_per_address.reset();
  raw_.metrics_max_connections.reset();
  env_["RANKD_MAX_TCP_CONNECTIONS"] = "16";
  c = MustResolve();
  EXPECT_EQ(c.network.max_tcp_connections_per_peer, 16u);
  EXPECT_EQ(c.network.max_tcp_unauthenticated, 8u);
  EXPECT_LE(c.network.max_tcp_unauthenticated_per_peer, 8u);
  raw_.max_tcp_connections_per_peer = "17";
  refused = Resolve();
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(),
                        "--max_tcp_connections_per_peer=17 must be at most "
                        "RANKD_MAX_TCP_CONNECTIONS(16)"))
      << refused.status();
  raw_.max_tcp_connections_per_peer.reset();
  raw_.max_tcp_health_connections = "2";
  EXPECT_EQ(MustResolve().network.max_tcp_health_connections_per_peer, 2u);
  raw_.max_tcp_health_connections_per_peer = "3";
  refused = Resolve();
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(
      refused.status().message(),
      "--max_tcp_health_connections_per_peer=3 must be at most "
      "--max_tcp_health_connections(2)"))
      << refused.status();
  raw_.max_tcp_health_connections = "0";  // none: the bound says nothing
  EXPECT_TRUE(Resolve().ok());
  raw_.max_tcp_health_connections.reset();
  raw_.max_tcp_health_connections_per_peer.reset();
  raw_.max_tcp_unauthenticated = "3";
  raw_.max_tcp_unauthenticated_per_peer = "4";
  refused = Resolve();
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(
      absl::StrContains(refused.status().message(),
                        "--max_tcp_unauthenticated_per_peer=4 must be at "
                        "most --max_tcp_unauthenticated(3)"))
      << refused.status();
}

// Server reflection's bounds (issue 36 items 9, 10).
TEST_F(ConfigTest, ReflectionLimitsComeFromFlagsOrEnvironment) {
  raw_.world_size = "1";
  DaemonConfig c = MustResolve();
  EXPECT_EQ(c.limits.max_reflection_streams, 32u);
  EXPECT_EQ(c.limits.max_reflection_requests_per_stream, 1024u);
  EXPECT_EQ(c.limits.max_reflection_streams_per_peer, 8u);
  raw_.max_reflection_streams = "4";
  env_["RANKD_MAX_REFLECTION_REQUESTS_PER_STREAM"] = "10";
  env_["RANKD_MAX_REFLECTION_STREAMS_PER_PEER"] = "2";
  c = MustResolve();
  EXPECT_EQ(c.limits.max_reflection_streams, 4u);
  EXPECT_EQ(c.limits.max_reflection_requests_per_stream, 10u);
  EXPECT_EQ(c.limits.max_reflection_streams_per_peer, 2u);
  EXPECT_TRUE(absl::StrContains(
      DescribeConfig(c), " reflection=4streams,10requests/stream,2/peer "));
  raw_.max_reflection_streams = "0";
  EXPECT_FALSE(Resolve().ok());
  raw_.max_reflection_streams = "4";
  raw_.max_reflection_streams_per_peer = "0";
  EXPECT_FALSE(Resolve().ok());
}

}  // namespace
}  // namespace rankd
