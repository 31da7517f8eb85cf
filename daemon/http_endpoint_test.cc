// HttpEndpoint in process, through real sockets on 127.0.0.1: what a
// client can make it hold (connections that never read their answer,
// many connections from one address, a burst of new connections, running
// out of descriptors) and that a flood of scrapes costs one render.
#include "daemon/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace rankd {
namespace {

constexpr char kRequest[] =
    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

// A socket to 127.0.0.1:`port`, from `from` (an address of the loopback,
// so that a test can be several clients), with a receive buffer of
// `receive_buffer` bytes when not 0 (set before connecting, so that the
// window it offers stays small). -1 on error.
int Connect(int port, const char* from = "127.0.0.1", int receive_buffer = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (receive_buffer > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer,
                 sizeof(receive_buffer));
  }
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &local.sin_addr);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) !=
          0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n =
        ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Everything `fd` receives until the server closes it or `timeout`
// passes; `closed` says which.
std::string ReadToEnd(int fd, absl::Duration timeout, bool* closed) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string out;
  char buffer[65536];
  *closed = false;
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int wait = static_cast<int>(std::max<int64_t>(
        1, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (::poll(&p, 1, wait) <= 0) continue;
    ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

// A whole scrape from `from`: the answer's body when it is a 200 that came
// complete within `timeout`, or "" otherwise.
std::string Scrape(int port, absl::Duration timeout,
                   const char* from = "127.0.0.1") {
  int fd = Connect(port, from);
  if (fd < 0) return "";
  bool closed = false;
  std::string answer;
  if (SendAll(fd, kRequest)) answer = ReadToEnd(fd, timeout, &closed);
  ::close(fd);
  const size_t body = answer.find("\r\n\r\n");
  if (!closed || body == std::string::npos ||
      !absl::StartsWith(answer, "HTTP/1.1 200")) {
    return "";
  }
  return answer.substr(body + 4);
}

// Waits (up to 10 s) until `counter` is at least `value`.
bool AwaitAtLeast(const std::atomic<uint64_t>& counter, uint64_t value) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (counter.load() < value) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

std::unique_ptr<HttpEndpoint> StartEndpoint(
    HttpEndpoint::Options options, std::function<std::string()> render) {
  auto endpoint =
      HttpEndpoint::Start("127.0.0.1:0", options, std::move(render));
  EXPECT_TRUE(endpoint.ok()) << endpoint.status();
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// A flood of scrapes costs one render per body_ttl, not one per scrape.
TEST(HttpEndpointTest, ScrapesWithinTheBodyTtlShareOneRender) {
  std::atomic<int> renders{0};
  HttpEndpoint::Options options;
  options.body_ttl = absl::Hours(1);
  auto endpoint = StartEndpoint(options, [&] {
    return absl::StrCat("rendered ", renders.fetch_add(1) + 1, "\n");
  });
  ASSERT_NE(endpoint, nullptr);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(Scrape(endpoint->port(), absl::Seconds(5)), "rendered 1\n");
  }
  EXPECT_EQ(renders.load(), 1);
  EXPECT_EQ(endpoint->counters().renders.load(), 1u);

  // Past the ttl, the next scrape renders afresh.
  options.body_ttl = absl::Milliseconds(20);
  renders = 0;
  endpoint = StartEndpoint(options, [&] {
    return absl::StrCat("rendered ", renders.fetch_add(1) + 1, "\n");
  });
  ASSERT_NE(endpoint, nullptr);
  EXPECT_EQ(Scrape(endpoint->port(), absl::Seconds(5)), "rendered 1\n");
  absl::SleepFor(absl::Milliseconds(40));  // the ttl passing, not a sync
  EXPECT_EQ(Scrape(endpoint->port(), absl::Seconds(5)), "rendered 2\n");
}

// Connections that send their request and never read the answer (the
// endpoint writing to them) used to hold their slots until their
// deadline; a new connection was then closed at once, so scrapes failed
// for as long as such clients kept coming back. Now the one answered
// longest makes room, and none outlives its deadline.
TEST(HttpEndpointTest, UnreadAnswersDoNotHoldTheEndpoint) {
  // Larger than any socket buffers: the answer cannot be sent whole.
  const std::string body(8 << 20, 'm');
  HttpEndpoint::Options options;
  options.max_connections = 4;
  options.max_connections_per_address = 4;
  options.request_timeout = absl::Seconds(30);
  auto endpoint = StartEndpoint(options, [&] { return body; });
  ASSERT_NE(endpoint, nullptr);
  std::vector<int> unread;
  for (int i = 0; i < 4; ++i) {
    int fd = Connect(endpoint->port(), "127.0.0.1", /*receive_buffer=*/1);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, kRequest));
    // The answer has begun: the endpoint is writing to it.
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    unread.push_back(fd);
  }
  const absl::Time start = absl::Now();
  EXPECT_EQ(Scrape(endpoint->port(), absl::Seconds(10)).size(), body.size())
      << "a scrape with 4 unread answers held";
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_GE(endpoint->counters().displaced.load(), 1u);
  // The oldest was closed to make room.
  bool closed = false;
  ReadToEnd(unread[0], absl::Seconds(10), &closed);
  EXPECT_TRUE(closed);
  // A scrape not yet sent when more unread answers come is not what
  // makes room for them: the one longest unread is.
  const uint64_t accepted = endpoint->counters().accepted.load();
  int scrape = Connect(endpoint->port());
  ASSERT_GE(scrape, 0);
  ASSERT_TRUE(AwaitAtLeast(endpoint->counters().accepted, accepted + 1));
  for (int i = 0; i < 2; ++i) {
    int fd = Connect(endpoint->port(), "127.0.0.1", /*receive_buffer=*/1);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, kRequest));
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    unread.push_back(fd);
  }
  ASSERT_TRUE(SendAll(scrape, kRequest));
  const std::string answer = ReadToEnd(scrape, absl::Seconds(10), &closed);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200"));
  EXPECT_TRUE(absl::EndsWith(answer, body));
  ::close(scrape);
  for (int fd : unread) ::close(fd);

  // And an unread answer is closed at its deadline.
  options.request_timeout = absl::Milliseconds(200);
  endpoint = StartEndpoint(options, [&] { return body; });
  ASSERT_NE(endpoint, nullptr);
  int fd = Connect(endpoint->port(), "127.0.0.1", /*receive_buffer=*/1);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, kRequest));
  EXPECT_TRUE(AwaitAtLeast(endpoint->counters().timed_out, 1));
  ::close(fd);
}

// One address holds at most max_connections_per_address: its new
// connections displace its own oldest, never another address's. (Before,
// 127.0.0.2's idle connections displaced 127.0.0.1's scrape.)
TEST(HttpEndpointTest, OneAddressOnlyDisplacesItself) {
  HttpEndpoint::Options options;
  options.max_connections = 4;
  options.max_connections_per_address = 2;
  auto endpoint = StartEndpoint(options, [] { return "up 1\n"; });
  ASSERT_NE(endpoint, nullptr);
  // An honest scraper's connection, its request half sent.
  int honest = Connect(endpoint->port(), "127.0.0.1");
  ASSERT_GE(honest, 0);
  ASSERT_TRUE(SendAll(honest, "GET /metrics HTTP/1.1\r\n"));
  ASSERT_TRUE(AwaitAtLeast(endpoint->counters().accepted, 1));
  std::vector<int> flood;
  for (int i = 0; i < 10; ++i) {
    int fd = Connect(endpoint->port(), "127.0.0.2");
    ASSERT_GE(fd, 0) << "cannot connect from 127.0.0.2";
    flood.push_back(fd);
  }
  ASSERT_TRUE(AwaitAtLeast(endpoint->counters().accepted, 11));
  EXPECT_EQ(endpoint->counters().displaced.load(), 8u);
  ASSERT_TRUE(SendAll(honest, "Host: 127.0.0.1\r\n\r\n"));
  bool closed = false;
  const std::string answer = ReadToEnd(honest, absl::Seconds(5), &closed);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
  EXPECT_TRUE(absl::EndsWith(answer, "up 1\n")) << answer;
  ::close(honest);
  for (int fd : flood) ::close(fd);
}

TEST(HttpEndpointTest, AddressGroupIsTheAddressOrItsSlash64) {
  auto v4 = [](const char* text) {
    sockaddr_storage s{};
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    EXPECT_EQ(::inet_pton(AF_INET, text, &a->sin_addr), 1);
    return HttpEndpoint::AddressGroup(s);
  };
  auto v6 = [](const char* text) {
    sockaddr_storage s{};
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    a->sin6_family = AF_INET6;
    EXPECT_EQ(::inet_pton(AF_INET6, text, &a->sin6_addr), 1);
    return HttpEndpoint::AddressGroup(s);
  };
  EXPECT_EQ(v4("10.0.0.1"), v4("10.0.0.1"));
  EXPECT_NE(v4("10.0.0.1"), v4("10.0.0.2"));
  EXPECT_EQ(v6("2001:db8:1:2::1"), v6("2001:db8:1:2:ffff::9"));
  EXPECT_NE(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"));
  EXPECT_EQ(v6("::ffff:10.0.0.1"), v4("10.0.0.1"));
  EXPECT_NE(v6("::ffff:10.0.0.1"), v4("10.0.0.2"));
}

// Connections waiting to be accepted are taken kMaxAcceptsPerTurn at a
// time, between which deadlines are kept and answers written. (Before, a
// turn accepted until none was left: all 100 here.)
TEST(HttpEndpointTest, AcceptsAreBoundedPerTurn) {
  absl::Notification rendering;
  absl::Notification release;
  HttpEndpoint::Options options;
  options.max_connections = 200;
  options.max_connections_per_address = 200;
  auto endpoint = StartEndpoint(options, [&] {
    rendering.Notify();
    // Holds the loop while the test queues connections.
    release.WaitForNotificationWithTimeout(absl::Seconds(10));
    return std::string("up 1\n");
  });
  ASSERT_NE(endpoint, nullptr);
  std::string first;
  std::thread scrape(
      [&] { first = Scrape(endpoint->port(), absl::Seconds(20)); });
  ASSERT_TRUE(rendering.WaitForNotificationWithTimeout(absl::Seconds(10)));
  std::vector<int> queued;
  for (int i = 0; i < 100; ++i) {
    int fd = Connect(endpoint->port());
    ASSERT_GE(fd, 0);
    queued.push_back(fd);
  }
  release.Notify();
  scrape.join();
  EXPECT_EQ(first, "up 1\n");
  EXPECT_TRUE(AwaitAtLeast(endpoint->counters().accepted, 101));
  EXPECT_LE(endpoint->counters().most_accepted_in_one_turn.load(),
            static_cast<uint64_t>(HttpEndpoint::kMaxAcceptsPerTurn));
  for (int fd : queued) ::close(fd);
}

double ProcessCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// Out of descriptors, accept fails while the connection stays queued:
// polling the listener again at once made the loop spin (a core's worth
// of CPU for as long as it lasted). Now it pauses for accept_backoff, and
// counts it.
TEST(HttpEndpointTest, AcceptBacksOffWhenOutOfDescriptors) {
  HttpEndpoint::Options options;
  options.accept_backoff = absl::Milliseconds(100);
  auto endpoint = StartEndpoint(options, [] { return "up 1\n"; });
  ASSERT_NE(endpoint, nullptr);
  // Sockets made now, connected once no descriptor is left to accept them.
  std::vector<int> clients;
  for (int i = 0; i < 4; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    clients.push_back(fd);
  }
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit none = saved;
  none.rlim_cur = static_cast<rlim_t>(lowest_free);  // no new descriptor
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &none), 0);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(endpoint->port()));
  ::inet_pton(AF_INET, "127.0.0.1", &server.sin_addr);
  for (int fd : clients) {
    EXPECT_EQ(
        ::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)), 0);
  }
  const double cpu_before = ProcessCpuSeconds();
  absl::SleepFor(absl::Seconds(1));  // the window measured, not a sync
  const double cpu = ProcessCpuSeconds() - cpu_before;
  const uint64_t backoffs = endpoint->counters().accept_backoffs.load();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  std::printf(
      "HTTP out of descriptors for 1 s: %.3f s of CPU, %llu "
      "backoffs\n",
      cpu, static_cast<unsigned long long>(backoffs));
  EXPECT_LT(cpu, 0.25) << "the loop spun";
  EXPECT_GE(backoffs, 2u);
  EXPECT_LE(backoffs, 12u);
  // Descriptors back: the queued connections are accepted, scrapes work.
  EXPECT_TRUE(AwaitAtLeast(endpoint->counters().accepted, 4));
  EXPECT_EQ(Scrape(endpoint->port(), absl::Seconds(5)), "up 1\n");
  for (int fd : clients) ::close(fd);
}

}  // namespace
}  // namespace rankd
