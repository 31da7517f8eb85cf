// RawH2: a bare HTTP/2 client for the network fault drills
// (tests/network_flood_drill_test.cc). It speaks just enough HTTP/2 to do
// what a hostile client does to a gRPC server and a real client never
// would: open many streams whose request never ends, declare a gRPC message
// of 64 MiB and send only part of it, hold connections idle. It honours the
// server's flow-control windows (a server would otherwise close the
// connection at once), answers its SETTINGS and PINGs, and records how each
// stream ended (RST_STREAM, trailers, GOAWAY). Non-blocking: one thread
// drives any number of connections through Pump(). Loopback targets only.
// Depends on POSIX sockets and absl.
#ifndef RANKD_TESTS_HARNESS_RAW_H2_H_
#define RANKD_TESTS_HARNESS_RAW_H2_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace rankd::testing {

class RawH2Connection {
 public:
  // How a stream stands.
  struct Stream {
    // Message bytes the server's windows let through so far (after the
    // 5-byte gRPC prefix).
    int64_t sent = 0;
    // The gRPC message size the request declared.
    uint32_t declared = 0;
    // How many message bytes to send at most (the rest is never sent).
    int64_t budget = 0;
    int64_t window = 0;       // the server's window for this stream
    bool reset = false;       // RST_STREAM from the server
    uint32_t reset_code = 0;  // its HTTP/2 error code
    // The server ended it (HEADERS with END_STREAM: trailers, which a
    // gRPC server sends for every status it answers with).
    bool closed = false;
  };

  // Connects to 127.0.0.1:`port` and sends the connection preface and
  // SETTINGS. Error when the connection is refused or not made in
  // `timeout`.
  static absl::StatusOr<std::unique_ptr<RawH2Connection>> Open(
      int port, absl::Duration timeout = absl::Seconds(5));
  ~RawH2Connection();

  // Opens a stream calling `path` (e.g. "/rankd.v1.Peer/KvSet") with
  // `metadata` (lower-case names) and a gRPC message declared as
  // `declared` bytes, of which at most `budget` are ever sent (as the
  // server's windows allow, on each Pump). Returns the stream id. Streams
  // beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS are still sent: the
  // server refuses them (RST_STREAM REFUSED_STREAM), as it must.
  uint32_t StartCall(const std::string& path, uint32_t declared, int64_t budget,
                     const std::map<std::string, std::string>& metadata = {});

  // Reads what the server sent and writes what the windows allow, without
  // blocking. False once the connection is closed (by either side).
  bool Pump();

  // Closes the TCP connection (abruptly: no GOAWAY).
  void Close();

  bool open() const { return fd_ >= 0; }
  bool goaway() const { return goaway_; }
  uint32_t goaway_code() const { return goaway_code_; }
  // The server's SETTINGS_MAX_CONCURRENT_STREAMS (0: not yet announced).
  uint32_t max_concurrent_streams() const { return max_streams_; }
  const std::map<uint32_t, Stream>& streams() const { return streams_; }
  // Streams neither reset nor ended by the server.
  int live_streams() const;
  // Message bytes sent on every stream together.
  int64_t bytes_sent() const;

 private:
  explicit RawH2Connection(int fd);
  void Queue(uint8_t type, uint8_t flags, uint32_t stream,
             const std::string& payload);
  bool Flush();
  bool ReadFrames();
  void HandleFrame(uint8_t type, uint8_t flags, uint32_t stream,
                   const std::string& payload);
  void SendData();

  int fd_ = -1;
  std::string out_;
  std::string in_;
  uint32_t next_stream_ = 1;
  int64_t conn_window_ = 65535;
  int64_t initial_stream_window_ = 65535;
  uint32_t max_streams_ = 0;
  bool goaway_ = false;
  uint32_t goaway_code_ = 0;
  std::map<uint32_t, Stream> streams_;
};

// Opens a TCP connection to 127.0.0.1:`port` and returns its descriptor
// (or -1); the caller closes it. For idle and half-sent connections.
int ConnectLoopback(int port, absl::Duration timeout = absl::Seconds(5));

}  // namespace rankd::testing

#endif  // RANKD_TESTS_HARNESS_RAW_H2_H_
