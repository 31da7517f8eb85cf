// rankrun's command line: what is accepted, how, and the exact error for
// each kind of bad input.
#include "launcher/options.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

EnvLookup Env(std::map<std::string, std::string> vars = {}) {
  return [vars](absl::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

LaunchOptions MustParse(const std::vector<std::string>& args,
                        const EnvLookup& env = Env()) {
  absl::StatusOr<ParsedCommandLine> parsed = ParseOptions(args, env);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed.ok() && parsed->help);
  return parsed.ok() ? parsed->options : LaunchOptions{};
}

std::string Error(const std::vector<std::string>& args,
                  const EnvLookup& env = Env()) {
  absl::StatusOr<ParsedCommandLine> parsed = ParseOptions(args, env);
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST(Options, DefaultsLeaveSizesToTheDaemonOrOne) {
  LaunchOptions o = MustParse({"prog"});
  EXPECT_FALSE(o.nproc_per_node.has_value());
  EXPECT_FALSE(o.nnodes.has_value());
  EXPECT_FALSE(o.node_rank.has_value());
  EXPECT_EQ(o.daemon, DaemonMode::kAuto);
  EXPECT_EQ(o.stop_grace_ms, kDefaultStopGraceMs);
  EXPECT_EQ(o.daemon_timeout_ms, kDefaultDaemonTimeoutMs);
  // Ranks' lines are labelled and kept whole unless asked otherwise.
  EXPECT_TRUE(o.prefix_output);
  EXPECT_THAT(o.command, ElementsAre("prog"));
}

TEST(Options, BothValueFormsDashesAndAliases) {
  LaunchOptions o = MustParse({"--nproc_per_node=4",
                               "--nnodes",
                               "2",
                               "--node-rank=1",
                               "--coordinator",
                               "node0:7421",
                               "--tp=2",
                               "--pp",
                               "2",
                               "--expert-parallel=1",
                               "--job_id=llama.70b",
                               "--daemon=start",
                               "--credentials_dir",
                               "/creds",
                               "--stop_grace_ms=250",
                               "--prefix-output",
                               "--rankd_arg=--metrics_listen=0.0.0.0:9421",
                               "--",
                               "serve.py",
                               "--flag",
                               "-x"});
  EXPECT_EQ(o.nproc_per_node, 4u);
  EXPECT_EQ(o.nnodes, 2u);
  EXPECT_EQ(o.node_rank, 1u);
  EXPECT_EQ(o.node_rank_source, "--node-rank");
  EXPECT_EQ(o.coordinator, "node0:7421");
  EXPECT_EQ(o.tensor_parallel, 2u);
  EXPECT_EQ(o.pipeline_parallel, 2u);
  EXPECT_EQ(o.expert_parallel, 1u);
  EXPECT_EQ(o.job_id, "llama.70b");
  EXPECT_EQ(o.daemon, DaemonMode::kStart);
  EXPECT_EQ(o.credentials_dir, "/creds");
  EXPECT_EQ(o.stop_grace_ms, 250);
  EXPECT_TRUE(o.prefix_output);
  EXPECT_THAT(o.rankd_args, ElementsAre("--metrics_listen=0.0.0.0:9421"));
  EXPECT_THAT(o.command, ElementsAre("serve.py", "--flag", "-x"));
}

TEST(Options, ProgramEndsTheOptions) {
  LaunchOptions o = MustParse({"--nproc_per_node=2", "python3", "-u",
                               "--nproc_per_node=9", "train.py"});
  EXPECT_EQ(o.nproc_per_node, 2u);
  EXPECT_THAT(o.command,
              ElementsAre("python3", "-u", "--nproc_per_node=9", "train.py"));
}

TEST(Options, BooleanForms) {
  EXPECT_TRUE(MustParse({"--prefix_output=true", "p"}).prefix_output);
  EXPECT_FALSE(MustParse({"--prefix_output=false", "p"}).prefix_output);
  EXPECT_THAT(Error({"--prefix_output=maybe", "p"}),
              HasSubstr("--prefix_output=maybe is not true or false"));
}

TEST(Options, Help) {
  for (const char* flag : {"-h", "--help"}) {
    absl::StatusOr<ParsedCommandLine> parsed =
        ParseOptions({"--nnodes=2", flag, "--bogus"}, Env());
    ASSERT_TRUE(parsed.ok()) << flag;
    EXPECT_TRUE(parsed->help);
  }
  const std::string help = HelpText();
  for (const char* name : {"--nproc_per_node",
                           "--nnodes",
                           "--node_rank",
                           "--coordinator",
                           "--tensor_parallel",
                           "--pipeline_parallel",
                           "--expert_parallel",
                           "--job_id",
                           "--daemon=auto|start|reuse",
                           "--rankd_socket",
                           "--target",
                           "--credentials_dir",
                           "--rankd=PATH",
                           "--rankd_listen",
                           "--rankd_advertise",
                           "--rankd_log",
                           "--rankd_arg",
                           "--daemon_timeout_ms",
                           "--stop_grace_ms",
                           "--exit_delay_ms",
                           "--prefix_output[=true|false]",
                           "--help",
                           "RANKD_TARGET",
                           "RANKD_RANK",
                           "RANKD_RANK_TOKEN",
                           "LOCAL_WORLD_SIZE",
                           "{local_rank}",
                           "Exit status"}) {
    EXPECT_THAT(help, HasSubstr(name));
  }
}

TEST(Options, NodeRankFromTheDaemonsKubernetesVariables) {
  LaunchOptions o = MustParse({"p"}, Env({{"LWS_WORKER_INDEX", "3"}}));
  EXPECT_EQ(o.node_rank, 3u);
  EXPECT_EQ(o.node_rank_source, "LWS_WORKER_INDEX");
  o = MustParse({"p"}, Env({{"JOB_COMPLETION_INDEX", "2"},
                            {"RANKD_NODE_INDEX", "2"},
                            {"LWS_WORKER_INDEX", ""}}));
  EXPECT_EQ(o.node_rank, 2u);
  // The flag wins; the variables are not consulted.
  o = MustParse({"--node_rank=0", "p"}, Env({{"LWS_WORKER_INDEX", "1"}}));
  EXPECT_EQ(o.node_rank, 0u);
  EXPECT_THAT(Error({"p"}, Env({{"RANKD_NODE_INDEX", "1"},
                                {"JOB_COMPLETION_INDEX", "2"}})),
              HasSubstr("RANKD_NODE_INDEX=1 but JOB_COMPLETION_INDEX=2; they "
                        "must agree"));
  EXPECT_THAT(Error({"p"}, Env({{"LWS_WORKER_INDEX", "x"}})),
              HasSubstr("LWS_WORKER_INDEX=x is not a whole number"));
  EXPECT_THAT(Error({"--nnodes=2", "p"}, Env({{"LWS_WORKER_INDEX", "2"}})),
              HasSubstr("LWS_WORKER_INDEX=2 must be below --nnodes(2)"));
}

TEST(Options, BadValuesNameTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc_per_node=0", "p"},
       "--nproc_per_node=0 is not a whole number in 1..1048576"},
      {{"--nproc_per_node=-1", "p"}, "--nproc_per_node=-1 is not"},
      {{"--nproc_per_node=2x", "p"}, "--nproc_per_node=2x is not"},
      {{"--nproc_per_node=", "p"}, "--nproc_per_node=\"\" is not"},
      {{"--nnodes=abc", "p"}, "--nnodes=abc is not a whole number"},
      {{"--tp=0", "p"}, "--tp=0 is not a whole number in 1.."},
      {{"--node_rank=1", "--nnodes=1", "p"},
       "--node_rank=1 must be below --nnodes(1)"},
      {{"--coordinator=node0", "p"},
       "--coordinator=node0 is not HOST:PORT: missing ':PORT'"},
      {{"--coordinator=node0:0", "p"},
       "--coordinator=node0:0 needs a port in 1..65535"},
      {{"--coordinator=0.0.0.0:7421", "p"}, "not a wildcard address"},
      {{"--coordinator=::1:7421", "p"}, "needs brackets"},
      {{"--job_id=a b", "p"}, "--job_id=\"a b\" is not a job id"},
      {{"--daemon=maybe", "p"}, "--daemon=maybe: use auto, start or reuse"},
      {{"--rankd_socket=rel.sock", "p"},
       "--rankd_socket=rel.sock must be an absolute path"},
      {{"--rankd_socket=/" + std::string(120, 'x'), "p"},
       "bytes, the limit for Unix sockets"},
      {{"--stop_grace_ms=soon", "p"}, "--stop_grace_ms=soon is not"},
      {{"--daemon_timeout_ms=0", "p"},
       "--daemon_timeout_ms=0 is not a whole number in 1..3600000"},
      {{"--rankd_arg=metrics", "p"}, "must be a rankd flag"},
      {{"--rankd_listen=nowhere", "p"}, "--rankd_listen=nowhere is not"},
      {{"--bogus=1", "p"}, "unknown option --bogus (see --help)"},
      {{"-n", "2", "p"}, "unknown option -n"},
      {{"--nproc_per_node"}, "--nproc_per_node needs a value"},
      {{"--nproc_per_node=2"}, "missing PROGRAM"},
      {{"--nproc_per_node=2", "--"}, "missing PROGRAM"},
      {{"--nnodes=1024", "--nproc_per_node=2048", "p"},
       "exceeds the largest world size"},
  };
  for (const auto& [args, expected] : cases) {
    EXPECT_THAT(Error(args), HasSubstr(expected)) << args[0];
  }
}

TEST(Options, RulesBetweenOptions) {
  EXPECT_THAT(Error({"--daemon=start", "--nnodes=2", "p"}),
              HasSubstr("--nnodes=2 needs --coordinator=HOST:PORT"));
  EXPECT_THAT(Error({"--daemon=start", "--nnodes=2", "--coordinator=h:1", "p"}),
              HasSubstr("--nnodes=2 needs --credentials_dir=DIR"));
  EXPECT_THAT(Error({"--target=h:1", "--rankd_socket=/s", "p"}),
              HasSubstr("exclude each other"));
  EXPECT_THAT(Error({"--target=h:1", "--daemon=start", "p"}),
              HasSubstr("cannot be used with --daemon=start"));
  EXPECT_THAT(Error({"--daemon=reuse", "--rankd_listen=h:1", "p"}),
              HasSubstr("--rankd_listen is for a daemon rankrun starts, but "
                        "--daemon=reuse never starts one"));
  EXPECT_THAT(Error({"--target=h:1", "--rankd=/bin/rankd", "p"}),
              HasSubstr("--rankd is for a daemon rankrun starts, but "
                        "--target never starts one"));
  // With --daemon=auto a multi-node job may still reuse a daemon, so the
  // coordinator is checked only once rankrun knows it has to start one.
  EXPECT_EQ(MustParse({"--nnodes=2", "p"}).nnodes, 2u);
}

TEST(Options, RestartsAndTheirRecoveryFlags) {
  LaunchOptions none = MustParse({"prog"});
  EXPECT_EQ(none.max_restarts, 0u);
  EXPECT_EQ(none.restart_backoff_ms, kDefaultRestartBackoffMs);
  EXPECT_FALSE(none.recovery_deadline_ms.has_value());

  LaunchOptions o = MustParse({"--max-restarts=3", "--restart_backoff_ms=0",
                               "--recovery_deadline_ms=60000", "prog"});
  EXPECT_EQ(o.max_restarts, 3u);
  EXPECT_EQ(o.restart_backoff_ms, 0);
  EXPECT_EQ(o.recovery_deadline_ms, 60000);

  // The first restart at once; then (k - 1) x the backoff.
  LaunchOptions backoff = MustParse({"--max_restarts=3", "prog"});
  EXPECT_EQ(RestartBackoff(backoff, 1), absl::ZeroDuration());
  EXPECT_EQ(RestartBackoff(backoff, 2), absl::Milliseconds(1000));
  EXPECT_EQ(RestartBackoff(backoff, 3), absl::Milliseconds(2000));
  EXPECT_EQ(RestartBackoff(o, 3), absl::ZeroDuration());

  EXPECT_THAT(Error({"--max_restarts=-1", "prog"}),
              HasSubstr("--max_restarts=-1 is not a whole number in 0..1000"));
  EXPECT_THAT(Error({"--recovery_deadline_ms=60000", "prog"}),
              HasSubstr("needs --max_restarts above 0"));
  EXPECT_THAT(Error({"--max_restarts=1", "--rankd_arg=--recovery=off", "prog"}),
              HasSubstr("rankrun sets the daemon's --recovery itself"));
  EXPECT_FALSE(o.recovery.has_value());  // on
  EXPECT_EQ(
      MustParse({"--max_restarts=1", "--recovery=domain", "prog"}).recovery,
      "domain");
  EXPECT_THAT(Error({"--max_restarts=1", "--recovery=off", "prog"}),
              HasSubstr("--recovery=off is not a recovery mode rankrun starts "
                        "a daemon with: on or domain"));
  EXPECT_THAT(Error({"--recovery=domain", "prog"}),
              HasSubstr("--recovery=domain needs --max_restarts above 0"));
  EXPECT_THAT(Error({"--max_restarts=1", "--recovery=domain", "--daemon=reuse",
                     "prog"}),
              HasSubstr("--recovery is for a daemon rankrun starts"));
  EXPECT_THAT(Error({"--max_restarts=1", "--recovery_deadline_ms=5000",
                     "--daemon=reuse", "prog"}),
              HasSubstr("--recovery_deadline_ms is for a daemon rankrun "
                        "starts"));
}

}  // namespace
}  // namespace rankd::launcher
