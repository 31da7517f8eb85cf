// Unit tests of rankd::AdminClient and the health codec, against the
// in-process fake daemon of fake_services.h.

#include "client/admin_client.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "client/fake_services.h"
#include "client/health_codec.h"
#include "gmock/gmock.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

using testing::FakeDaemon;
using ::testing::HasSubstr;

class AdminClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = FakeDaemon::Start();
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    ClientOptions options;
    options.target = daemon_->target();
    options.connect_timeout = absl::Seconds(5);
    options.call_timeout = absl::Seconds(5);
    auto admin = AdminClient::Connect(options);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *std::move(admin);
  }

  std::unique_ptr<FakeDaemon> daemon_;
  std::unique_ptr<AdminClient> admin_;
};

TEST_F(AdminClientTest, ReadsJobTopologyMembersAndKeys) {
  v1::JobStatus job;
  job.set_job_id("job-a");
  job.set_state(v1::JOB_STATE_READY);
  job.set_world_size(8);
  daemon_->admin().SetJob(job);
  v1::Topology topology;
  topology.set_world_size(8);
  topology.add_nodes()->set_hostname("host-0");
  daemon_->admin().SetTopology(topology);
  v1::MemberList members;
  members.add_members()->set_rank(3);
  daemon_->admin().SetMembers(members);
  daemon_->admin().SetKv("nccl/1", std::string("\0\1", 2));

  auto got_job = admin_->GetJob();
  ASSERT_TRUE(got_job.ok()) << got_job.status();
  EXPECT_EQ(got_job->job_id(), "job-a");
  EXPECT_EQ(got_job->state(), v1::JOB_STATE_READY);
  auto got_topology = admin_->GetTopology();
  ASSERT_TRUE(got_topology.ok());
  EXPECT_EQ(got_topology->nodes(0).hostname(), "host-0");
  auto got_members = admin_->ListMembers();
  ASSERT_TRUE(got_members.ok());
  EXPECT_EQ(got_members->members(0).rank(), 3u);
  auto value = admin_->KvGet("nccl/1");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, std::string("\0\1", 2));

  auto missing = admin_->KvGet("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("rankd KvGet via " + daemon_->target()));
  EXPECT_EQ(admin_->KvGet("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AdminClientTest, HealthCheck) {
  auto overall = admin_->Health();
  ASSERT_TRUE(overall.ok()) << overall.status();
  EXPECT_EQ(*overall, "SERVING");
  grpc::HealthCheckServiceInterface* health =
      daemon_->server().GetHealthCheckService();
  ASSERT_NE(health, nullptr);
  health->SetServingStatus("rankd.v1.Rank", false);
  auto rank = admin_->Health("rankd.v1.Rank");
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, "NOT_SERVING");
  auto unknown = admin_->Health("no.such.Service");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("no.such.Service"));
}

TEST_F(AdminClientTest, WatchEventsReplaysAfterSequenceAndStopsOnRequest) {
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    v1::JobEvent e;
    e.set_sequence(seq);
    e.set_kind(v1::EVENT_KIND_MEMBER_JOINED);
    daemon_->admin().PushEvent(e);
  }
  std::vector<uint64_t> seen;
  absl::Status status = admin_->WatchEvents(
      2,
      [&](const v1::JobEvent& e) {
        seen.push_back(e.sequence());
        return e.sequence() < 4;
      },
      absl::Seconds(10));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen, (std::vector<uint64_t>{3, 4}));
}

TEST_F(AdminClientTest, WatchEventsEndsOkWhenTheTimeoutPasses) {
  absl::Time start = absl::Now();
  int events = 0;
  absl::Status status = admin_->WatchEvents(
      0, [&](const v1::JobEvent&) { return ++events < 100; },
      absl::Milliseconds(200));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(events, 0);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));
  EXPECT_EQ(
      admin_
          ->WatchEvents(
              0, [](const v1::JobEvent&) { return true; }, absl::ZeroDuration())
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(AdminClientConnectTest, FailsNamingTheTarget) {
  ClientOptions options;
  options.target = "unix:///tmp/rankd_admin_no_daemon.sock";
  options.connect_timeout = absl::Milliseconds(200);
  auto admin = AdminClient::Connect(options);
  ASSERT_FALSE(admin.ok());
  EXPECT_EQ(admin.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(admin.status().message(), HasSubstr(options.target));
}

TEST(HealthCodecTest, EncodesTheServiceField) {
  EXPECT_EQ(EncodeHealthCheckRequest(""), "");
  EXPECT_EQ(EncodeHealthCheckRequest("ab"), std::string("\x0a\x02"
                                                        "ab",
                                                        4));
  std::string long_name(200, 's');
  std::string encoded = EncodeHealthCheckRequest(long_name);
  EXPECT_EQ(encoded.substr(0, 3), std::string("\x0a\xc8\x01", 3));
  EXPECT_EQ(encoded.size(), 203u);
}

TEST(HealthCodecTest, DecodesStatusAndSkipsUnknownFields) {
  EXPECT_EQ(*DecodeHealthCheckResponse(""), "UNKNOWN");
  EXPECT_EQ(*DecodeHealthCheckResponse(std::string("\x08\x01", 2)), "SERVING");
  EXPECT_EQ(*DecodeHealthCheckResponse(std::string("\x08\x02", 2)),
            "NOT_SERVING");
  EXPECT_EQ(*DecodeHealthCheckResponse(std::string("\x08\x03", 2)),
            "SERVICE_UNKNOWN");
  EXPECT_EQ(*DecodeHealthCheckResponse(std::string("\x08\x07", 2)), "STATUS_7");
  // Field 2 (string "xy") before the status.
  EXPECT_EQ(*DecodeHealthCheckResponse(std::string("\x12\x02xy\x08\x01", 6)),
            "SERVING");
  EXPECT_EQ(DecodeHealthCheckResponse(std::string("\x08", 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DecodeHealthCheckResponse(std::string("\x12\x05x", 3)).ok());
}

}  // namespace
}  // namespace rankd
