// The Prometheus endpoint of real rankd daemons (--metrics_listen), scraped
// over HTTP while a job forms, runs rounds and key-value traffic, and fails.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"

namespace rankd::testing {
namespace {

// GET http://127.0.0.1:port/metrics; the response body ("" on error).
std::string Scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[8192];
      ssize_t n;
      while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) {
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// The value of the sample `series` (name plus labels exactly as rankd
// prints them), or nullopt.
std::optional<double> Sample(const std::string& text,
                             const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      double value;
      if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) {
        return value;
      }
    }
  }
  return std::nullopt;
}

// Scrapes until `series` has a value satisfying `ok`, or 20 s pass.
template <typename Ok>
std::string ScrapeUntil(int port, const std::string& series, Ok ok) {
  std::string text;
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    text = Scrape(port);
    std::optional<double> v = Sample(text, series);
    if (v.has_value() && ok(*v)) return text;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ADD_FAILURE() << "port " << port << ": " << series
                << " never reached the expected value\n"
                << text;
  return text;
}
TEST(MetricsEndpointTest, ReportsAJobFromFormingToFailure) {
  ClusterOptions options;
  options.job_id = "metrics";
  options.nnodes = 2;
  options.nproc_per_node = 2;
  const std::vector<int> ports = {FreePort(), FreePort()};
  for (int port : ports) {
    options.node_flags.push_back(
        {absl::StrCat("--metrics_listen=127.0.0.1:", port)});
  }
  LocalCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());

  // Registered, no rank yet: ready, FORMING.
  for (int port : ports) {
    std::string text = Scrape(port);
    EXPECT_EQ(Sample(text, "rankd_ready"), 1.0) << text;
    EXPECT_EQ(Sample(text, "rankd_job_state{state=\"FORMING\"}"), 1.0) << text;
    EXPECT_EQ(Sample(text, "rankd_job_world_size"), 4.0) << text;
    EXPECT_EQ(Sample(text, "rankd_members{state=\"NOT_JOINED\"}"), 4.0) << text;
  }
  EXPECT_TRUE(absl::StrContains(
      Scrape(ports[1]),
      "rankd_info{job_id=\"metrics\",node=\"1\",coordinator=\"false\""));

  auto workers = cluster.StartAllWorkers(
      {"--rounds=25", "--kv_keys=3", "--hold_ms=30000"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (auto& w : *workers) {
    ASSERT_TRUE(WaitForLog(w, "ROUNDS_OK", absl::Seconds(30))) << w.ReadLog();
  }

  // READY; each daemon counted its own two ranks' rounds and key-value
  // operations; heartbeats flow from node 1 to the coordinator.
  for (int port : ports) {
    std::string text = ScrapeUntil(port, "rankd_members{state=\"JOINED\"}",
                                   [](double v) { return v == 4; });
    EXPECT_EQ(Sample(text, "rankd_job_state{state=\"READY\"}"), 1.0) << text;
    EXPECT_GE(Sample(text, "rankd_rounds_total{code=\"OK\"}").value_or(0),
              2 * 25)
        << text;
    EXPECT_GE(Sample(text, "rankd_round_duration_seconds_count").value_or(0),
              2 * 25)
        << text;
    EXPECT_GE(Sample(text, "rankd_kv_operations_total{code=\"OK\",op=\"set\"}")
                  .value_or(0),
              2 * 3)
        << text;
    EXPECT_GE(Sample(text, "rankd_job_rounds_completed").value_or(0), 25)
        << text;
  }
  ScrapeUntil(ports[1], "rankd_heartbeats_sent_total{code=\"OK\"}",
              [](double v) { return v >= 2; });
  ScrapeUntil(ports[0], "rankd_heartbeats_received_total{code=\"OK\"}",
              [](double v) { return v >= 2; });
  std::string coordinator = Scrape(ports[0]);
  EXPECT_TRUE(
      Sample(coordinator, "rankd_node_heartbeat_age_seconds{node=\"1\"}")
          .has_value())
      << coordinator;

  // A rank dies: both daemons report the failure and the lost rank.
  (*workers)[3].Signal(SIGKILL);
  for (int port : ports) {
    std::string text = ScrapeUntil(port, "rankd_job_state{state=\"FAILED\"}",
                                   [](double v) { return v == 1; });
    EXPECT_EQ(Sample(text, "rankd_ready"), 0.0) << text;
    EXPECT_EQ(Sample(text, "rankd_ranks_lost_total"), 1.0) << text;
    EXPECT_EQ(Sample(text, "rankd_job_events_total{kind=\"MEMBER_LOST\"}"), 1.0)
        << text;
    EXPECT_EQ(Sample(text, "rankd_members{state=\"LOST\"}"), 1.0) << text;
  }
  WaitAll(*workers, absl::Seconds(20));

  // A daemon stops promptly with its endpoint up, and the endpoint goes.
  absl::Time stopping = absl::Now();
  cluster.daemon(1).Stop(absl::Seconds(10));
  EXPECT_LT(absl::Now() - stopping, absl::Seconds(3));
  EXPECT_EQ(Scrape(ports[1]), "");
}

}  // namespace
}  // namespace rankd::testing
