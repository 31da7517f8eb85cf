// Fault drills of issue 36, part B: floods from anyone who can reach a
// daemon's TCP port or its metrics port, without any credential, against a
// real job of two rankd daemons whose four honest ranks (rankd::Client on
// the Unix sockets) keep running rounds through the flood:
//   7. 100,000 calls that never send their message, on 100 connections,
//      held past the unauthenticated time limit, then all closed at once;
//   8. 400 connections x 50 requests declaring 64 MiB messages, each sent
//      only in part (64 KiB), 1.25 GiB in all;
//  12. idle and half-sent connections to /metrics while it is scraped;
// and, from the review of issue 36: /metrics answers never read, the
// daemon out of file descriptors, and silent connections from 64 source
// addresses filling the coordinator's listener before node 1 joins.
// Each asserts that the honest ranks keep serving (every round through the
// flood and after it completes, the job stays READY with no rank or node
// lost), that the flood is refused or bounded, and that the daemon's memory
// stays bounded and returns near its baseline. The figures (VmRSS and
// threads of the flooded daemon, before, at the peak, after) are printed as
// "FLOOD ..." lines for the closing notes. Floods go to 127.0.0.1 only and
// are bounded in count and time (a drill takes 20-40 s).
// With RANKD_DRILL_RANKD=PATH the daemons run that rankd binary instead of
// this build's (the version before issue 36 part B fails every drill).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/admin_client.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/harness/cluster.h"
#include "tests/harness/raw_h2.h"
#include "tests/harness/sanitizers.h"

namespace rankd::testing {
namespace {

constexpr char kJob[] = "flood";
constexpr uint32_t kWorld = 4;  // nodes 0 and 1, ranks 0-1 and 2-3

// VmRSS (bytes) and Threads of `pid`, from /proc/PID/status.
struct ProcFigures {
  int64_t rss = 0;
  int threads = 0;
};

ProcFigures Figures(pid_t pid) {
  ProcFigures f;
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipWhitespace());
    if (parts.size() < 2) continue;
    int64_t v = 0;
    if (!absl::SimpleAtoi(parts[1], &v)) continue;
    if (parts[0] == "VmRSS:") f.rss = v * 1024;
    if (parts[0] == "Threads:") f.threads = static_cast<int>(v);
  }
  return f;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// AddressSanitizer (--config=asan, the suite's own run) pads every
// allocation and gives freed memory back to the system in whole regions
// only: what a flood costs and keeps is larger (item 7 measured 224 MiB at
// the peak and 96-122 MiB kept above the baseline with it, 152 and 9 MiB
// without). The bounds below allow for it; the uninstrumented build keeps
// the tight ones.
constexpr int64_t kSanitizerFactor = kAddressSanitizer ? 2 : 1;
// ASan's quarantine keeps up to 256 MiB of freed memory resident by
// default, so what stays after a flood varies with it (106-199 MiB over
// four runs of item7): the bound is the quarantine and a margin.
constexpr int64_t kKeptSlack =
    kAddressSanitizer ? int64_t{288} << 20 : int64_t{32} << 20;

// Samples a process's figures every 50 ms until stopped; keeps the peak.
class Sampler {
 public:
  explicit Sampler(pid_t pid) : pid_(pid) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        ProcFigures f = Figures(pid_);
        {
          absl::MutexLock lock(&mu_);
          peak_.rss = std::max(peak_.rss, f.rss);
          peak_.threads = std::max(peak_.threads, f.threads);
        }
        absl::SleepFor(absl::Milliseconds(50));
      }
    });
  }
  ~Sampler() { Stop(); }
  ProcFigures Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mu_);
    return peak_;
  }

 private:
  const pid_t pid_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  absl::Mutex mu_;
  ProcFigures peak_ ABSL_GUARDED_BY(mu_);
};

// Two nodes of two honest ranks each, joined on their Unix sockets, with
// a metrics endpoint on every node; rounds run in the background while a
// drill floods.
class FloodDrill {
 public:
  FloodDrill() {
    ClusterOptions o;
    o.job_id = kJob;
    o.nnodes = 2;
    o.nproc_per_node = 2;
    // A loaded machine (sanitizers, parallel tests) must not lose a rank
    // for being slow; a flood that stalls a daemon for seconds still does.
    o.heartbeat_timeout_ms = 5000;
    metrics_ports_ = {FreePort(), FreePort()};
    for (int port : metrics_ports_) {
      o.node_flags.push_back(
          {absl::StrCat("--metrics_listen=127.0.0.1:", port)});
    }
    if (const char* other = std::getenv("RANKD_DRILL_RANKD");
        other != nullptr && *other != '\0') {
      o.rankd_binary = other;
    }
    // AddressSanitizer keeps freed memory in its quarantine (256 MiB by
    // default) and gives memory back to the system only now and then; a
    // small quarantine and prompt release let the drills see memory given
    // back.
    o.env["ASAN_OPTIONS"] =
        "detect_leaks=0:abort_on_error=1:quarantine_size_mb=4:"
        "allocator_release_to_os_interval_ms=200";
    cluster_ = std::make_unique<LocalCluster>(std::move(o));
  }
  ~FloodDrill() { StopRounds(); }

  void Start() {
    ASSERT_TRUE(cluster_->Start().ok());
    clients_.resize(kWorld);
    std::vector<std::thread> joins;
    std::vector<absl::Status> statuses(kWorld);
    for (uint32_t r = 0; r < kWorld; ++r) {
      ClientOptions options;
      options.target = cluster_->socket_target(r / 2);
      options.bearer_token = cluster_->rank_token(r);
      auto client = Client::Connect(options);
      ASSERT_TRUE(client.ok()) << client.status();
      clients_[r] = *std::move(client);
      joins.emplace_back([this, r, &statuses] {
        JoinOptions join;
        join.job_id = kJob;
        join.local_rank = r % 2;
        join.world_size = kWorld;
        join.wait_for_world = absl::Seconds(20);
        statuses[r] = clients_[r]->Join(join).status();
      });
    }
    for (auto& t : joins) t.join();
    for (uint32_t r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    }
    ASSERT_TRUE(Round().ok());
  }

  // One round of every rank: rank r sends {r, 100 + r}.
  absl::Status Round(absl::Duration timeout = absl::Seconds(20)) {
    std::vector<std::thread> threads;
    std::vector<absl::StatusOr<std::vector<uint32_t>>> results(
        kWorld, absl::UnknownError("not run"));
    for (uint32_t r = 0; r < kWorld; ++r) {
      threads.emplace_back([this, r, timeout, &results] {
        results[r] = clients_[r]->AllGatherWords({r, 100 + r}, timeout);
      });
    }
    for (auto& t : threads) t.join();
    const std::vector<uint32_t> want = {0, 100, 1, 101, 2, 102, 3, 103};
    for (uint32_t r = 0; r < kWorld; ++r) {
      if (!results[r].ok()) {
        return absl::Status(
            results[r].status().code(),
            absl::StrCat("rank ", r, ": ", results[r].status().message()));
      }
      if (*results[r] != want) {
        return absl::InternalError(absl::StrCat("rank ", r, ": wrong result"));
      }
    }
    return absl::OkStatus();
  }

  // Rounds back to back (every 100 ms) until StopRounds; counts them.
  void StartRounds() {
    rounds_thread_ = std::thread([this] {
      while (!stop_rounds_.load()) {
        absl::Status s = Round();
        absl::MutexLock lock(&mu_);
        if (s.ok()) {
          ++rounds_ok_;
        } else if (first_failure_.ok()) {
          first_failure_ = s;
        }
        if (!s.ok()) ++rounds_failed_;
        if (!s.ok()) return;  // the job is gone; the drill says why
        absl::SleepFor(absl::Milliseconds(100));
      }
    });
  }
  void StopRounds() {
    stop_rounds_.store(true);
    if (rounds_thread_.joinable()) rounds_thread_.join();
  }
  int rounds_ok() {
    absl::MutexLock lock(&mu_);
    return rounds_ok_;
  }
  int rounds_failed() {
    absl::MutexLock lock(&mu_);
    return rounds_failed_;
  }
  absl::Status first_failure() {
    absl::MutexLock lock(&mu_);
    return first_failure_;
  }

  // Every rank's view and both daemons': no failure.
  void ExpectHealthy() {
    for (uint32_t r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(clients_[r]->JobHealth().ok())
          << "rank " << r << ": " << clients_[r]->JobHealth();
    }
    for (uint32_t node : {0u, 1u}) {
      auto admin = AdminClient::Connect(cluster_->AdminOptions(node));
      ASSERT_TRUE(admin.ok()) << admin.status();
      auto job = (*admin)->GetJob();
      ASSERT_TRUE(job.ok()) << "node " << node << ": " << job.status();
      EXPECT_EQ(job->state(), v1::JOB_STATE_READY)
          << "node " << node << ": " << job->ShortDebugString();
      EXPECT_EQ(job->failure(), "") << "node " << node;
    }
  }

  LocalCluster& cluster() { return *cluster_; }
  int metrics_port(uint32_t node) const { return metrics_ports_[node]; }
  int tcp_port(uint32_t node) const {
    const std::string address = cluster_->tcp_address(node);
    int port = 0;
    (void)absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
    return port;
  }

 private:
  std::unique_ptr<LocalCluster> cluster_;
  std::vector<int> metrics_ports_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::thread rounds_thread_;
  std::atomic<bool> stop_rounds_{false};
  absl::Mutex mu_;
  int rounds_ok_ ABSL_GUARDED_BY(mu_) = 0;
  int rounds_failed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_failure_ ABSL_GUARDED_BY(mu_);
};

// What a flood of raw HTTP/2 connections got.
struct FloodResult {
  int connections = 0;        // connected (TCP)
  int closed_by_server = 0;   // ended by the daemon while the flood held
  int64_t streams = 0;        // calls started
  int64_t streams_ended = 0;  // reset or answered by the daemon
  int64_t bytes_sent = 0;     // message bytes the daemon's windows let in
};

// `connections` connections to 127.0.0.1:`port`, each starting `streams`
// calls of `path` declaring `declared`-byte messages of which `budget`
// bytes are sent, held for `hold`, then all closed at once.
FloodResult Flood(int port, int connections, int streams,
                  const std::string& path, uint32_t declared, int64_t budget,
                  absl::Duration hold) {
  FloodResult result;
  std::vector<std::unique_ptr<RawH2Connection>> open;
  for (int i = 0; i < connections; ++i) {
    auto c = RawH2Connection::Open(port);
    if (!c.ok()) continue;
    ++result.connections;
    open.push_back(*std::move(c));
  }
  // Every stream at once, as a hostile client would (it ignores the
  // server's stream limit; the server refuses what is beyond it).
  for (auto& c : open) {
    for (int s = 0; s < streams; ++s) c->StartCall(path, declared, budget);
    c->Pump();
  }
  const absl::Time until = absl::Now() + hold;
  while (absl::Now() < until) {
    bool any = false;
    for (auto& c : open) any |= c->Pump();
    if (!any) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (auto& c : open) {
    c->Pump();
    if (!c->open()) ++result.closed_by_server;
    result.streams += static_cast<int64_t>(c->streams().size());
    for (const auto& [id, s] : c->streams()) {
      result.streams_ended += (s.reset || s.closed) ? 1 : 0;
    }
    result.bytes_sent += c->bytes_sent();
  }
  open.clear();  // closes every connection at once
  return result;
}

// Waits (up to `timeout`) for `pid`'s resident memory to come within
// `slack` of `baseline`; returns the last figures.
ProcFigures SettleNear(pid_t pid, int64_t baseline, int64_t slack,
                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  ProcFigures f = Figures(pid);
  while (f.rss - baseline > slack && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    f = Figures(pid);
  }
  return f;
}

void Report(const std::string& item, const std::string& what,
            const ProcFigures& before, const ProcFigures& peak,
            const ProcFigures& after, const std::string& details) {
  std::printf(
      "FLOOD %s %s: VmRSS %.1f MiB before, %.1f MiB peak, %.1f MiB after; "
      "threads %d before, %d peak, %d after; %s\n",
      item.c_str(), what.c_str(), MiB(before.rss), MiB(peak.rss),
      MiB(after.rss), before.threads, peak.threads, after.threads,
      details.c_str());
  std::fflush(stdout);
}

// ---------------------------------------------------------------- 7

// Item 7: 100,000 calls that never send their message, on 100 connections
// to the coordinator's TCP port, held for 12 s, then all closed at once.
// (Before: all were let in, 1.2 GiB; closing them stalled the daemon, the
// ranks' Unix socket streams ended, a node was lost, the job FAILED.)
// Now: a peer holds at most --max_tcp_unauthenticated_per_peer unauthenticated
// connections (the rest are closed on arrival), each closed after
// --tcp_unauthenticated_ms; the honest ranks' rounds go on throughout.
TEST(NetworkFloodDrill, UnfinishedCallsAreBoundedAndHonestRanksKeepServing) {
  FloodDrill drill;
  ASSERT_NO_FATAL_FAILURE(drill.Start());
  const pid_t node0 = drill.cluster().daemon(0).pid();
  absl::SleepFor(absl::Milliseconds(500));
  const ProcFigures before = Figures(node0);
  drill.StartRounds();
  Sampler sampler(node0);
  FloodResult flood = Flood(drill.tcp_port(0), /*connections=*/100,
                            /*streams=*/1000, "/rankd.v1.Peer/KvSet",
                            /*declared=*/100, /*budget=*/0, absl::Seconds(12));
  // After every connection closed at once: rounds still complete.
  absl::SleepFor(absl::Seconds(2));
  drill.StopRounds();
  const ProcFigures peak = sampler.Stop();
  const ProcFigures after =
      SettleNear(node0, before.rss, kKeptSlack, absl::Seconds(10));
  Report("item7", "node0 rankd, 100 connections x 1000 unfinished calls",
         before, peak, after,
         absl::StrCat(flood.connections, " connected, ", flood.closed_by_server,
                      " closed by the daemon, ", flood.streams, " calls sent, ",
                      drill.rounds_ok(), " honest rounds during and after, ",
                      drill.rounds_failed(), " failed"));
  EXPECT_EQ(drill.rounds_failed(), 0) << drill.first_failure();
  EXPECT_GE(drill.rounds_ok(), 10);
  drill.ExpectHealthy();
  EXPECT_TRUE(drill.Round().ok());
  // Most connections closed by the daemon: refused on arrival, or past
  // the unauthenticated time limit.
  EXPECT_GE(flood.closed_by_server, 95);
  EXPECT_LT(peak.rss - before.rss, kSanitizerFactor * (int64_t{200} << 20))
      << "peak " << MiB(peak.rss) << " MiB";
  EXPECT_LT(after.rss - before.rss, kKeptSlack)
      << "after " << MiB(after.rss) << " MiB";
  EXPECT_LT(peak.threads - before.threads, 16);
}

// ---------------------------------------------------------------- 8

// Item 8: 400 connections x 50 requests to the Peer service's rounds
// method, each declaring a 64 MiB message and sending 64 KiB of it
// (1.25 GiB offered). (Before: memory rose by 1.25 GiB, the daemon reset
// the honest ranks' Unix socket streams, the job FAILED.) Now: an
// unauthenticated connection may send --tcp_unauthenticated_bytes before it
// is closed, and a peer holds --max_tcp_unauthenticated_per_peer such
// connections; the Unix socket's server has a memory quota of its own.
TEST(NetworkFloodDrill,
     HalfSentLargeRequestsAreBoundedAndHonestRanksKeepServing) {
  FloodDrill drill;
  ASSERT_NO_FATAL_FAILURE(drill.Start());
  const pid_t node0 = drill.cluster().daemon(0).pid();
  absl::SleepFor(absl::Milliseconds(500));
  const ProcFigures before = Figures(node0);
  drill.StartRounds();
  Sampler sampler(node0);
  FloodResult flood =
      Flood(drill.tcp_port(0), /*connections=*/400,
            /*streams=*/50, "/rankd.v1.Peer/ContributeWords",
            /*declared=*/64u << 20, /*budget=*/64 << 10, absl::Seconds(12));
  absl::SleepFor(absl::Seconds(2));
  drill.StopRounds();
  const ProcFigures peak = sampler.Stop();
  const ProcFigures after =
      SettleNear(node0, before.rss, kKeptSlack, absl::Seconds(10));
  Report("item8", "node0 rankd, 400 connections x 50 half-sent 64 MiB requests",
         before, peak, after,
         absl::StrCat(flood.connections, " connected, ", flood.closed_by_server,
                      " closed by the daemon, ", MiB(flood.bytes_sent),
                      " MiB of messages let in, ", drill.rounds_ok(),
                      " honest rounds during and after, ",
                      drill.rounds_failed(), " failed"));
  EXPECT_EQ(drill.rounds_failed(), 0) << drill.first_failure();
  EXPECT_GE(drill.rounds_ok(), 10);
  drill.ExpectHealthy();
  EXPECT_TRUE(drill.Round().ok());
  EXPECT_GE(flood.closed_by_server, 390);
  EXPECT_LT(flood.bytes_sent, int64_t{256} << 20);
  EXPECT_LT(peak.rss - before.rss, kSanitizerFactor * (int64_t{200} << 20))
      << "peak " << MiB(peak.rss) << " MiB";
  EXPECT_LT(after.rss - before.rss, kKeptSlack)
      << "after " << MiB(after.rss) << " MiB";
  EXPECT_LT(peak.threads - before.threads, 16);
}

// ---------------------------------------------------------------- 12

// GET /metrics from 127.0.0.1:`port` within `timeout`; the body, or "" on
// error or timeout.
std::string ScrapeWithin(int port, absl::Duration timeout) {
  int fd = ConnectLoopback(port, timeout);
  if (fd < 0) return "";
  const absl::Time deadline = absl::Now() + timeout;
  const std::string request =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  std::string response;
  size_t sent = 0;
  char buffer[8192];
  while (absl::Now() < deadline) {
    if (sent < request.size()) {
      ssize_t n = ::send(fd, request.data() + sent, request.size() - sent,
                         MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n > 0) {
      response.append(buffer, static_cast<size_t>(n));
      continue;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  const bool complete = absl::Now() < deadline;
  ::close(fd);
  size_t body = response.find("\r\n\r\n");
  if (!complete || body == std::string::npos ||
      !absl::StartsWith(response, "HTTP/1.1 200")) {
    return "";
  }
  return response.substr(body + 4);
}

// Item 12: six idle and six half-sent connections to the metrics endpoint,
// then 200 more: every scrape is still answered within 2 s. (Before: six
// idle connections made every scrape time out until they closed.)
TEST(NetworkFloodDrill, IdleAndHalfSentConnectionsDoNotHoldMetrics) {
  FloodDrill drill;
  ASSERT_NO_FATAL_FAILURE(drill.Start());
  const pid_t node0 = drill.cluster().daemon(0).pid();
  const int port = drill.metrics_port(0);
  ASSERT_TRUE(
      absl::StrContains(ScrapeWithin(port, absl::Seconds(5)), "rankd_ready 1"));
  const ProcFigures before = Figures(node0);
  Sampler sampler(node0);
  std::vector<int> held;
  auto hold = [&](int count, bool half_sent) {
    for (int i = 0; i < count; ++i) {
      int fd = ConnectLoopback(port);
      if (fd < 0) continue;
      if (half_sent) {
        const std::string part = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
        (void)!::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
      }
      held.push_back(fd);
    }
  };
  hold(6, /*half_sent=*/false);
  hold(6, /*half_sent=*/true);
  absl::SleepFor(absl::Milliseconds(200));
  absl::Duration slowest;
  // Ten scrapes, each given 2 s: how many were answered.
  auto scrape_ten = [&] {
    int answered = 0;
    for (int i = 0; i < 10; ++i) {
      const absl::Time start = absl::Now();
      if (absl::StrContains(ScrapeWithin(port, absl::Seconds(2)),
                            "rankd_ready 1")) {
        ++answered;
      }
      slowest = std::max(slowest, absl::Now() - start);
    }
    return answered;
  };
  const int answered = scrape_ten();
  EXPECT_EQ(answered, 10) << "scrapes answered within 2 s with 12 held";
  // Far more than the endpoint holds: the oldest that sent no request make
  // room, and scrapes still get in.
  hold(200, /*half_sent=*/false);
  const int answered_many = scrape_ten();
  EXPECT_EQ(answered_many, 10) << "scrapes answered within 2 s with 212 held";
  for (int fd : held) ::close(fd);
  const ProcFigures peak = sampler.Stop();
  absl::SleepFor(absl::Milliseconds(300));
  const ProcFigures after = Figures(node0);
  Report("item12",
         "node0 rankd metrics, 12 then 212 idle/half-sent connections", before,
         peak, after,
         absl::StrCat(answered, "/10 scrapes answered with 12 held, ",
                      answered_many, "/10 with 212 held, slowest ",
                      absl::FormatDuration(slowest)));
  EXPECT_LT(peak.threads - before.threads, 4);
  EXPECT_LT(after.rss - before.rss, int64_t{16} << 20);
  drill.ExpectHealthy();
}

// ------------------------------------------- 12: unread answers, EMFILE

// A connection to the metrics port that sends its request and never reads
// the answer, offering a tiny window (receive buffer and segment size set
// before connecting), so that the endpoint stays writing to it. -1 on
// error.
int UnreadScrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int small = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  int mss = 88;  // the least Linux allows
  ::setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string request =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Item 12, answers never read: a client keeps 200 connections that each
// sent a request and read nothing, opening a new one every 10 ms (and
// closing its oldest) for as long as the scrapes run; one address holds at
// most --metrics_max_connections_per_address, and the connection longest
// stalled makes room. An answer the endpoint cannot send whole stays
// "being written", which before held its place until its deadline and
// closed every newer connection, scrapes included. On loopback the
// smallest window still takes about 41 KB (SO_RCVBUF 1, TCP_MAXSEG 88,
// measured), and this job's body is about 11 KB: here the answers go out
// whole and the daemon before this fix passes too. A larger job's body
// (more nodes, more series) does not; daemon/http_endpoint_test.cc shows
// that case with an 8 MiB body, failing with the old loop.
TEST(NetworkFloodDrill, UnreadMetricsAnswersDoNotHoldMetrics) {
  FloodDrill drill;
  ASSERT_NO_FATAL_FAILURE(drill.Start());
  drill.StartRounds();
  const pid_t node0 = drill.cluster().daemon(0).pid();
  const int port = drill.metrics_port(0);
  const std::string first = ScrapeWithin(port, absl::Seconds(5));
  ASSERT_TRUE(absl::StrContains(first, "rankd_ready 1"));
  const ProcFigures before = Figures(node0);
  Sampler sampler(node0);
  std::atomic<bool> stop{false};
  std::atomic<int> opened{0};
  std::thread flood([&] {
    std::deque<int> held;
    while (!stop.load()) {
      int fd = UnreadScrape(port);
      if (fd >= 0) {
        held.push_back(fd);
        opened.fetch_add(1);
      }
      if (held.size() > 200) {
        ::close(held.front());
        held.pop_front();
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    for (int fd : held) ::close(fd);
  });
  // The flood fills every place first.
  while (opened.load() < 100) absl::SleepFor(absl::Milliseconds(10));
  int answered = 0;
  absl::Duration slowest;
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    if (absl::StrContains(ScrapeWithin(port, absl::Seconds(2)),
                          "rankd_ready 1")) {
      ++answered;
    }
    slowest = std::max(slowest, absl::Now() - start);
  }
  stop.store(true);
  flood.join();
  drill.StopRounds();
  const ProcFigures peak = sampler.Stop();
  const ProcFigures after =
      SettleNear(node0, before.rss, int64_t{16} << 20, absl::Seconds(10));
  Report("item12", "node0 rankd metrics, unread answers 100/s", before, peak,
         after,
         absl::StrCat(first.size(), "-byte body, ", opened.load(),
                      " unread scrapes, ", answered,
                      "/10 scrapes answered within 2 s, slowest ",
                      absl::FormatDuration(slowest)));
  EXPECT_EQ(answered, 10) << "scrapes answered within 2 s";
  EXPECT_EQ(drill.rounds_failed(), 0) << drill.first_failure();
  EXPECT_LT(peak.threads - before.threads, 4);
  EXPECT_LT(after.rss - before.rss, int64_t{16} << 20);
  drill.ExpectHealthy();
}

// CPU seconds `pid` has used (utime + stime of /proc/PID/stat).
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis, from field 3 (state).
  std::vector<std::string> fields =
      absl::StrSplit(text.substr(text.rfind(')') + 2), ' ', absl::SkipEmpty());
  int64_t utime = 0;
  int64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return -1;
  }
  return static_cast<double>(utime + stime) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The lowest descriptor number `pid` has free: with RLIMIT_NOFILE there,
// it can open nothing more.
int LowestFreeDescriptor(pid_t pid) {
  std::set<int> open;
  for (const auto& entry : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", pid, "/fd"))) {
    int fd = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &fd)) {
      open.insert(fd);
    }
  }
  int lowest = 0;
  while (open.count(lowest) != 0) ++lowest;
  return lowest;
}

// Item 12, out of descriptors: with node 0's RLIMIT_NOFILE lowered so that
// it can open no descriptor, 8 connections wait on its metrics port for
// 2 s. (Before: accept failed with EMFILE, the connection stayed queued,
// and the endpoint's thread polled and failed again at once, spinning a
// core.) Now the endpoint leaves the listener alone for a while and counts
// it; with descriptors back, it accepts them and scrapes are answered.
TEST(NetworkFloodDrill, MetricsOutOfDescriptorsBacksOff) {
  FloodDrill drill;
  ASSERT_NO_FATAL_FAILURE(drill.Start());
  const pid_t node0 = drill.cluster().daemon(0).pid();
  const int port = drill.metrics_port(0);
  ASSERT_TRUE(
      absl::StrContains(ScrapeWithin(port, absl::Seconds(5)), "rankd_ready 1"));
  // Sockets made before the limit, connected after it.
  std::vector<int> waiting;
  for (int i = 0; i < 8; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    waiting.push_back(fd);
  }
  rlimit saved{};
  ASSERT_EQ(::prlimit(node0, RLIMIT_NOFILE, nullptr, &saved), 0);
  rlimit none = saved;
  none.rlim_cur = static_cast<rlim_t>(LowestFreeDescriptor(node0));
  ASSERT_EQ(::prlimit(node0, RLIMIT_NOFILE, &none, nullptr), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int fd : waiting) {
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
              0);
  }
  const double cpu_before = CpuSeconds(node0);
  absl::SleepFor(absl::Seconds(2));  // the window measured
  const double cpu = CpuSeconds(node0) - cpu_before;
  ASSERT_EQ(::prlimit(node0, RLIMIT_NOFILE, &saved, nullptr), 0);
  for (int fd : waiting) ::close(fd);
  // Descriptors back: answered again, and the pauses were counted.
  std::string text;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (absl::Now() < until &&
         !absl::StrContains(text = ScrapeWithin(port, absl::Seconds(2)),
                            "rankd_ready 1")) {
  }
  std::optional<double> backoffs;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    double v = 0;
    if (absl::ConsumePrefix(&line, "rankd_metrics_accept_backoffs_total ") &&
        absl::SimpleAtod(line, &v)) {
      backoffs = v;
    }
  }
  std::printf(
      "FLOOD item12 node0 rankd metrics out of descriptors for 2 s: %.2f s "
      "of CPU, %s accept backoffs\n",
      cpu, backoffs.has_value() ? absl::StrCat(*backoffs).c_str() : "no");
  std::fflush(stdout);
  EXPECT_TRUE(absl::StrContains(text, "rankd_ready 1"));
  EXPECT_LT(cpu, 0.5) << "the daemon spun";
  ASSERT_TRUE(backoffs.has_value()) << text;
  EXPECT_GE(*backoffs, 2);
  drill.ExpectHealthy();
  EXPECT_TRUE(drill.Round().ok());
}

// ------------------------------------------- many source addresses (36, 1)

namespace many_addresses {

// Silent connections to 127.0.0.1:`port`, one from each of `count` source
// addresses (127.0.0.2 on: Linux lets a client take any 127/8 address),
// each reopened every 100 ms once the daemon closed it, until Stop.
class AddressFlood {
 public:
  AddressFlood(int port, int count) : port_(port), fds_(count, -1) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Tick();
        absl::SleepFor(absl::Milliseconds(100));
      }
      for (int& fd : fds_) {
        if (fd >= 0) ::close(fd);
      }
    });
  }
  ~AddressFlood() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t opened() const { return opened_.load(); }
  int64_t closed_by_server() const { return closed_.load(); }
  // Connections open now (as the flood sees them).
  int open() const { return open_.load(); }

 private:
  void Tick() {
    int open = 0;
    for (size_t i = 0; i < fds_.size(); ++i) {
      int& fd = fds_[i];
      if (fd >= 0) {
        // Read what the daemon sent (its HTTP/2 settings) to see its close.
        char buffer[1024];
        ssize_t n;
        do {
          n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        } while (n > 0);
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
          ::close(fd);
          fd = -1;
          ++closed_;
        }
      }
      if (fd < 0) fd = Open(static_cast<int>(i) + 2);
      if (fd >= 0) ++open;
    }
    open_.store(open);
  }
  int Open(int source) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(source));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port_));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      ::close(fd);
      return -1;
    }
    ++opened_;
    return fd;
  }

  const int port_;
  std::vector<int> fds_;  // the flood thread's own
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> opened_{0};
  std::atomic<int64_t> closed_{0};
  std::atomic<int> open_{0};
  std::thread thread_;
};

}  // namespace many_addresses

// Review of issue 36, hole 1: silent connections from 64 addresses
// (127.0.0.2-65), reopened as soon as they are closed, against a
// coordinator listening for --max_tcp_connections=64, from before node 1
// starts until the end. (Before: they held every slot, node 1's connection
// was refused, and it never joined.) Now: unauthenticated connections hold
// at most --max_tcp_unauthenticated (32) and a new connection shuts the
// oldest of them down, so node 1 joins, every rank's rounds go on, and an
// operator's calls get in.
TEST(NetworkFloodDrill, SilentConnectionsFromManyAddressesCannotLockNodesOut) {
  FloodDrill drill;
  constexpr int kSlots = 64;
  ClusterOptions& options = drill.cluster().mutable_options();
  options.node_flags[0].push_back(
      absl::StrCat("--max_tcp_connections=", kSlots));
  std::unique_ptr<many_addresses::AddressFlood> flood;
  // The flood fills the coordinator's listener before node 1 starts.
  options.after_coordinator_ready = [&]() -> absl::Status {
    flood = std::make_unique<many_addresses::AddressFlood>(drill.tcp_port(0),
                                                           kSlots);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (flood->opened() < kSlots && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (flood->opened() < kSlots) {
      return absl::InternalError(
          absl::StrCat("the flood opened ", flood->opened(), " connections"));
    }
    absl::SleepFor(absl::Milliseconds(300));  // the gate has them all
    return absl::OkStatus();
  };
  ASSERT_NO_FATAL_FAILURE(drill.Start());
  ASSERT_NE(flood, nullptr);
  const pid_t node0 = drill.cluster().daemon(0).pid();
  const ProcFigures before = Figures(node0);
  Sampler sampler(node0);
  drill.StartRounds();
  // Rounds and an operator's calls through the flood: for 6 s, and on
  // until 10 of each went through (a loaded machine, a sanitizer build),
  // for at most 60 s.
  const absl::Time earliest = absl::Now() + absl::Seconds(6);
  const absl::Time latest = absl::Now() + absl::Seconds(60);
  int operator_calls = 0;
  while (absl::Now() < latest &&
         (absl::Now() < earliest || operator_calls < 10 ||
          drill.rounds_ok() < 10)) {
    auto admin = AdminClient::Connect(drill.cluster().AdminOptions(0));
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto job = (*admin)->GetJob();
    EXPECT_TRUE(job.ok()) << job.status();
    if (job.ok()) ++operator_calls;
    absl::SleepFor(absl::Milliseconds(500));
  }
  const int64_t opened = flood->opened();
  const int64_t closed = flood->closed_by_server();
  flood->Stop();
  drill.StopRounds();
  const ProcFigures peak = sampler.Stop();
  const ProcFigures after =
      SettleNear(node0, before.rss, kKeptSlack, absl::Seconds(10));
  Report("review36-1",
         "node0 rankd (--max_tcp_connections=64), silent connections from "
         "64 addresses",
         before, peak, after,
         absl::StrCat(opened, " opened, ", closed, " closed by the daemon, ",
                      operator_calls, " operator calls, ", drill.rounds_ok(),
                      " honest rounds, ", drill.rounds_failed(), " failed"));
  EXPECT_EQ(drill.rounds_failed(), 0) << drill.first_failure();
  EXPECT_GE(drill.rounds_ok(), 10);
  EXPECT_GE(operator_calls, 10);
  // The listener kept making room: the flood's connections were shut.
  EXPECT_GE(closed, kSlots / 2);
  drill.ExpectHealthy();
  EXPECT_TRUE(drill.Round().ok());
  EXPECT_LT(after.rss - before.rss, kKeptSlack)
      << "after " << MiB(after.rss) << " MiB";
  EXPECT_LT(peak.threads - before.threads, 16);
}

}  // namespace
}  // namespace rankd::testing
