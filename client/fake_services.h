// client/fake_services.h: in-process stand-ins for a rankd daemon's Rank
// and Admin services, for the client's unit tests (testonly).
//
// They implement just enough behaviour to exercise the client: a one-node
// job of a configurable world size whose other ranks all contribute the
// same frame as the caller, an in-memory key-value map, a controllable event
// stream, and knobs to hold rounds, fail joins or drop connections. They
// are not a model of the real daemon's semantics.
//
// Depends only on the generated rankd.v1 API, gRPC and abseil.

#ifndef RANKD_CLIENT_FAKE_SERVICES_H_
#define RANKD_CLIENT_FAKE_SERVICES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server.h"
#include "rankd/v1/admin.grpc.pb.h"
#include "rankd/v1/rank.grpc.pb.h"

namespace rankd::testing {

class FakeRankService final : public v1::Rank::Service {
 public:
  // World size reported in descriptors; rounds answer with this many copies
  // of the caller's frame.
  void SetWorldSize(uint32_t world_size);
  // Join answers `status` (when not OK) instead of succeeding.
  void SetJoinError(grpc::Status status);
  // The epoch later joins report in their descriptor (default 0: none).
  void SetEpoch(uint64_t epoch);
  // While true, AllGatherWords blocks until released, cancelled or its
  // timeout_ms passes (then DEADLINE_EXCEEDED naming rank 1 as missing).
  void HoldRounds(bool hold);
  // Sends `event` on every open Watch stream (and to later ones).
  void PushEvent(const v1::JobEvent& event);
  // Ends every open Watch stream with OK, as a daemon shutting it might.
  void CloseWatchStreams();

  // Observations.
  v1::JoinRequest last_join() const;
  int joins() const;
  std::vector<v1::AllGatherWordsRequest> rounds() const;
  int cancelled_rounds() const;
  int leaves() const;
  int open_watch_streams() const;
  int kv_calls() const;
  // The "authorization" metadata of the last call ("" when absent).
  std::string last_authorization() const;
  // Blocks until `n` rounds arrived or `timeout` passes; returns success.
  bool WaitForRounds(size_t n, absl::Duration timeout) const;
  bool WaitForOpenWatchStreams(int n, absl::Duration timeout) const;
  // Whether, when the fast paths were asked for (OpenRoundSlots, then
  // OpenKvChannel, which the fake does not serve), the rank's Watch stream
  // was open (each waits up to 5 s for it): the daemon's liveness lease
  // runs from the join's answer until then. nullopt before any was asked.
  std::optional<bool> watch_open_at_fast_path_opens() const;

  grpc::Status Join(grpc::ServerContext* context,
                    const v1::JoinRequest* request,
                    v1::JoinResponse* response) override;
  grpc::Status AllGatherWords(grpc::ServerContext* context,
                              const v1::AllGatherWordsRequest* request,
                              v1::AllGatherWordsResponse* response) override;
  grpc::Status KvSet(grpc::ServerContext* context,
                     const v1::KvSetRequest* request,
                     v1::KvSetResponse* response) override;
  grpc::Status KvGet(grpc::ServerContext* context,
                     const v1::KvGetRequest* request,
                     v1::KvGetResponse* response) override;
  grpc::Status KvAdd(grpc::ServerContext* context,
                     const v1::KvAddRequest* request,
                     v1::KvAddResponse* response) override;
  grpc::Status KvDelete(grpc::ServerContext* context,
                        const v1::KvDeleteRequest* request,
                        v1::KvDeleteResponse* response) override;
  grpc::Status KvCount(grpc::ServerContext* context,
                       const v1::KvCountRequest* request,
                       v1::KvCountResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status Leave(grpc::ServerContext* context,
                     const v1::LeaveRequest* request,
                     v1::LeaveResponse* response) override;
  grpc::Status OpenRoundSlots(grpc::ServerContext* context,
                              const v1::OpenRoundSlotsRequest* request,
                              v1::OpenRoundSlotsResponse* response) override;
  grpc::Status OpenKvChannel(grpc::ServerContext* context,
                             const v1::OpenKvChannelRequest* request,
                             v1::OpenKvChannelResponse* response) override;

 private:
  void Record(grpc::ServerContext* context) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fast path was asked for: notes whether a Watch stream is open by
  // then (waiting up to 5 s for one).
  void NoteFastPathOpen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  grpc::Status CheckMember(const v1::MemberRef& member) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  uint32_t world_size_ ABSL_GUARDED_BY(mu_) = 1;
  grpc::Status join_error_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int joins_ ABSL_GUARDED_BY(mu_) = 0;
  bool hold_rounds_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(mu_);
  int watch_generation_ ABSL_GUARDED_BY(mu_) = 0;
  v1::JoinRequest last_join_ ABSL_GUARDED_BY(mu_);
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::AllGatherWordsRequest> rounds_ ABSL_GUARDED_BY(mu_);
  int cancelled_rounds_ ABSL_GUARDED_BY(mu_) = 0;
  int leaves_ ABSL_GUARDED_BY(mu_) = 0;
  int open_watch_streams_ ABSL_GUARDED_BY(mu_) = 0;
  int kv_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_authorization_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  std::optional<bool> watch_open_at_fast_path_opens_ ABSL_GUARDED_BY(mu_);
};

class FakeAdminService final : public v1::Admin::Service {
 public:
  void SetJob(const v1::JobStatus& job);
  void SetTopology(const v1::Topology& topology);
  void SetMembers(const v1::MemberList& members);
  void SetKv(const std::string& key, const std::string& value);
  void PushEvent(const v1::JobEvent& event);

  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request,
                      v1::JobStatus* response) override;
  grpc::Status GetTopology(grpc::ServerContext* context,
                           const v1::GetTopologyRequest* request,
                           v1::Topology* response) override;
  grpc::Status ListMembers(grpc::ServerContext* context,
                           const v1::ListMembersRequest* request,
                           v1::MemberList* response) override;
  grpc::Status KvGet(grpc::ServerContext* context,
                     const v1::AdminKvGetRequest* request,
                     v1::AdminKvGetResponse* response) override;
  grpc::Status WatchEvents(grpc::ServerContext* context,
                           const v1::WatchEventsRequest* request,
                           grpc::ServerWriter<v1::JobEvent>* writer) override;

 private:
  mutable absl::Mutex mu_;
  v1::JobStatus job_ ABSL_GUARDED_BY(mu_);
  v1::Topology topology_ ABSL_GUARDED_BY(mu_);
  v1::MemberList members_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JobEvent> events_ ABSL_GUARDED_BY(mu_);
};

// A gRPC server running both fakes and the standard health service.
class FakeDaemon {
 public:
  enum class Transport { kUnix, kTcp };

  // Starts listening on a fresh Unix socket under /tmp, or on 127.0.0.1 with
  // a free port. With `permit_keepalive` the server accepts keepalive pings
  // every 500 ms without calls in flight, as the real daemon must; without
  // it the server keeps gRPC's default policy (pings at most every 5 min).
  static absl::StatusOr<std::unique_ptr<FakeDaemon>> Start(
      Transport transport = Transport::kUnix, bool permit_keepalive = true);
  ~FakeDaemon();

  // Address for ClientOptions::target.
  const std::string& target() const { return target_; }
  FakeRankService& rank() { return rank_; }
  FakeAdminService& admin() { return admin_; }
  grpc::Server& server() { return *server_; }

  // Stops the server, cancelling calls in flight. Idempotent.
  void Shutdown();

 private:
  FakeDaemon() = default;

  std::string target_;
  std::string socket_path_;
  FakeRankService rank_;
  FakeAdminService admin_;
  std::unique_ptr<grpc::Server> server_;
  bool shut_down_ = false;
};

}  // namespace rankd::testing

#endif  // RANKD_CLIENT_FAKE_SERVICES_H_
