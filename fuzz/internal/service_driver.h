// ServiceDriver: what the service fuzzers (fuzz/*_service_fuzzer.cc) share.
// It runs a real rankd daemon in the fuzzer's own process (daemon/daemon.h,
// with fresh credentials in a temporary folder) and sends it one call per
// fuzz input through a real gRPC channel, so every byte goes through the
// same parsing, authentication, validation and bookkeeping a network peer
// reaches.
//
// An input is: byte 0 picks the method (modulo the service's method count,
// in descriptor order), byte 1 picks the transport and credential (see
// Credential), and the rest is parsed as that method's request message.
// Bytes that do not parse as the request are skipped (libFuzzer keeps
// mutating). Before sending, the driver rewrites two things so inputs reach
// past the first checks and never block the fuzzer:
//   - every wait (fields named timeout_ms or wait_for_world_ms) is capped at
//     kMaxFuzzWaitMs, and every call has a kCallDeadline;
//   - an incarnation field (incarnation, daemon_incarnation,
//     job_incarnation) whose value is 1 becomes the last value of that name
//     the daemon returned, so a corpus entry can say "the live one".
// When a call has failed or finished the job, the daemon is replaced by a
// fresh one, so later inputs reach a job that can still change.
//
// Depends on the daemon (in-process), common/credentials.h and the protos.
#ifndef RANKD_FUZZ_INTERNAL_SERVICE_DRIVER_H_
#define RANKD_FUZZ_INTERNAL_SERVICE_DRIVER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "daemon/daemon.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"

namespace rankd::fuzz::internal {

// Longest wait an input may ask the daemon for.
inline constexpr uint32_t kMaxFuzzWaitMs = 20;
// Deadline of every call (streams end at it).
inline constexpr absl::Duration kCallDeadline = absl::Milliseconds(150);

// How a call reaches the daemon (byte 1 of an input, modulo kCount).
enum class Credential : uint8_t {
  kUnixSocket = 0,        // the daemon's socket, rank 0's rank token
  kTcpNoToken = 1,        // TCP without a token
  kTcpRankToken = 2,      // TCP with rank 0's rank token
  kTcpOperatorToken = 3,  // TCP with operator.token
  kTcpNodeToken = 4,      // TCP with node 1's node token
  kTcpGarbageToken = 5,   // TCP with a token that is not one
  kCount = 6,
};

struct DriverOptions {
  // Full name of the service the inputs call, e.g. "rankd.v1.Rank".
  std::string service;
  uint32_t nnodes = 1;
  uint32_t world_size = 2;
  // Admin.KvGet is served (--admin_kv_read).
  bool admin_kv_read = false;
};

class ServiceDriver {
 public:
  // Starts the first daemon; aborts the process (the fuzzer cannot run) if
  // it cannot start or `options.service` is not a rankd service. The
  // daemon is stopped and its folders removed when the process exits.
  explicit ServiceDriver(DriverOptions options);
  ~ServiceDriver();

  ServiceDriver(const ServiceDriver&) = delete;
  ServiceDriver& operator=(const ServiceDriver&) = delete;

  // Sends the call `data` describes (see the file comment). Returns 0, or
  // -1 when the bytes are not a request (libFuzzer does not keep them).
  // Aborts the process if the daemon stopped answering Admin.GetJob: that
  // is a finding.
  int Run(const uint8_t* data, size_t size);

  // Stops the daemon and removes the credentials and sockets (idempotent).
  void CleanUp();

 private:
  void StartDaemon();
  void StopDaemon();
  std::shared_ptr<grpc::Channel> ChannelFor(Credential credential);
  // Reads the credentials once into tokens_.
  void LoadTokens();
  void Rewrite(google::protobuf::Message* message) const;
  void Remember(const google::protobuf::Message& message);
  bool JobStillChanges();

  const DriverOptions options_;
  const google::protobuf::ServiceDescriptor* service_ = nullptr;
  std::string folder_;  // temporary: the sockets
  std::string credentials_dir_;
  // The token each Credential sends ("" for none), by Credential value.
  std::array<std::string, static_cast<size_t>(Credential::kCount)> tokens_;
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> unix_channel_;
  std::shared_ptr<grpc::Channel> tcp_channel_;
  // Last incarnation of each field name the daemon returned.
  std::map<std::string, uint64_t> incarnations_;
  int generation_ = 0;
};

}  // namespace rankd::fuzz::internal

#endif  // RANKD_FUZZ_INTERNAL_SERVICE_DRIVER_H_
