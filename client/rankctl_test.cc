// Unit tests of rankctl's argument parsing and output formatting.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "client/rankctl_args.h"
#include "client/rankctl_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<RankctlArgs> Parse(std::vector<std::string> args) {
  return ParseRankctlArgs(args);
}

TEST(RankctlArgsTest, ParsesFlagsAnywhereInBothForms) {
  auto a = Parse({"--target=host:7000", "members", "--json", "--timeout_ms",
                  "250", "--token_file", "/t"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, RankctlArgs::Command::kMembers);
  EXPECT_EQ(a->target, "host:7000");
  EXPECT_TRUE(a->json);
  EXPECT_EQ(a->timeout_ms, 250);
  EXPECT_EQ(a->token_file, "/t");

  auto kv = Parse({"kv", "get", "nccl/uid/1", "-target", "h:1"});
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->command, RankctlArgs::Command::kKvGet);
  EXPECT_EQ(kv->key, "nccl/uid/1");
  EXPECT_EQ(kv->target, "h:1");

  auto dash_key = Parse({"kv", "get", "--", "-weird-key"});
  ASSERT_TRUE(dash_key.ok()) << dash_key.status();
  EXPECT_EQ(dash_key->key, "-weird-key");

  auto watch = Parse({"watch", "--timeout_ms=0", "--after=12"});
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_EQ(watch->timeout_ms, 0);
  EXPECT_EQ(watch->after, 12u);

  auto health = Parse({"health", "--service=rankd.v1.Rank", "--json=false"});
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->service, "rankd.v1.Rank");
  EXPECT_FALSE(health->json);

  auto defaults = Parse({"status"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->timeout_ms, 5000);
  EXPECT_EQ(defaults->target, "");
  EXPECT_FALSE(defaults->json);

  auto create = Parse({"credentials", "create", "/tmp/job"});
  ASSERT_TRUE(create.ok()) << create.status();
  EXPECT_EQ(create->command, RankctlArgs::Command::kCredentialsCreate);
  EXPECT_EQ(create->credentials_dir, "/tmp/job");
  auto node_token =
      Parse({"credentials", "node-token", "/tmp/job", "llama", "3"});
  ASSERT_TRUE(node_token.ok()) << node_token.status();
  EXPECT_EQ(node_token->command, RankctlArgs::Command::kCredentialsNodeToken);
  EXPECT_EQ(node_token->job_id, "llama");
  EXPECT_EQ(node_token->node_index, 3u);

  auto help = Parse({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
  EXPECT_THAT(RankctlUsage(), HasSubstr("exit status"));
}

TEST(RankctlArgsTest, RejectsUsageErrors) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{}, "missing command"},
      {{"frobnicate"}, "unknown command"},
      {{"status", "extra"}, "unexpected argument"},
      {{"kv"}, "kv get KEY"},
      {{"kv", "put", "k"}, "kv get KEY"},
      {{"kv", "get"}, "needs a KEY"},
      {{"--bogus", "status"}, "unknown flag --bogus"},
      {{"status", "--target"}, "needs a value"},
      {{"status", "--target="}, "non-empty"},
      {{"status", "--timeout_ms=-5"}, "non-negative"},
      {{"status", "--timeout_ms=abc"}, "non-negative"},
      {{"status", "--timeout_ms=0"}, "watch only"},
      {{"status", "--service=x"}, "health command only"},
      {{"members", "--after=3"}, "watch command only"},
      {{"status", "--json=maybe"}, "bad value"},
      {{"status", "--tls_cert=c"}, "together"},
      {{"status", "--tls_cert=c", "--tls_key=k"}, "need --tls_ca"},
      {{"credentials"}, "credentials create DIR"},
      {{"credentials", "rotate", "d"}, "credentials create DIR"},
      {{"credentials", "create"}, "needs DIR"},
      {{"credentials", "node-token", "d", "job"}, "needs DIR JOB NODE"},
      {{"credentials", "node-token", "d", "job", "one"}, "node index"},
      {{"credentials", "create", "d", "extra"}, "unexpected argument"},
  };
  for (const auto& [args, why] : cases) {
    auto a = Parse(args);
    ASSERT_FALSE(a.ok()) << ::testing::PrintToString(args);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(a.status().message(), HasSubstr(why))
        << ::testing::PrintToString(args);
  }
}

TEST(FormatTableTest, AlignsColumnsWithoutTrailingBlanks) {
  EXPECT_EQ(
      FormatTable(
          {"RANK", "STATE", "DETAIL"},
          {{"0", "JOINED", ""}, {"10", "IN_ROUND", "waiting\nfor 3"}, {"2"}}),
      "RANK  STATE     DETAIL\n"
      "0     JOINED    -\n"
      "10    IN_ROUND  waiting for 3\n"
      "2     -         -\n");
  EXPECT_EQ(FormatTable({"A"}, {}), "A\n");
}

TEST(FormatTest, Helpers) {
  google::protobuf::RepeatedField<uint32_t> ranks;
  EXPECT_EQ(FormatRankList(ranks), "-");
  for (uint32_t r : {0, 1, 2, 3, 5, 7, 8}) ranks.Add(r);
  EXPECT_EQ(FormatRankList(ranks), "0-3,5,7-8");
  google::protobuf::RepeatedField<uint32_t> unordered;
  for (uint32_t r : {3, 1, 2}) unordered.Add(r);
  EXPECT_EQ(FormatRankList(unordered), "3,1-2");

  EXPECT_EQ(FormatMillis(-1), "-");
  EXPECT_EQ(FormatMillis(350), "350ms");
  EXPECT_EQ(FormatMillis(1500), "1.5s");
  EXPECT_EQ(FormatMillis(7380000), "2h3m");

  v1::DeviceInfo device;
  EXPECT_EQ(FormatDevice(device), "-");
  device.set_kind("cpu");
  EXPECT_EQ(FormatDevice(device), "cpu");
  device.set_kind("cuda");
  device.set_index(3);
  device.set_uuid("GPU-abc");
  EXPECT_EQ(FormatDevice(device), "cuda:3 (GPU-abc)");

  EXPECT_EQ(JobStateName(v1::JOB_STATE_FAILED), "FAILED");
  EXPECT_EQ(MemberStateName(v1::MEMBER_STATE_IN_ROUND), "IN_ROUND");
  EXPECT_EQ(NodeStateName(v1::NODE_STATE_LOST), "LOST");
  EXPECT_EQ(GroupKindName(v1::GROUP_KIND_TENSOR), "TENSOR");
  EXPECT_EQ(EventKindName(static_cast<v1::EventKind>(99)), "EVENT_KIND(99)");

  EXPECT_EQ(FormatKvValue("10.0.0.1:29500"), "10.0.0.1:29500");
  EXPECT_EQ(FormatKvValue(std::string("\x00\xff", 2)), "0x00ff");
}

TEST(FormatTest, Members) {
  v1::MemberList list;
  v1::MemberStatus* m1 = list.add_members();
  m1->set_rank(1);
  m1->set_node_index(0);
  m1->set_local_rank(1);
  m1->set_state(v1::MEMBER_STATE_IN_ROUND);
  m1->set_round(7);
  m1->set_pid(4242);
  m1->mutable_device()->set_kind("cuda");
  m1->mutable_device()->set_index(1);
  m1->set_detail("waiting for ranks 2-3");
  v1::MemberStatus* m0 = list.add_members();
  m0->set_rank(0);
  m0->set_state(v1::MEMBER_STATE_NOT_JOINED);
  v1::NodeStatus* n = list.add_nodes();
  n->set_node_index(0);
  n->set_state(v1::NODE_STATE_REGISTERED);
  n->set_hostname("pod-0");
  n->set_address("10.0.0.1:7000");
  n->set_heartbeat_age_ms(250);
  v1::NodeStatus* n1 = list.add_nodes();
  n1->set_node_index(1);
  n1->set_state(v1::NODE_STATE_NOT_REGISTERED);
  n1->set_heartbeat_age_ms(-1);
  EXPECT_EQ(FormatMembers(list),
            "RANK  NODE  LOCAL  STATE       ROUND  PID   DEVICE  DETAIL\n"
            "0     0     0      NOT_JOINED  0      -     -       -\n"
            "1     0     1      IN_ROUND    7      4242  cuda:1  waiting for "
            "ranks 2-3\n"
            "\n"
            "NODE  STATE           HOST   ADDRESS        HEARTBEAT_AGE  "
            "DETAIL\n"
            "0     REGISTERED      pod-0  10.0.0.1:7000  250ms          -\n"
            "1     NOT_REGISTERED  -      -              -              -\n");
}

TEST(FormatTest, JobStatus) {
  v1::JobStatus job;
  job.set_job_id("llama");
  job.set_job_incarnation(9);
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_failure("rank 5 lost: connection to daemon closed");
  job.set_world_size(8);
  job.set_joined_ranks(7);
  job.set_nnodes(2);
  job.set_registered_nodes(2);
  job.set_completed_rounds(12);
  job.set_served_by_node(0);
  job.set_served_by_coordinator(true);
  job.set_coordinator_address("10.0.0.1:7000");
  job.set_uptime_ms(61000);
  EXPECT_EQ(FormatJobStatus(job),
            "JOB          llama\n"
            "INCARNATION  9\n"
            "STATE        FAILED\n"
            "FAILURE      rank 5 lost: connection to daemon closed\n"
            "RANKS        7/8 joined\n"
            "NODES        2/2 registered\n"
            "ROUNDS       12 completed\n"
            "SERVED_BY    node 0 (coordinator)\n"
            "COORDINATOR  10.0.0.1:7000\n"
            "UPTIME       1m1s\n");
}

TEST(FormatTest, JobStatusRecoveringShowsEpochAndDeadline) {
  v1::JobStatus job;
  job.set_job_id("llama");
  job.set_job_incarnation(9);
  job.set_state(v1::JOB_STATE_RECOVERING);
  job.set_epoch(2);
  job.set_recovery_deadline_left_ms(61000);
  job.set_joined_ranks(7);
  job.set_world_size(8);
  std::string out = FormatJobStatus(job);
  EXPECT_TRUE(absl::StrContains(out,
                                "STATE        RECOVERING\n"
                                "EPOCH        2\n"
                                "RECOVERY     fails in 1m1s unless every "
                                "lost slot is taken\n"))
      << out;
  v1::JobEvent event;
  event.set_sequence(4);
  event.set_kind(v1::EVENT_KIND_JOB_RECOVERING);
  event.add_ranks(5);
  event.set_message("epoch 1 ended");
  event.set_epoch(2);
  EXPECT_TRUE(absl::StrContains(
      FormatEvent(event), "JOB_RECOVERING rank 5 epoch 1 ended (epoch 2)"))
      << FormatEvent(event);
}

TEST(FormatTest, JobStatusByDomainShowsEachReplica) {
  v1::JobStatus job;
  job.set_job_id("llama");
  job.set_state(v1::JOB_STATE_READY);
  job.set_epoch(2);
  job.set_serving_domains(1);
  v1::DomainStatus* serving = job.add_domains();
  serving->set_domain(0);
  serving->set_state(v1::DOMAIN_STATE_SERVING);
  serving->set_epoch(1);
  serving->set_first_world_round(1);
  v1::DomainStatus* recovering = job.add_domains();
  recovering->set_domain(1);
  recovering->set_state(v1::DOMAIN_STATE_RECOVERING);
  recovering->set_epoch(2);
  recovering->add_lost_ranks(5);
  recovering->set_recovery_deadline_left_ms(59000);
  std::string out = FormatJobStatus(job);
  EXPECT_TRUE(absl::StrContains(
      out,
      "DOMAINS      1/2 serving; domain 0 serving at epoch 1 from round 1; "
      "domain 1 recovering at epoch 2, lost rank 5, fails the job in 59s\n"))
      << out;
}

TEST(FormatTest, Topology) {
  v1::Topology t;
  t.set_job_id("llama");
  t.set_world_size(4);
  t.set_nnodes(2);
  t.set_nproc_per_node(2);
  t.mutable_topology()->set_tensor(2);
  t.mutable_topology()->set_pipeline(1);
  t.mutable_topology()->set_expert(1);
  t.mutable_topology()->set_data(2);
  v1::NodeInfo* n1 = t.add_nodes();
  n1->set_node_index(1);
  n1->set_hostname("host-1");
  n1->set_address("10.0.0.2:7000");
  n1->set_local_ranks(2);
  v1::NodeInfo* n0 = t.add_nodes();
  n0->set_node_index(0);
  n0->set_hostname("host-0");
  n0->set_address("10.0.0.1:7000");
  n0->set_pod_name("llama-0");
  n0->set_local_ranks(2);
  n0->add_devices()->set_kind("cuda");
  v1::DeviceInfo* d = n0->add_devices();
  d->set_kind("cuda");
  d->set_index(1);
  v1::CollectiveGroup* world = t.add_groups();
  world->set_id(1);
  world->set_kind(v1::GROUP_KIND_WORLD);
  for (uint32_t r : {0, 1, 2, 3}) world->add_members(r);
  v1::CollectiveGroup* tp = t.add_groups();
  tp->set_id(2);
  tp->set_kind(v1::GROUP_KIND_TENSOR);
  for (uint32_t r : {0, 1}) tp->add_members(r);
  EXPECT_EQ(FormatTopology(t),
            "JOB          llama\n"
            "WORLD_SIZE   4\n"
            "NODES        2 x 2 ranks per node\n"
            "PARALLELISM  tensor=2 pipeline=1 expert=1 data=2\n"
            "\n"
            "NODE  HOST    ADDRESS        POD      LOCAL_RANKS  DEVICES\n"
            "0     host-0  10.0.0.1:7000  llama-0  2            cuda:0,cuda:1\n"
            "1     host-1  10.0.0.2:7000  -        2            -\n"
            "\n"
            "GROUP  KIND    SIZE  MEMBERS\n"
            "1      WORLD   4     0-3\n"
            "2      TENSOR  2     0-1\n");
}

TEST(FormatTest, EventLine) {
  v1::JobEvent e;
  e.set_sequence(12);
  e.set_kind(v1::EVENT_KIND_NODE_LOST);
  e.set_time_unix_ms(1700000000123);
  e.set_node_index(1);
  for (uint32_t r : {4, 5, 6, 7}) e.add_ranks(r);
  e.set_message("node 1 lost:\nheartbeat timeout");
  EXPECT_EQ(FormatEvent(e),
            "#12 2023-11-14T22:13:20.123Z NODE_LOST node 1 ranks 4-7 node 1 "
            "lost: heartbeat timeout");
  v1::JobEvent joined;
  joined.set_sequence(1);
  joined.set_kind(v1::EVENT_KIND_MEMBER_JOINED);
  joined.add_ranks(3);
  EXPECT_EQ(FormatEvent(joined),
            "#1 1970-01-01T00:00:00.000Z MEMBER_JOINED rank 3");
  // No escape sequence (ESC, BEL, DEL) reaches the terminal.
  joined.set_message("\x1b]0;owned\x07 x\x7f");
  EXPECT_EQ(FormatEvent(joined),
            "#1 1970-01-01T00:00:00.000Z MEMBER_JOINED rank 3  ]0;owned  x ");
}

TEST(FormatTest, TerminalSafeReplacesEveryControlCharacter) {
  EXPECT_EQ(TerminalSafe("a\x1b[31mb\tc\nd\x7f\x01"), "a [31mb c d  ");
  EXPECT_EQ(TerminalSafe("plain: words [OK]"), "plain: words [OK]");
  EXPECT_EQ(TerminalSafe(""), "");
  // U+009B (CSI) in UTF-8; other UTF-8 stays.
  EXPECT_EQ(TerminalSafe("a\xc2\x9b"
                         "2Jb \xc3\xa9"),
            "a  2Jb \xc3\xa9");
}

TEST(FormatTest, JsonPrintsEveryField) {
  v1::JobStatus job;
  job.set_job_id("llama");
  auto multi = ToJson(job, /*multiline=*/true);
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_THAT(*multi, HasSubstr("\"jobId\": \"llama\""));
  EXPECT_THAT(*multi, HasSubstr("\"state\": \"JOB_STATE_UNSPECIFIED\""));
  EXPECT_THAT(*multi, HasSubstr("\"worldSize\": 0"));
  EXPECT_THAT(*multi, HasSubstr("\"servedByCoordinator\": false"));
  v1::JobEvent e;
  e.set_sequence(3);
  auto line = ToJson(e, /*multiline=*/false);
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(line->find('\n'), std::string::npos);
  EXPECT_THAT(*line, HasSubstr("\"sequence\":\"3\""));
}

}  // namespace
}  // namespace rankd
