#include "daemon/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

// GET http://127.0.0.1:port/path; returns the whole response ("" on error).
std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = absl::StrCat(
        "GET ", path,
        " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if (::write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      ssize_t n;
      while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) {
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return response;
}

JobSnapshot TwoNodeJob() {
  JobSnapshot s;
  s.ready = true;
  s.job.set_job_id("llama");
  s.job.set_state(v1::JOB_STATE_READY);
  s.job.set_epoch(1);
  s.job.set_world_size(4);
  s.job.set_nnodes(2);
  s.job.set_joined_ranks(3);
  s.job.set_registered_nodes(2);
  s.job.set_completed_rounds(17);
  s.job.set_job_incarnation(99);
  for (uint32_t r = 0; r < 4; ++r) {
    v1::MemberStatus* m = s.members.add_members();
    m->set_rank(r);
    m->set_state(r == 3 ? v1::MEMBER_STATE_NOT_JOINED
                        : v1::MEMBER_STATE_JOINED);
  }
  for (uint32_t n = 0; n < 2; ++n) {
    v1::NodeStatus* node = s.members.add_nodes();
    node->set_node_index(n);
    node->set_state(v1::NODE_STATE_REGISTERED);
    node->set_heartbeat_age_ms(n == 0 ? -1 : 1500);
  }
  return s;
}

DaemonMetrics::Identity Node0() { return {"llama", 0, true}; }

TEST(DaemonMetricsTest, ReportsTheJobAsTheSnapshotSeesIt) {
  DaemonMetrics metrics(Node0(), [] { return TwoNodeJob(); });
  const std::string text = metrics.Render();
  for (const char* line : {
           "rankd_ready 1",
           "rankd_job_state{state=\"READY\"} 1",
           "rankd_job_state{state=\"FAILED\"} 0",
           "rankd_job_state{state=\"FORMING\"} 0",
           "rankd_job_epoch 1",
           "rankd_job_state{state=\"RECOVERING\"} 0",
           "rankd_job_world_size 4",
           "rankd_job_nodes 2",
           "rankd_job_ranks_joined 3",
           "rankd_job_rounds_completed 17",
           "rankd_members{state=\"JOINED\"} 3",
           "rankd_members{state=\"NOT_JOINED\"} 1",
           "rankd_members{state=\"LOST\"} 0",
           "rankd_nodes{state=\"REGISTERED\"} 2",
           "rankd_node_heartbeat_age_seconds{node=\"1\"} 1.5",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\n" << text;
  }
  EXPECT_TRUE(absl::StrContains(
      text,
      "rankd_info{job_id=\"llama\",node=\"0\",coordinator=\"true\","
      "job_incarnation=\"99\"} 1"))
      << text;
  // Node 0's heartbeat age is unknown (-1): no series for it.
  EXPECT_FALSE(absl::StrContains(text, "heartbeat_age_seconds{node=\"0\"}"));
}

TEST(DaemonMetricsTest, CountsRoundsKeyValueOperationsAndHeartbeats) {
  DaemonMetrics metrics(Node0(), [] { return TwoNodeJob(); });
  metrics.ObserveRpc("/rankd.v1.Rank/AllGatherWords", absl::StatusCode::kOk,
                     absl::Milliseconds(3));
  metrics.ObserveRpc("/rankd.v1.Rank/AllGatherWords", absl::StatusCode::kOk,
                     absl::Milliseconds(7));
  metrics.ObserveRpc("/rankd.v1.Rank/AllGatherWords",
                     absl::StatusCode::kDeadlineExceeded, absl::Seconds(1));
  metrics.ObserveRpc("/rankd.v1.Rank/KvGet", absl::StatusCode::kNotFound,
                     absl::Milliseconds(1));
  metrics.ObserveRpc("/rankd.v1.Rank/KvSet", absl::StatusCode::kOk,
                     absl::Milliseconds(1));
  metrics.ObserveRpc("/rankd.v1.Peer/Heartbeat", absl::StatusCode::kOk,
                     absl::Milliseconds(1));
  metrics.ObserveRpc("/rankd.v1.Admin/GetJob", absl::StatusCode::kOk,
                     absl::Milliseconds(1));
  // Paths a caller makes up share one label.
  for (int i = 0; i < 50; ++i) {
    metrics.ObserveRpc(absl::StrCat("/rankd.v1.Rank/Made-up-", i),
                       absl::StatusCode::kUnimplemented, absl::Milliseconds(1));
  }
  metrics.ObserveHeartbeatSent(absl::StatusCode::kOk);
  metrics.ObserveHeartbeatSent(absl::StatusCode::kUnavailable);
  const std::string text = metrics.Render();
  for (const char* line : {
           "rankd_rounds_total{code=\"OK\"} 2",
           "rankd_rounds_total{code=\"DEADLINE_EXCEEDED\"} 1",
           "rankd_round_duration_seconds_count 2",
           "rankd_round_duration_seconds_sum 0.01",
           "rankd_round_duration_seconds_bucket{le=\"0.005\"} 1",
           "rankd_round_duration_seconds_bucket{le=\"0.01\"} 2",
           "rankd_kv_operations_total{code=\"NOT_FOUND\",op=\"get\"} 1",
           "rankd_kv_operations_total{code=\"OK\",op=\"set\"} 1",
           "rankd_kv_operations_total{code=\"OK\",op=\"delete\"} 0",
           "rankd_kv_operation_duration_seconds_count{op=\"set\"} 1",
           "rankd_rank_requests_total{code=\"OK\",method=\"KvSet\"} 1",
           "rankd_heartbeats_received_total{code=\"OK\"} 1",
           "rankd_heartbeats_sent_total{code=\"OK\"} 1",
           "rankd_heartbeats_sent_total{code=\"UNAVAILABLE\"} 1",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "GetJob")) << text;
  EXPECT_TRUE(absl::StrContains(text,
                                "rankd_rank_requests_total{code="
                                "\"UNIMPLEMENTED\",method=\"unknown\"} 50"))
      << text;
  EXPECT_FALSE(absl::StrContains(text, "Made-up")) << text;
}

TEST(DaemonMetricsTest, CountsLostRanksAndNodesFromEvents) {
  DaemonMetrics metrics(Node0(), [] { return TwoNodeJob(); });
  v1::JobEvent rank_lost;
  rank_lost.set_kind(v1::EVENT_KIND_MEMBER_LOST);
  rank_lost.add_ranks(5);
  v1::JobEvent node_lost;
  node_lost.set_kind(v1::EVENT_KIND_NODE_LOST);
  node_lost.add_ranks(2);
  node_lost.add_ranks(3);
  v1::JobEvent failed;
  failed.set_kind(v1::EVENT_KIND_JOB_FAILED);
  metrics.ObserveEvent(rank_lost);
  metrics.ObserveEvent(node_lost);
  metrics.ObserveEvent(failed);
  const std::string text = metrics.Render();
  for (const char* line : {
           "rankd_ranks_lost_total 3",
           "rankd_nodes_lost_total 1",
           "rankd_job_events_total{kind=\"MEMBER_LOST\"} 1",
           "rankd_job_events_total{kind=\"NODE_LOST\"} 1",
           "rankd_job_events_total{kind=\"JOB_FAILED\"} 1",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\n" << text;
  }
}

TEST(DaemonMetricsTest, ServesTheSameTextOverHttp) {
  DaemonMetrics metrics(Node0(), [] { return TwoNodeJob(); });
  ASSERT_TRUE(metrics.Serve("127.0.0.1:0").ok());
  ASSERT_GT(metrics.port(), 0);
  metrics.ObserveHeartbeatSent(absl::StatusCode::kOk);
  const std::string response = HttpGet(metrics.port(), "/metrics");
  EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 200")) << response;
  EXPECT_TRUE(absl::StrContains(response, "rankd_job_world_size 4"))
      << response;
  EXPECT_TRUE(
      absl::StrContains(response, "rankd_heartbeats_sent_total{code=\"OK\"} 1"))
      << response;
  EXPECT_TRUE(absl::StrContains(response, "# TYPE rankd_job_state gauge"))
      << response;
}

TEST(DaemonMetricsTest, AnAddressInUseIsAClearError) {
  DaemonMetrics first(Node0(), [] { return TwoNodeJob(); });
  ASSERT_TRUE(first.Serve("127.0.0.1:0").ok());
  DaemonMetrics second(Node0(), [] { return TwoNodeJob(); });
  const std::string address = absl::StrCat("127.0.0.1:", first.port());
  absl::Status status = second.Serve(address);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(status.message(),
                                absl::StrCat("--metrics_listen=", address)))
      << status;
}

}  // namespace
}  // namespace rankd
