// client/channel.h: how rankd clients reach a daemon.
//
// Holds the options every rankd client takes (ClientOptions), the parsing of
// a daemon address into a gRPC target (ParseTarget), channel creation with
// rankd's channel settings (64 MiB messages, keepalive on TCP, TLS, bearer
// token), and the conversion of grpc::Status into absl::Status with context.
// Client (client.h) and AdminClient (admin_client.h) are built on it; most
// users need only ClientOptions and ParseTarget from this file.
//
// Depends on gRPC, abseil, common/host_port.h (how a TCP address reads) and
// common/limits.h.
// Thread-safe: every function may be called concurrently; a Connection is
// immutable after OpenConnection returns.

#ifndef RANKD_CLIENT_CHANNEL_H_
#define RANKD_CLIENT_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace rankd {

// The Unix socket a node's daemon listens on unless configured otherwise.
inline constexpr char kDefaultTarget[] = "unix:///run/rankd/rankd.sock";

// Environment variable that overrides kDefaultTarget (see DefaultTarget()).
inline constexpr char kTargetEnvVar[] = "RANKD_TARGET";

// Largest gRPC message a rankd client sends or accepts (64 MiB).
inline constexpr int kMaxMessageBytes = 64 << 20;

// Returns $RANKD_TARGET when set and non-empty, else kDefaultTarget.
std::string DefaultTarget();

// How to reach and authenticate to a rankd daemon. Copyable value type.
struct ClientOptions {
  // Daemon address, one of:
  //   "unix:///abs/path.sock", "unix:/abs/path", "unix:rel/path",
  //   "/abs/path.sock" (a bare absolute path is a Unix socket),
  //   "unix-abstract:name", "host:port", "[v6addr]:port",
  //   "dns:///host:port", "ipv4:addr:port", "ipv6:[addr]:port".
  // Empty means DefaultTarget().
  std::string target;
  // How long Connect waits for the channel to become ready. Must be > 0.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Deadline of every call that does not carry its own timeout (KvSet,
  // KvAdd, Leave, admin reads, ...), and the extra time granted on top of a
  // caller's timeout for calls that wait on the daemon. Must be > 0.
  absl::Duration call_timeout = absl::Seconds(30);
  // Sent as "authorization: Bearer <token>" on every call when non-empty.
  // Must be printable ASCII without spaces. A rank (Client) sends its own
  // rank token on every transport (Client::Connect reads $RANKD_RANK_TOKEN
  // when this is empty); an operator (AdminClient) its operator.token over
  // TCP, none on a Unix socket (docs/operations.md, "Credentials").
  std::string bearer_token;
  // TLS for TCP targets: enabled when tls_ca_file (PEM roots) is set; mutual
  // TLS when tls_cert_file and tls_key_file are set too. Rejected for Unix
  // socket targets, which rely on file permissions.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Name expected in the daemon's certificate when it differs from the host
  // in `target` (e.g. connecting by IP address). Empty = the target's host.
  std::string tls_server_name;
  // HTTP/2 keepalive on TCP targets, so a dead daemon or network is noticed
  // within about keepalive_time + keepalive_timeout even when no call is
  // active. Zero disables keepalive. The daemon must permit pings this
  // frequent (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS <=
  // keepalive_time, GRPC_ARG_HTTP2_MAX_PING_STRIKES = 0), or it closes the
  // connection with "too_many_pings".
  absl::Duration keepalive_time = absl::Seconds(1);
  absl::Duration keepalive_timeout = absl::Seconds(1);
  // On a Unix socket target, Join maps the daemon's shared-memory round
  // slots and all_gather_words rounds use them instead of a gRPC call each
  // (Client::round_path() says which path was taken). False keeps every
  // round on gRPC. Ignored for TCP targets.
  bool shared_memory_rounds = true;
  // On a Unix socket target, Join opens the daemon's key-value channel and
  // the key-value calls (KvSet, KvGet, ...) use it instead of a gRPC call
  // each, with the same answers (Client::kv_path() says which path was
  // taken). False, or the environment variable RANKD_KV_CHANNEL=0, keeps
  // them on gRPC. Ignored for TCP targets.
  bool kv_channel = true;
  // How long a thread waiting for a shared-memory round's answer polls
  // (yielding the CPU) before it sleeps. Unset: 30 us when the process may
  // run on at least as many CPUs as its node has ranks (each rank has a
  // core, as on a GPU node), else zero (polling would take CPU from the
  // ranks and daemon that finish the round). Must not be negative.
  std::optional<absl::Duration> round_spin;
};

// A daemon address, parsed.
struct Target {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  // What gRPC is given, e.g. "unix:/run/rankd/rankd.sock" or "host:50051".
  std::string grpc_target;
  // Filesystem path of a Unix socket (empty for abstract sockets and TCP).
  std::string unix_path;
  // The address as the user wrote it; used in every error message.
  std::string display;
};

// Parses a daemon address (see ClientOptions::target for the forms).
// Returns InvalidArgument, with the accepted forms in the message, for an
// empty address, an unknown scheme, a missing or out-of-range port, an
// unbracketed IPv6 address or a Unix socket path longer than 107 bytes.
absl::StatusOr<Target> ParseTarget(absl::string_view target);

// Rounds a duration up to whole milliseconds for a uint32 *_ms request
// field. Returns InvalidArgument naming `what` when the duration is negative,
// infinite or does not fit in uint32 milliseconds (about 49 days). Zero is
// returned as 0; callers that need a positive value check for it.
absl::StatusOr<uint32_t> ToMillis32(absl::Duration d, absl::string_view what);

// Converts a gRPC status into an absl::Status with the same code and the
// daemon's reason, if it sent one (common/error_reason.h, in the status's
// details). The message becomes "<context>: <grpc message>"; a deadline
// expiring in the client adds how long was waited, and UNAVAILABLE adds a
// hint to check the daemon.
absl::Status FromGrpcStatus(const grpc::Status& status,
                            absl::string_view context,
                            absl::Duration waited = absl::ZeroDuration());

// An open channel to one daemon plus the per-call settings of the options it
// was opened with. Immutable; share it with std::shared_ptr.
class Connection {
 public:
  // Validates `options`, creates the channel and waits until it is READY or
  // options.connect_timeout passes. Errors (InvalidArgument for bad options
  // or unreadable TLS files, Unavailable when the daemon cannot be reached in
  // time) name the target. Never returns null on success.
  static absl::StatusOr<std::shared_ptr<const Connection>> Open(
      const ClientOptions& options);

  // The channel; shared by every stub of this connection.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const Target& target() const { return target_; }
  const ClientOptions& options() const { return options_; }

  // Sets `context`'s deadline to now + timeout (no deadline when timeout is
  // infinite) and adds the bearer token metadata, if any.
  void PrepareContext(grpc::ClientContext* context,
                      absl::Duration timeout) const;

  // "rankd <method> via <target>": the prefix of this connection's errors.
  std::string Context(absl::string_view method) const;

  // Only Open can name a Passkey, so only Open constructs a Connection.
  class Passkey {
   private:
    friend class Connection;
    Passkey() = default;
  };
  Connection(Passkey, ClientOptions options, Target target,
             std::shared_ptr<grpc::Channel> channel);

 private:
  const ClientOptions options_;
  const Target target_;
  const std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace rankd

#endif  // RANKD_CLIENT_CHANNEL_H_
