// HttpEndpoint: the metrics endpoint's HTTP server (GET /metrics), served
// by one thread on an event loop (poll), so that no connection can hold it:
// an idle or half-sent connection costs a descriptor and a few KiB until
// its deadline, never a worker. Each connection gets `request_timeout` to
// send its request (at most 8 KiB of request line and headers) and as long
// again to read the answer; the endpoint then closes it (one request per
// connection: "Connection: close"). At most `max_connections` are held; a
// new one closes the oldest that has not sent its request yet, so a scrape
// always gets in. Answers: GET or HEAD /metrics (any query) 200 with
// render()'s text; another path 404; another method 405; an oversized
// request 431. Depends on POSIX sockets and absl.
#ifndef RANKD_DAEMON_HTTP_ENDPOINT_H_
#define RANKD_DAEMON_HTTP_ENDPOINT_H_

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
  struct Options {
    absl::Duration request_timeout = absl::Seconds(5);
    uint32_t max_connections = 64;
  };

  // Binds `address` (HOST:PORT; port 0 picks one) and starts serving;
  // `render` makes the body of every /metrics answer, on the endpoint's
  // thread (it must be thread-safe and outlive the endpoint). Unavailable
  // naming --metrics_listen when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& address, Options options,
      std::function<std::string()> render);
  // Stops serving and closes every connection.
  ~HttpEndpoint();

  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  int port() const { return port_; }

 private:
  HttpEndpoint(int listen_fd, int wake_fd, int port, Options options,
               std::function<std::string()> render);
  void Loop();

  const int listen_fd_;
  const int wake_fd_;
  const int port_;
  const Options options_;
  const std::function<std::string()> render_;
  std::thread thread_;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_HTTP_ENDPOINT_H_
