// Runs the rankctl binary against the in-process fake daemon of
// fake_services.h and checks its output and exit statuses.

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/fake_services.h"
#include "gmock/gmock.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using testing::FakeDaemon;
using ::testing::HasSubstr;

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

// Runs client/rankctl (a data dependency) with `args` through the shell.
Result Rankctl(const std::string& args) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string out = dir + "/rankctl.out", err = dir + "/rankctl.err";
  const std::string command =
      absl::StrCat("client/rankctl ", args, " >", out, " 2>", err);
  int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

class RankctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = FakeDaemon::Start(FakeDaemon::Transport::kTcp);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    v1::JobStatus job;
    job.set_job_id("llama");
    job.set_state(v1::JOB_STATE_READY);
    job.set_world_size(2);
    job.set_joined_ranks(2);
    daemon_->admin().SetJob(job);
    v1::MemberList members;
    members.add_members()->set_rank(0);
    members.add_members()->set_rank(1);
    daemon_->admin().SetMembers(members);
    daemon_->admin().SetKv("addr", "10.0.0.1:29500");
    flags_ = absl::StrCat("--target=", daemon_->target(), " --timeout_ms=3000");
  }

  std::unique_ptr<FakeDaemon> daemon_;
  std::string flags_;
};

TEST_F(RankctlTest, StatusTable) {
  Result r = Rankctl(flags_ + " status");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("JOB          llama\n"));
  EXPECT_THAT(r.out, HasSubstr("STATE        READY\n"));
  EXPECT_THAT(r.out, HasSubstr("RANKS        2/2 joined\n"));
}

TEST_F(RankctlTest, MembersJson) {
  Result r = Rankctl(flags_ + " --json members");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"members\": ["));
  EXPECT_THAT(r.out, HasSubstr("\"rank\": 1"));
  EXPECT_THAT(r.out, HasSubstr("\"state\": \"MEMBER_STATE_UNSPECIFIED\""));
}

TEST_F(RankctlTest, KvGet) {
  Result r = Rankctl(flags_ + " kv get addr");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "10.0.0.1:29500\n");
  Result missing = Rankctl(flags_ + " kv get nope");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("rankd KvGet via " + daemon_->target()));
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND"));
}

TEST_F(RankctlTest, Health) {
  Result r = Rankctl(flags_ + " health");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "SERVING\n");
  daemon_->server().GetHealthCheckService()->SetServingStatus("rankd.v1.Rank",
                                                              false);
  Result down = Rankctl(flags_ + " health --service=rankd.v1.Rank");
  EXPECT_EQ(down.exit_code, 3);
  EXPECT_EQ(down.out, "NOT_SERVING\n");
}

TEST_F(RankctlTest, WatchPrintsEventsUntilTheTimeout) {
  v1::JobEvent e;
  e.set_sequence(1);
  e.set_kind(v1::EVENT_KIND_MEMBER_JOINED);
  e.add_ranks(0);
  daemon_->admin().PushEvent(e);
  e.set_sequence(2);
  e.set_kind(v1::EVENT_KIND_JOB_READY);
  e.clear_ranks();
  daemon_->admin().PushEvent(e);
  Result r = Rankctl(
      absl::StrCat("--target=", daemon_->target(), " watch --timeout_ms=500"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("#1 1970-01-01T00:00:00.000Z MEMBER_JOINED "
                        "rank 0\n#2 1970-01-01T00:00:00.000Z JOB_READY\n"));
  Result json =
      Rankctl(absl::StrCat("--target=", daemon_->target(),
                           " watch --json --after=1 --timeout_ms=300"));
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"kind\":\"EVENT_KIND_JOB_READY\""));
  EXPECT_THAT(json.out, ::testing::Not(HasSubstr("MEMBER_JOINED")));
}

TEST(RankctlErrorsTest, ExitStatuses) {
  EXPECT_EQ(Rankctl("").exit_code, 2);
  EXPECT_EQ(Rankctl("--bogus status").exit_code, 2);
  EXPECT_EQ(Rankctl("--target=no-port status").exit_code, 2);
  Result help = Rankctl("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: rankctl"));
  Result down = Rankctl("--target=127.0.0.1:1 --timeout_ms=200 status");
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_THAT(down.err, HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(down.err, HasSubstr("UNAVAILABLE"));
}

}  // namespace
}  // namespace rankd
