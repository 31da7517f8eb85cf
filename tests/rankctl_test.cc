// The real `rankctl` binary against a live job: real rankd daemons with
// real rank processes (tests/rank_worker) joined and holding. Every command
// is checked in table form and with --json (parsed back into the rankd.v1
// messages), plus the exit statuses of errors.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/credentials.h"
#include "common/time_format.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/common.pb.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Runs client/rankctl with `args`; stdout and stderr are kept apart.
// Sends the job's operator token (rankctl reads it from the file).
std::string TokenFlag(const LocalCluster& cluster) {
  return absl::StrCat("--token_file=", cluster.credentials_dir(),
                      "/operator.token");
}

Result Rankctl(const std::vector<std::string>& args) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  static int calls = 0;
  const std::string out = absl::StrCat(dir, "/rankctl", ++calls, ".out");
  const std::string err = absl::StrCat(dir, "/rankctl", calls, ".err");
  std::string command = Quote(Runfile("client/rankctl"));
  for (const std::string& a : args) absl::StrAppend(&command, " ", Quote(a));
  absl::StrAppend(&command, " >", out, " 2>", err, " </dev/null");
  int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

template <typename Message>
Message ParseJson(const std::string& json) {
  Message message;
  auto status = google::protobuf::util::JsonStringToMessage(json, &message);
  EXPECT_TRUE(status.ok()) << status.message() << "\n" << json;
  return message;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The table line whose first column is `first` (the line split on runs of
// spaces), or empty.
std::vector<std::string> Row(const std::string& table,
                             const std::string& first) {
  for (const std::string& line : Lines(table)) {
    std::vector<std::string> cells =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!cells.empty() && cells[0] == first) return cells;
  }
  return {};
}

constexpr char kBlob[] = "\x01\x02\xff";

class RankctlTest : public ::testing::Test {
 protected:
  // One job for the suite: 2 daemons x 2 ranks, tensor parallel 2, every
  // rank joined and holding until the suite ends. Rank 0 sets two keys.
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.job_id = "ctljob";
    options.nnodes = 2;
    options.nproc_per_node = 2;
    options.tensor_parallel = 2;
    // The job must stay up for the whole suite, also on a loaded machine.
    options.heartbeat_timeout_ms = 5000;
    options.extra_flags = {"--admin_kv_read=true"};
    cluster_ = new LocalCluster(options);
    workers_ = new std::vector<ChildProcess>();
    setup_ = new absl::Status(StartJob());
  }

  static absl::Status StartJob() {
    if (auto s = cluster_->Start(); !s.ok()) return s;
    const std::string leave = cluster_->dir() + "/leave";
    for (uint32_t n = 0; n < 2; ++n) {
      for (uint32_t l = 0; l < 2; ++l) {
        std::vector<std::string> args = {
            absl::StrCat("--leave_when_file=", leave)};
        if (n == 0 && l == 0) {
          args.push_back(absl::StrCat("--kv_set=nccl/uid=abc123,blob=", kBlob));
        }
        auto worker = cluster_->StartWorker(n, l, args);
        if (!worker.ok()) return worker.status();
        workers_->push_back(*std::move(worker));
      }
    }
    absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (uint32_t r = 0; r < 4; ++r) {
      const std::string want = r == 0 ? "KV_SET key=blob" : "JOINED";
      while (!absl::StrContains((*workers_)[r].ReadLog(), want)) {
        if (!(*workers_)[r].running() || absl::Now() > deadline) {
          return absl::InternalError(absl::StrCat(
              "rank ", r, " did not join:\n", (*workers_)[r].ReadLog()));
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
    return absl::OkStatus();
  }

  static void TearDownTestSuite() {
    std::ofstream(cluster_->dir() + "/leave") << "bye\n";
    WaitAll(*workers_, absl::Seconds(10));
    delete workers_;
    delete cluster_;
    delete setup_;
  }

  void SetUp() override { ASSERT_TRUE(setup_->ok()) << *setup_; }

  static std::vector<std::string> At(uint32_t node,
                                     std::vector<std::string> args) {
    args.insert(args.begin(),
                {absl::StrCat("--target=", cluster_->tcp_address(node)),
                 TokenFlag(*cluster_), "--timeout_ms=5000"});
    return args;
  }

  static LocalCluster* cluster_;
  static std::vector<ChildProcess>* workers_;
  static absl::Status* setup_;
};

LocalCluster* RankctlTest::cluster_ = nullptr;
std::vector<ChildProcess>* RankctlTest::workers_ = nullptr;
absl::Status* RankctlTest::setup_ = nullptr;

TEST_F(RankctlTest, Topology) {
  Result table = Rankctl(At(0, {"topology"}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.err, "");
  EXPECT_THAT(table.out, HasSubstr("JOB          ctljob\n"));
  EXPECT_THAT(table.out, HasSubstr("WORLD_SIZE   4\n"));
  EXPECT_THAT(table.out, HasSubstr("NODES        2 x 2 ranks per node\n"));
  EXPECT_THAT(table.out,
              HasSubstr("PARALLELISM  tensor=2 pipeline=1 expert=1 data=2\n"));
  std::vector<std::string> node1 = Row(table.out, "1");
  ASSERT_GE(node1.size(), 3u) << table.out;
  EXPECT_EQ(node1[2], cluster_->tcp_address(1));
  // GROUP KIND SIZE MEMBERS: world first, then the two tensor groups.
  EXPECT_THAT(Row(table.out, "GROUP"),
              ::testing::ElementsAre("GROUP", "KIND", "SIZE", "MEMBERS"));
  int tensor_rows = 0;
  for (const std::string& line : Lines(table.out)) {
    std::vector<std::string> cells =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cells.size() == 4 && cells[1] == "WORLD") {
      EXPECT_EQ(cells[3], "0-3");
    }
    if (cells.size() == 4 && cells[1] == "TENSOR") {
      ++tensor_rows;
      EXPECT_EQ(cells[2], "2");
    }
  }
  EXPECT_EQ(tensor_rows, 2) << table.out;

  Result json = Rankctl(At(0, {"--json", "topology"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  v1::Topology topology = ParseJson<v1::Topology>(json.out);
  EXPECT_EQ(topology.job_id(), "ctljob");
  EXPECT_EQ(topology.world_size(), 4u);
  EXPECT_EQ(topology.topology().tensor(), 2u);
  EXPECT_EQ(topology.topology().data(), 2u);
  ASSERT_EQ(topology.nodes_size(), 2);
  EXPECT_EQ(topology.nodes(0).address(), cluster_->tcp_address(0));
  EXPECT_EQ(topology.nodes(1).address(), cluster_->tcp_address(1));
  EXPECT_EQ(topology.nodes(1).local_ranks(), 2u);
  int tensor_groups = 0;
  for (const auto& g : topology.groups()) {
    if (g.kind() == v1::GROUP_KIND_TENSOR) ++tensor_groups;
  }
  EXPECT_EQ(tensor_groups, 2);
}

TEST_F(RankctlTest, Members) {
  Result table = Rankctl(At(0, {"members"}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(Row(table.out, "RANK"),
              ::testing::ElementsAre("RANK", "NODE", "LOCAL", "STATE", "ROUND",
                                     "PID", "DEVICE", "DETAIL"));
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<std::string> row = Row(table.out, absl::StrCat(r));
    ASSERT_GE(row.size(), 7u) << table.out;
    EXPECT_EQ(row[1], absl::StrCat(r / 2)) << "node of rank " << r;
    EXPECT_EQ(row[2], absl::StrCat(r % 2)) << "local rank of rank " << r;
    EXPECT_EQ(row[3], "JOINED");
    EXPECT_EQ(row[5], absl::StrCat((*workers_)[r].pid()));
    EXPECT_EQ(row[6], "cpu");
  }
  EXPECT_THAT(Row(table.out, "NODE"),
              ::testing::ElementsAre("NODE", "STATE", "HOST", "ADDRESS",
                                     "HEARTBEAT_AGE", "DETAIL"));
  std::vector<std::string> tables = absl::StrSplit(table.out, "\n\n");
  ASSERT_EQ(tables.size(), 2u) << table.out;
  for (uint32_t n = 0; n < 2; ++n) {
    std::vector<std::string> row = Row(tables[1], absl::StrCat(n));
    ASSERT_GE(row.size(), 5u) << tables[1];
    EXPECT_EQ(row[1], "REGISTERED");
    EXPECT_EQ(row[3], cluster_->tcp_address(n));
  }

  Result json = Rankctl(At(0, {"members", "--json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  v1::MemberList members = ParseJson<v1::MemberList>(json.out);
  ASSERT_EQ(members.members_size(), 4);
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(members.members(r).rank(), r);
    EXPECT_EQ(members.members(r).state(), v1::MEMBER_STATE_JOINED);
    EXPECT_EQ(members.members(r).pid(),
              static_cast<uint32_t>((*workers_)[r].pid()));
    EXPECT_EQ(members.members(r).device().kind(), "cpu");
  }
  ASSERT_EQ(members.nodes_size(), 2);
  for (const auto& node : members.nodes()) {
    EXPECT_EQ(node.state(), v1::NODE_STATE_REGISTERED);
    EXPECT_GE(node.heartbeat_age_ms(), 0);
    EXPECT_LT(node.heartbeat_age_ms(), 5000);  // else the node was lost
  }
}

TEST_F(RankctlTest, Status) {
  Result table = Rankctl(At(0, {"status"}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("JOB          ctljob\n"));
  EXPECT_THAT(table.out, HasSubstr("STATE        READY\n"));
  EXPECT_THAT(table.out, HasSubstr("RANKS        4/4 joined\n"));
  EXPECT_THAT(table.out, HasSubstr("NODES        2/2 registered\n"));
  EXPECT_THAT(table.out, HasSubstr("SERVED_BY    node 0 (coordinator)\n"));
  EXPECT_THAT(table.out, HasSubstr(absl::StrCat(
                             "COORDINATOR  ", cluster_->tcp_address(0), "\n")));
  EXPECT_THAT(table.out, Not(HasSubstr("FAILURE")));

  // Through node 1's Unix socket: its own replica, same answer.
  Result local = Rankctl({absl::StrCat("--target=", cluster_->socket_target(1)),
                          "status", "--json"});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  v1::JobStatus job = ParseJson<v1::JobStatus>(local.out);
  EXPECT_EQ(job.job_id(), "ctljob");
  EXPECT_EQ(job.state(), v1::JOB_STATE_READY);
  EXPECT_EQ(job.world_size(), 4u);
  EXPECT_EQ(job.joined_ranks(), 4u);
  EXPECT_EQ(job.registered_nodes(), 2u);
  EXPECT_EQ(job.served_by_node(), 1u);
  EXPECT_FALSE(job.served_by_coordinator());
  EXPECT_EQ(job.coordinator_address(), cluster_->tcp_address(0));
  EXPECT_NE(job.job_incarnation(), 0u);
}

TEST_F(RankctlTest, Health) {
  Result table = Rankctl(At(1, {"health"}));
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out, "SERVING\n");
  Result readiness = Rankctl(At(0, {"health", "--service=readiness"}));
  EXPECT_EQ(readiness.exit_code, 0) << readiness.err;
  EXPECT_EQ(readiness.out, "SERVING\n");
  Result json = Rankctl(At(0, {"--json", "health", "--service", "readiness"}));
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out, "{\n  \"status\": \"SERVING\"\n}\n");
  Result unknown = Rankctl(At(0, {"health", "--service=no.such.Service"}));
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_EQ(unknown.out, "");
  EXPECT_THAT(unknown.err, HasSubstr("no.such.Service"));
  EXPECT_THAT(unknown.err, HasSubstr("[NOT_FOUND]"));
}

TEST_F(RankctlTest, KvGet) {
  Result text = Rankctl(At(0, {"kv", "get", "nccl/uid"}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, "abc123\n");
  Result binary = Rankctl(At(0, {"kv", "get", "blob"}));
  ASSERT_EQ(binary.exit_code, 0) << binary.err;
  EXPECT_EQ(binary.out, "0x0102ff\n");
  Result json = Rankctl(At(0, {"kv", "get", "blob", "--json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  v1::AdminKvGetResponse value = ParseJson<v1::AdminKvGetResponse>(json.out);
  EXPECT_EQ(value.value(), kBlob);
  EXPECT_THAT(json.out, HasSubstr(absl::Base64Escape(kBlob)));

  Result missing = Rankctl(At(0, {"kv", "get", "no/such/key"}));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.out, "");
  EXPECT_THAT(missing.err, HasSubstr(absl::StrCat("rankd KvGet via ",
                                                  cluster_->tcp_address(0))));
  EXPECT_THAT(missing.err, HasSubstr("key 'no/such/key' is not set"));
  EXPECT_THAT(missing.err, HasSubstr("[NOT_FOUND]"));
  // A non-coordinator points at the coordinator.
  Result elsewhere = Rankctl(At(1, {"kv", "get", "nccl/uid"}));
  EXPECT_EQ(elsewhere.exit_code, 1);
  EXPECT_THAT(elsewhere.err,
              HasSubstr(absl::StrCat("the key-value broker lives on the "
                                     "coordinator at ",
                                     cluster_->tcp_address(0))));
  EXPECT_THAT(elsewhere.err, HasSubstr("[FAILED_PRECONDITION]"));
}

TEST_F(RankctlTest, Watch) {
  absl::Time started = absl::Now();
  Result table = Rankctl({absl::StrCat("--target=", cluster_->tcp_address(1)),
                          TokenFlag(*cluster_), "watch", "--timeout_ms=700"});
  absl::Duration took = absl::Now() - started;
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_GE(took, absl::Milliseconds(600));
  EXPECT_LT(took, absl::Seconds(5));
  std::vector<std::string> lines = Lines(table.out);
  // 2 nodes registered, 4 ranks joined, the job ready. Ranks that join
  // within Coordinator::kJoinHold of each other share one MEMBER_JOINED
  // event (also across nodes), so there are 1 to 4 of those.
  ASSERT_GE(lines.size(), 4u) << table.out;
  ASSERT_LE(lines.size(), 7u) << table.out;
  int registered = 0, ready = 0;
  std::set<uint32_t> joined;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<std::string> cells = absl::StrSplit(lines[i], ' ');
    ASSERT_GE(cells.size(), 3u) << lines[i];
    EXPECT_EQ(cells[0], absl::StrCat("#", i + 1));
    absl::Time when;
    std::string error;
    EXPECT_TRUE(absl::ParseTime(kTimestampFormat, cells[1], &when, &error))
        << cells[1] << ": " << error;
    EXPECT_LT(absl::AbsDuration(absl::Now() - when), absl::Minutes(5));
    if (cells[2] == "MEMBER_JOINED") {
      // One node: "#4 <time> MEMBER_JOINED node 1 ranks 2-3 ranks 2-3
      // joined on node 1"; several: "#4 <time> MEMBER_JOINED ranks 3,1
      // ranks 1, 3 joined on nodes 0-1".
      ASSERT_GE(cells.size(), 5u) << lines[i];
      const bool one_node = cells[3] == "node";
      const size_t list = one_node ? 6 : 4;
      ASSERT_GT(cells.size(), list) << lines[i];
      EXPECT_THAT(lines[i],
                  HasSubstr(one_node ? absl::StrCat("joined on node ", cells[4])
                                     : "joined on nodes "));
      for (absl::string_view part : absl::StrSplit(cells[list], ',')) {
        std::pair<std::string, std::string> range =
            absl::StrSplit(part, absl::MaxSplits('-', 1));
        uint32_t first = 0, last = 0;
        ASSERT_TRUE(absl::SimpleAtoi(range.first, &first)) << lines[i];
        last = first;
        if (!range.second.empty()) {
          ASSERT_TRUE(absl::SimpleAtoi(range.second, &last)) << lines[i];
        }
        for (uint32_t r = first; r <= last; ++r) joined.insert(r);
      }
    }
    if (cells[2] == "NODE_REGISTERED") ++registered;
    if (cells[2] == "JOB_READY") ++ready;
  }
  EXPECT_EQ(joined, (std::set<uint32_t>{0, 1, 2, 3})) << table.out;
  EXPECT_EQ(registered, 2);
  EXPECT_EQ(ready, 1);
  EXPECT_THAT(lines.back(), HasSubstr("JOB_READY"));
  // A rank's pid is in its event: in the message when it joined alone, in
  // the event's members (--json) either way.
  Result json = Rankctl({absl::StrCat("--target=", cluster_->tcp_address(0)),
                         TokenFlag(*cluster_), "watch", "--json", "--after=2",
                         "--timeout_ms=500"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  std::vector<std::string> events = Lines(json.out);
  ASSERT_EQ(events.size(), lines.size() - 2) << json.out;
  std::map<uint32_t, uint32_t> pid_of;
  for (size_t i = 0; i < events.size(); ++i) {
    v1::JobEvent event = ParseJson<v1::JobEvent>(events[i]);
    EXPECT_EQ(event.sequence(), i + 3);
    if (i + 1 < events.size()) {
      EXPECT_EQ(event.kind(), v1::EVENT_KIND_MEMBER_JOINED);
      ASSERT_EQ(event.members_size(), event.ranks_size());
      for (int j = 0; j < event.ranks_size(); ++j) {
        pid_of[event.ranks(j)] = event.members(j).pid();
      }
    } else {
      EXPECT_EQ(event.kind(), v1::EVENT_KIND_JOB_READY);
    }
    EXPECT_GT(event.time_unix_ms(), 0);
  }
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(pid_of[r], static_cast<uint32_t>((*workers_)[r].pid()))
        << "rank " << r;
  }
}

TEST_F(RankctlTest, ErrorExitStatuses) {
  // Nothing listens there: exit 1, naming the target.
  const std::string dead = absl::StrCat("127.0.0.1:", FreePort());
  Result unreachable =
      Rankctl({"--target=" + dead, "--timeout_ms=300", "status"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_EQ(unreachable.out, "");
  EXPECT_THAT(unreachable.err, HasSubstr(dead));
  EXPECT_THAT(unreachable.err, HasSubstr("[UNAVAILABLE]"));
  const std::string no_socket = cluster_->dir() + "/missing.sock";
  Result missing_socket =
      Rankctl({"--target=unix://" + no_socket, "--timeout_ms=300", "members"});
  EXPECT_EQ(missing_socket.exit_code, 1);
  EXPECT_THAT(missing_socket.err, HasSubstr(no_socket));
  EXPECT_THAT(missing_socket.err, HasSubstr("[UNAVAILABLE]"));

  // Usage errors: exit 2 with a message, nothing on stdout.
  struct Usage {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Usage> usage = {
      {{}, "missing command"},
      {{"--target=" + cluster_->tcp_address(0), "frobnicate"},
       "unknown command \"frobnicate\""},
      {{"--target=" + cluster_->tcp_address(0), "kv", "get"},
       "kv get needs a KEY"},
      {{"--target=" + cluster_->tcp_address(0), "--after=3", "status"},
       "--after applies to the watch command only"},
      {{"--target=" + cluster_->tcp_address(0), "--bogus", "status"},
       "unknown flag --bogus"},
      {{"--target=no-port", "status"}, "no-port"},
      {{"--target=" + cluster_->tcp_address(0), "--timeout_ms=soon", "status"},
       "--timeout_ms must be a non-negative integer, got \"soon\""},
      // A token file is a regular file of one short line: a device is
      // refused before it is read (it was read without end).
      {{"--target=" + cluster_->tcp_address(0), "--token_file=/dev/zero",
        "status"},
       "--token_file: /dev/zero is not a credential file"},
      {{"--target=" + cluster_->tcp_address(0),
        "--token_file=" + cluster_->dir() + "/no-such-token", "status"},
       "--token_file: " + cluster_->dir() + "/no-such-token does not exist"},
  };
  for (const Usage& u : usage) {
    SCOPED_TRACE(absl::StrJoin(u.args, " "));
    Result r = Rankctl(u.args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_THAT(r.err, HasSubstr(u.message));
  }
  Result help = Rankctl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: rankctl"));
}

// `rankctl credentials` issues what a daemon loads: the folder it creates
// (never overwritten) and node tokens the coordinator accepts.
TEST(RankctlCredentialsTest, CreateAndNodeTokenMakeWhatDaemonsVerify) {
  const std::string parent = MakeTempDir("rankctl-creds");
  const std::string dir = parent + "/job";
  Result created = Rankctl({"credentials", "create", dir});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_THAT(created.out, HasSubstr(dir));
  auto key = ReadCredentialFile(dir, kNodeKeyFile);
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_TRUE(ReadCredentialFile(dir, kOperatorTokenFile).ok());
  // Ranks get tokens of their own (rank-token below), not a shared file.
  EXPECT_FALSE(ReadCredentialFile(dir, kRankTokenFile).ok());
  Result again = Rankctl({"credentials", "create", dir});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr("already exists"));
  EXPECT_EQ(*ReadCredentialFile(dir, kNodeKeyFile), *key);

  Result token = Rankctl({"credentials", "node-token", dir, "llama", "2"});
  ASSERT_EQ(token.exit_code, 0) << token.err;
  auto node =
      VerifyNodeToken(*key, "llama", absl::StripAsciiWhitespace(token.out));
  ASSERT_TRUE(node.ok()) << node.status() << " " << token.out;
  EXPECT_EQ(*node, 2u);
  // A rank's token, minted from the node key or from that node's token.
  Result rank_token =
      Rankctl({"credentials", "rank-token", dir, "llama", "2", "5"});
  ASSERT_EQ(rank_token.exit_code, 0) << rank_token.err;
  auto rank = VerifyRankToken(absl::StripAsciiWhitespace(token.out), "llama",
                              absl::StripAsciiWhitespace(rank_token.out));
  ASSERT_TRUE(rank.ok()) << rank.status() << " " << rank_token.out;
  EXPECT_EQ(*rank, 5u);
  const std::string node_dir = parent + "/node2";
  ASSERT_EQ(::mkdir(node_dir.c_str(), 0700), 0);
  std::ofstream(node_dir + "/node.token") << token.out;
  Result from_node =
      Rankctl({"credentials", "rank-token", node_dir, "llama", "2", "5"});
  ASSERT_EQ(from_node.exit_code, 0) << from_node.err;
  EXPECT_EQ(from_node.out, rank_token.out);
  Result other_node =
      Rankctl({"credentials", "rank-token", node_dir, "llama", "3", "5"});
  EXPECT_EQ(other_node.exit_code, 1);
  EXPECT_THAT(other_node.err, HasSubstr("is not node 3's token"));
  Result missing =
      Rankctl({"credentials", "node-token", dir + "/nope", "llama", "2"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("does not exist"));
  std::error_code ec;
  std::filesystem::remove_all(parent, ec);
}

// Ranks leaving show up in status and watch; a separate job, since the
// suite's job stays up until the end.
TEST(RankctlLifecycleTest, CompletedJobAndItsEvents) {
  ClusterOptions options;
  options.job_id = "ctldone";
  options.nnodes = 1;
  options.nproc_per_node = 2;
  LocalCluster cluster(options);
  absl::Status started = cluster.Start();
  ASSERT_TRUE(started.ok()) << started;
  auto workers = cluster.StartAllWorkers({"--rounds=2"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (int s : WaitAll(*workers, absl::Seconds(30))) {
    EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << s;
  }
  const std::string target = "--target=" + cluster.tcp_address(0);
  const std::string token = TokenFlag(cluster);
  Result status = Rankctl({target, token, "status"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("STATE        COMPLETED\n"));
  EXPECT_THAT(status.out, HasSubstr("ROUNDS       2 completed\n"));
  Result members = Rankctl({target, token, "members", "--json"});
  ASSERT_EQ(members.exit_code, 0) << members.err;
  v1::MemberList list = ParseJson<v1::MemberList>(members.out);
  ASSERT_EQ(list.members_size(), 2);
  for (const auto& m : list.members())
    EXPECT_EQ(m.state(), v1::MEMBER_STATE_LEFT);
  Result watch = Rankctl({target, token, "watch", "--timeout_ms=400"});
  ASSERT_EQ(watch.exit_code, 0) << watch.err;
  std::vector<std::string> lines = Lines(watch.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.back(), HasSubstr("JOB_COMPLETED every rank left cleanly"));
  int left = 0;
  for (const auto& line : lines)
    left += absl::StrContains(line, " MEMBER_LEFT ");
  EXPECT_EQ(left, 2) << watch.out;
  // Health stays SERVING for liveness after the job completed.
  Result health = Rankctl({target, "health"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\n");
}

}  // namespace
}  // namespace rankd::testing
