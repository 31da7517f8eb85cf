// HttpEndpoint: the metrics endpoint's HTTP server (GET /metrics), served
// by one thread on an event loop (poll), so that no connection can hold it:
// an idle, half-sent or unread connection costs a descriptor and a few KiB
// until its deadline, never a worker. One request per connection
// ("Connection: close"). What a client can make it hold is bounded:
//   - a connection has `request_timeout` to send its request (at most
//     8 KiB of request line and headers), then as long again to read the
//     whole answer; it is then closed, whatever it was doing;
//   - at most `max_connections` are held, and at most
//     `max_connections_per_address` from one address (an IPv6 /64). A new
//     connection beyond its address's share closes one of that address's;
//     beyond the total, one of any. The one closed is an answered one
//     waiting for the client to close, else the one that has spent longest
//     sending its request or not reading its answer (a scrape does either
//     in moments). So a scrape always gets in, and one address alone
//     cannot fill the endpoint: beyond its share it displaces only its own;
//   - answers share one rendered body: a connection that does not read
//     holds a reference to it and its own headers, no copy;
//   - at most kMaxAcceptsPerTurn connections are accepted per turn of the
//     loop, so a stream of new connections cannot starve the deadlines and
//     the answers under way;
//   - when accepting fails for want of descriptors (EMFILE, ENFILE) or
//     memory, or for any reason but the one connection's own (ECONNABORTED
//     and the like), the listener is left alone for `accept_backoff`
//     (counted in Counters::accept_backoffs) rather than polled again at
//     once: the connection stays queued and would be found again.
// The body is rendered at most once per `body_ttl`: a flood of scrapes
// costs one render. Answers: GET or HEAD /metrics (any query) 200 with
// render()'s text; another path 404; another method 405; an oversized
// request 431. Depends on POSIX sockets and absl.
#ifndef RANKD_DAEMON_HTTP_ENDPOINT_H_
#define RANKD_DAEMON_HTTP_ENDPOINT_H_

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rankd {

class HttpEndpoint {
 public:
  // Connections accepted per turn of the loop, at most.
  static constexpr int kMaxAcceptsPerTurn = 16;

  struct Options {
    absl::Duration request_timeout = absl::Seconds(5);
    uint32_t max_connections = 64;             // >= 1
    uint32_t max_connections_per_address = 8;  // >= 1
    absl::Duration body_ttl = absl::Milliseconds(250);
    absl::Duration accept_backoff = absl::Milliseconds(100);
  };

  // What the endpoint has done, for the daemon's own metrics and tests.
  // Written by the endpoint's thread, read by anyone.
  struct Counters {
    std::atomic<uint64_t> accepted{0};
    // Closed to make room for a newer connection.
    std::atomic<uint64_t> displaced{0};
    // Closed at their deadline.
    std::atomic<uint64_t> timed_out{0};
    // Times accept failed (for want of descriptors or memory, mostly) and
    // the listener was left alone for accept_backoff.
    std::atomic<uint64_t> accept_backoffs{0};
    // Bodies rendered (at most one per body_ttl).
    std::atomic<uint64_t> renders{0};
    // The most connections accepted in one turn of the loop.
    std::atomic<uint64_t> most_accepted_in_one_turn{0};
  };

  // Binds `address` (HOST:PORT; port 0 picks one) and starts serving;
  // `render` makes the body of /metrics answers, on the endpoint's thread
  // (it must be thread-safe and outlive the endpoint). `counters`, when
  // given, must outlive the endpoint; otherwise the endpoint keeps its
  // own. Unavailable naming --metrics_listen when the address cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& address, Options options,
      std::function<std::string()> render, Counters* counters = nullptr);
  // Stops serving and closes every connection.
  ~HttpEndpoint();

  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }
  const Counters& counters() const { return *counters_; }

  // Which connections count as one address: the IPv4 address, or the
  // first 64 bits of an IPv6 one (an IPv4-mapped one as IPv4). Exposed for
  // tests.
  static std::string AddressGroup(const sockaddr_storage& address);

 private:
  struct Connection;
  class Loop;

  HttpEndpoint(int listen_fd, int wake_fd, int port, Options options,
               std::function<std::string()> render, Counters* counters);

  const int listen_fd_;
  const int wake_fd_;
  const int port_;
  const Options options_;
  const std::function<std::string()> render_;
  Counters own_counters_;
  Counters* const counters_;
  std::thread thread_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_HTTP_ENDPOINT_H_
