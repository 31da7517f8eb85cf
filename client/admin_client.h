// client/admin_client.h: read-only operator access to a rankd daemon.
//
// AdminClient wraps the rankd.v1.Admin service (job status, topology,
// members, key-value reads, the event stream) and the standard
// grpc.health.v1 health check, for rankctl and for tests and tools. Any
// daemon answers from its own view; the coordinator's is authoritative.
//
// Depends only on //client:channel, the generated rankd.v1 API, gRPC and
// protobuf (the health check is encoded by hand; see health_codec.h), and
// abseil.
//
// Thread-safe: every method may be called concurrently. Errors are
// absl::Status values with the daemon's gRPC code and a message that starts
// with "rankd <Method> via <target>:".

#ifndef RANKD_CLIENT_ADMIN_CLIENT_H_
#define RANKD_CLIENT_ADMIN_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "rankd/v1/admin.pb.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

namespace internal {
class AdminStub;
}  // namespace internal

class AdminClient {
 public:
  // Connects to the daemon at options.target (empty = DefaultTarget()) and
  // waits until the connection is ready, at most options.connect_timeout.
  // Returns InvalidArgument for bad options, Unavailable when the daemon
  // cannot be reached in time; both name the target.
  static absl::StatusOr<std::unique_ptr<AdminClient>> Connect(
      const ClientOptions& options);

  ~AdminClient();
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;

  // The daemon address, as given (or defaulted) in ClientOptions.
  const std::string& target() const;

  // The job's state as seen by the daemon. Deadline: options.call_timeout.
  absl::StatusOr<v1::JobStatus> GetJob() const;
  // Layout, groups and nodes. Deadline: options.call_timeout.
  absl::StatusOr<v1::Topology> GetTopology() const;
  // Every member's and node's state. Deadline: options.call_timeout.
  absl::StatusOr<v1::MemberList> ListMembers() const;
  // One key of the job's key-value broker, without waiting; NotFound when
  // absent. Deadline: options.call_timeout.
  absl::StatusOr<std::string> KvGet(absl::string_view key) const;

  // Streams job events with a sequence number above `after_sequence`
  // (replayed first), then new ones as they happen, calling `on_event` for
  // each on this thread. Stops when `on_event` returns false, when `timeout`
  // passes (absl::InfiniteDuration() = never) or when the daemon ends the
  // stream; all three return OK. Returns InvalidArgument for a zero or
  // negative timeout, else the stream's error.
  absl::Status WatchEvents(
      uint64_t after_sequence,
      const std::function<bool(const v1::JobEvent&)>& on_event,
      absl::Duration timeout) const;

  // Asks grpc.health.v1.Health/Check about `service` ("" = the whole
  // server). Returns the serving status name: "SERVING", "NOT_SERVING",
  // "UNKNOWN" or "SERVICE_UNKNOWN". NotFound when the daemon does not know
  // `service`; other errors as returned by the call. Deadline:
  // options.call_timeout.
  absl::StatusOr<std::string> Health(absl::string_view service = "") const;

 private:
  AdminClient(std::shared_ptr<const Connection> connection,
              std::unique_ptr<internal::AdminStub> stub);

  const std::shared_ptr<const Connection> conn_;
  const std::unique_ptr<internal::AdminStub> stub_;
};

}  // namespace rankd

#endif  // RANKD_CLIENT_ADMIN_CLIENT_H_
