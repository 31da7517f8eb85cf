// RemoteCoordinatorLink: a non-coordinating daemon's link to the
// coordinator's Peer service over gRPC (see coordinator_link.h for the
// contract). Heartbeats every heartbeat interval; reports the coordinator
// lost when no heartbeat was answered for the heartbeat timeout or the
// event stream breaks. Once registered, rounds go over the coordinator's
// round link (round_link.h) when it offers one and it is open, else over
// one long-lived Peer.Rounds stream (a message each way per round, no call
// set-up); before that, or once both have ended, over unary
// ContributeWords. A round the coordinator has not answered by its timeout
// plus a margin fails with DeadlineExceeded (checked at each heartbeat).
// Forwarded key-value calls likewise take the round link while it is open
// and a unary Peer call otherwise, answering the same either way (a call
// in flight when the link ends fails with Unavailable, never re-sent: it
// may have been applied).
// Depends on gRPC, the protos, daemon/security and the round link.
#ifndef RANKD_DAEMON_REMOTE_COORDINATOR_H_
#define RANKD_DAEMON_REMOTE_COORDINATOR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/deadline_timer.h"
#include "daemon/node/coordinator_link.h"
#include "daemon/node/round_link.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/peer.grpc.pb.h"

namespace rankd {

class RemoteCoordinatorLink : public CoordinatorLink {
 public:
  // `timer` must outlive the link. `bearer_token` is sent on every call.
  RemoteCoordinatorLink(std::string address,
                        std::shared_ptr<grpc::ChannelCredentials> credentials,
                        std::string bearer_token,
                        absl::Duration heartbeat_interval,
                        absl::Duration heartbeat_timeout, DeadlineTimer* timer);
  ~RemoteCoordinatorLink() override;

  void Start(const v1::RegisterNodeRequest& request,
             absl::Time register_deadline, Listener* listener,
             Reply<v1::RegisterNodeResponse> registered) override;
  void JoinRank(const v1::JoinRankRequest& request,
                Reply<v1::JoinRankResponse> reply) override;
  void ReleaseRank(const v1::ReleaseRankRequest& request,
                   Reply<v1::ReleaseRankResponse> reply) override;
  void ContributeWords(const v1::ContributeWordsRequest& request,
                       Reply<v1::AllGatherWordsResponse> reply) override;
  void KvSet(const v1::KvSetRequest& request,
             Reply<v1::KvSetResponse> reply) override;
  void KvGet(const v1::KvGetRequest& request, Reply<v1::KvGetResponse> reply,
             const CancellationRef& cancellation) override;
  void KvAdd(const v1::KvAddRequest& request,
             Reply<v1::KvAddResponse> reply) override;
  void KvDelete(const v1::KvDeleteRequest& request,
                Reply<v1::KvDeleteResponse> reply) override;
  void KvCount(const v1::KvCountRequest& request,
               Reply<v1::KvCountResponse> reply) override;
  void LeaveNode(const v1::LeaveNodeRequest& request,
                 Reply<v1::LeaveNodeResponse> reply) override;
  void Stop() override;
  std::string coordinator_address() const override { return address_; }

  // Runs with the outcome of every heartbeat sent (for metrics). Set before
  // Start(); must not block.
  void set_heartbeat_observer(std::function<void(absl::StatusCode)> observer) {
    heartbeat_observer_ = std::move(observer);
  }

 private:
  class EventStream;
  class RoundStream;

  // Runs one unary call with `timeout`; `invoke` starts it on the stub.
  // A cancelled `cancellation` (may be null) cancels the call.
  template <typename Request, typename Response, typename Invoke>
  void Call(const Request& request, absl::Duration timeout,
            Reply<Response> reply, Invoke invoke,
            const CancellationRef& cancellation = nullptr);
  // One registration attempt; a transient failure tries again after
  // `retry` (doubling up to kMaxRegisterRetry), until `deadline`.
  void TryRegister(std::shared_ptr<v1::RegisterNodeRequest> request,
                   absl::Time deadline, absl::Duration retry,
                   Reply<v1::RegisterNodeResponse> done);
  // Starts the streams, the round link and the heartbeats of a registered
  // node; false (nothing started) once Stop ran.
  bool OnRegistered(const v1::RegisterNodeRequest& request,
                    const v1::RegisterNodeResponse& response);
  void Beat();
  // One heartbeat bounded by `timeout`; records its outcome, then `then`.
  void SendHeartbeat(const v1::HeartbeatRequest& request,
                     absl::Duration timeout,
                     std::function<void(const absl::Status&)> then);
  void OnStreamDone(const grpc::Status& status);
  // Fences this daemon when the event stream says, after this daemon's own
  // registration, that its node was declared lost or registered by another
  // daemon: the same verdict a heartbeat's refusal brings, but it does not
  // race this daemon's own silence timer when it runs again after a pause.
  void WatchForFencing(const v1::JobEvent& event);
  // Tells the listener once: OnFenced when `fenced`, else
  // OnCoordinatorLost.
  void ReportLost(const std::string& reason, bool fenced = false);
  // A refusal that fences this daemon for good (kDaemonFenced).
  static bool IsFencing(const absl::Status& status);
  absl::Status Annotate(const grpc::Status& status) const;
  // The coordinator's error as a forwarded call's caller sees it, whichever
  // path it took: a transient code (Unavailable, DeadlineExceeded) names
  // the coordinator at `address`; any other is the coordinator's own.
  static absl::Status AnnotateCoordinatorError(absl::string_view address,
                                               const absl::Status& status);
  // Forwards a key-value call over the round link while it is open (the
  // reply's `response` field, of case `response_case`, is the answer);
  // false, leaving `reply` untouched and nothing sent, when it is not (the
  // caller then makes the unary Peer call). `cancellation` (may be null)
  // releases the coordinator's wait.
  template <typename Response>
  bool ForwardOverLink(v1::KvLinkRequest request, absl::Duration timeout,
                       Reply<Response>& reply,
                       Response* (v1::KvLinkReply::*response)(),
                       v1::KvLinkReply::ResponseCase response_case,
                       const CancellationRef& cancellation);

  const std::string address_;
  const std::string bearer_token_;
  const absl::Duration heartbeat_interval_;
  const absl::Duration heartbeat_timeout_;
  DeadlineTimer* const timer_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Peer::Stub> stub_;
  std::function<void(absl::StatusCode)> heartbeat_observer_;

  absl::Mutex mu_;
  Listener* listener_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool lost_ ABSL_GUARDED_BY(mu_) = false;
  // Reported fenced (ReportLost): after lost_, the one change still told.
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  v1::NodeRef node_ ABSL_GUARDED_BY(mu_);
  // The event stream has shown this daemon's own NODE_REGISTERED.
  bool own_registration_seen_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_heartbeat_ok_ ABSL_GUARDED_BY(mu_);
  std::string last_heartbeat_error_ ABSL_GUARDED_BY(mu_);
  DeadlineTimer::TimerId heartbeat_timer_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<EventStream> stream_ ABSL_GUARDED_BY(mu_);
  // Shared: a heartbeat's overdue sweep may still hold it while Stop ends it.
  std::shared_ptr<RoundStream> rounds_ ABSL_GUARDED_BY(mu_);
  // The round link, when the coordinator offers one; rounds prefer it.
  std::shared_ptr<RoundLink> round_link_ ABSL_GUARDED_BY(mu_);
  uint64_t next_call_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, grpc::ClientContext*> inflight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rankd

#endif  // RANKD_DAEMON_REMOTE_COORDINATOR_H_
