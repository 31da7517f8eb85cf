// The daemon's gRPC services: Rank (for serving processes), Peer (between
// daemons; only the coordinator accepts calls) and Admin (for operators).
// Each is a thin adapter from gRPC's callback API to NodeAgent and
// Coordinator: it authenticates the caller's role
// (daemon/transport/security.h), holds an authenticated node to acting as
// itself, translates statuses, and never blocks a gRPC thread. Depends on the
// daemon core, NodeAgent, daemon/security and gRPC.
#ifndef RANKD_DAEMON_SERVICES_H_
#define RANKD_DAEMON_SERVICES_H_

#include <atomic>
#include <optional>
#include <string>

#include "daemon/coordinator/coordinator.h"
#include "daemon/node/node_agent.h"
#include "daemon/node/round_slot_server.h"
#include "daemon/transport/event_stream_reactor.h"
#include "daemon/transport/kv_socket.h"
#include "daemon/transport/local_socket.h"
#include "daemon/transport/round_link_server.h"
#include "daemon/transport/round_stream_reactor.h"
#include "daemon/transport/security.h"
#include "rankd/v1/admin.grpc.pb.h"
#include "rankd/v1/peer.grpc.pb.h"
#include "rankd/v1/rank.grpc.pb.h"

namespace rankd {

// Every call that names a rank (Join: the rank it joins as) must carry that
// rank's own token (Authenticator::AuthenticateRank) and come on the
// connection the rank joined on (NodeAgent::CheckCaller); otherwise
// UNAUTHENTICATED or PERMISSION_DENIED naming the rank and the rule, before
// anything else is looked at. Watch replays and pushes job events with
// every other rank's incarnation and every daemon's incarnation removed:
// a rank sees its own incarnation only.
class RankService final : public v1::Rank::CallbackService {
 public:
  // `agent` and `auth` must outlive the service; so must `round_slots`,
  // which is null when the daemon has no Unix socket (OpenRoundSlots then
  // fails with FailedPrecondition and ranks use gRPC for their rounds),
  // and `local_socket` (null without a Unix socket), which names the
  // process behind each of its connections. With `issue_rank_tokens`,
  // IssueRankTokens hands this node's rank tokens to its first caller on
  // the Unix socket.
  RankService(NodeAgent* agent, const Authenticator* auth,
              RoundSlotServer* round_slots,
              const LocalSocket* local_socket = nullptr,
              bool issue_rank_tokens = false);

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* GetDescriptor(
      grpc::CallbackServerContext* context,
      const v1::GetDescriptorRequest* request,
      v1::SessionDescriptor* response) override;
  grpc::ServerUnaryReactor* AllGatherWords(
      grpc::CallbackServerContext* context,
      const v1::AllGatherWordsRequest* request,
      v1::AllGatherWordsResponse* response) override;
  grpc::ServerUnaryReactor* OpenRoundSlots(
      grpc::CallbackServerContext* context,
      const v1::OpenRoundSlotsRequest* request,
      v1::OpenRoundSlotsResponse* response) override;
  // A joined member on the Unix socket gets a ticket for the key-value
  // channel (kv_socket.h); FailedPrecondition elsewhere, or when the
  // daemon offers none (set_kv_socket).
  grpc::ServerUnaryReactor* OpenKvChannel(
      grpc::CallbackServerContext* context,
      const v1::OpenKvChannelRequest* request,
      v1::OpenKvChannelResponse* response) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const v1::KvSetRequest* request,
                                  v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const v1::KvGetRequest* request,
                                  v1::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* KvAdd(grpc::CallbackServerContext* context,
                                  const v1::KvAddRequest* request,
                                  v1::KvAddResponse* response) override;
  grpc::ServerUnaryReactor* KvDelete(grpc::CallbackServerContext* context,
                                     const v1::KvDeleteRequest* request,
                                     v1::KvDeleteResponse* response) override;
  grpc::ServerUnaryReactor* KvCount(grpc::CallbackServerContext* context,
                                    const v1::KvCountRequest* request,
                                    v1::KvCountResponse* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* Watch(
      grpc::CallbackServerContext* context,
      const v1::WatchRequest* request) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* IssueRankTokens(
      grpc::CallbackServerContext* context,
      const v1::IssueRankTokensRequest* request,
      v1::IssueRankTokensResponse* response) override;

  // The key-value channel OpenKvChannel hands tickets for (null: none).
  // Set before the service serves; it must outlive the service.
  void set_kv_socket(KvSocket* kv_socket) { kv_socket_ = kv_socket; }

  // What a Watch stream of rank `own_rank` shows of `event`: no daemon
  // incarnation, and no incarnation of another rank.
  static v1::JobEvent ScrubForRank(const v1::JobEvent& event,
                                   uint32_t own_rank);

 private:
  // The connection a call came on (NodeAgent::Caller).
  NodeAgent::Caller CallerOf(const grpc::CallbackServerContext* context) const;
  // OK when the call may act for `rank`: its token names `rank`, and `rank`
  // is bound to no other connection.
  absl::Status Admit(const grpc::CallbackServerContext* context,
                     uint32_t rank) const;

  NodeAgent* const agent_;
  const Authenticator* const auth_;
  RoundSlotServer* const round_slots_;
  const LocalSocket* const local_socket_;
  const bool issue_rank_tokens_;
  KvSocket* kv_socket_ = nullptr;
  // Who got this node's rank tokens (IssueRankTokens hands them out once).
  absl::Mutex issued_mu_;
  std::optional<NodeAgent::Caller> issued_to_ ABSL_GUARDED_BY(issued_mu_);
};

// The Peer service's callback API with Subscribe and Rounds taken as raw
// bytes, so that an event or a round's answer is encoded once for every
// node (event_stream_reactor.h, round_stream_reactor.h).
// The same chain as v1::Peer::CallbackService, in the generated order.
using PeerCallbackService = v1::Peer::WithCallbackMethod_RegisterNode<
    v1::Peer::WithCallbackMethod_Heartbeat<
        v1::Peer::WithRawCallbackMethod_Subscribe<
            v1::Peer::WithCallbackMethod_LeaveNode<
                v1::Peer::WithCallbackMethod_JoinRank<
                    v1::Peer::WithCallbackMethod_ReleaseRank<
                        v1::Peer::WithCallbackMethod_ContributeWords<
                            v1::Peer::WithRawCallbackMethod_Rounds<
                                v1::Peer::WithCallbackMethod_KvSet<
                                    v1::Peer::WithCallbackMethod_KvGet<
                                        v1::Peer::WithCallbackMethod_KvAdd<
                                            v1::Peer::WithCallbackMethod_KvDelete<
                                                v1::Peer::
                                                    WithCallbackMethod_KvCount<
                                                        v1::Peer::
                                                            Service>>>>>>>>>>>>>;

class PeerService final : public PeerCallbackService {
 public:
  // `coordinator` is null on a daemon that does not coordinate; every call
  // then fails with FailedPrecondition naming `coordinator_address`. `auth`
  // must outlive the service. A caller authenticated as node N may name
  // only node N in its requests, and only node N's ranks; `own_node` (this
  // daemon's node, which reaches its coordinator in-process) is refused.
  // `formation_timer` (may be null) lets the nodes' event streams hold
  // formation events briefly (event_stream_reactor.h); it must outlive the
  // server.
  PeerService(Coordinator* coordinator, std::string coordinator_address,
              uint32_t own_node, const Authenticator* auth,
              DeadlineTimer* formation_timer = nullptr);

  grpc::ServerUnaryReactor* RegisterNode(
      grpc::CallbackServerContext* context,
      const v1::RegisterNodeRequest* request,
      v1::RegisterNodeResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  // A SubscribeRequest in; JobEventBatch messages out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* LeaveNode(grpc::CallbackServerContext* context,
                                      const v1::LeaveNodeRequest* request,
                                      v1::LeaveNodeResponse* response) override;
  grpc::ServerUnaryReactor* JoinRank(grpc::CallbackServerContext* context,
                                     const v1::JoinRankRequest* request,
                                     v1::JoinRankResponse* response) override;
  grpc::ServerUnaryReactor* ReleaseRank(
      grpc::CallbackServerContext* context,
      const v1::ReleaseRankRequest* request,
      v1::ReleaseRankResponse* response) override;
  grpc::ServerUnaryReactor* ContributeWords(
      grpc::CallbackServerContext* context,
      const v1::ContributeWordsRequest* request,
      v1::AllGatherWordsResponse* response) override;
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* context,
                                  const v1::KvSetRequest* request,
                                  v1::KvSetResponse* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const v1::KvGetRequest* request,
                                  v1::KvGetResponse* response) override;
  grpc::ServerUnaryReactor* KvAdd(grpc::CallbackServerContext* context,
                                  const v1::KvAddRequest* request,
                                  v1::KvAddResponse* response) override;
  grpc::ServerUnaryReactor* KvDelete(grpc::CallbackServerContext* context,
                                     const v1::KvDeleteRequest* request,
                                     v1::KvDeleteResponse* response) override;
  grpc::ServerUnaryReactor* KvCount(grpc::CallbackServerContext* context,
                                    const v1::KvCountRequest* request,
                                    v1::KvCountResponse* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Rounds(
      grpc::CallbackServerContext* context) override;

  // What the coordinator's round link server runs: the same checks as the
  // Rounds stream (a node of this job, not this daemon's own, proving its
  // token; every contribution naming that node) and the same coordinator;
  // for forwarded key-value calls, those of the unary Kv calls (the rank
  // must be the link's node's). `observe` is left unset (the daemon sets
  // it). The service must outlive the server.
  RoundLinkServer::Handlers RoundLinkHandlers();

  // The round link port RegisterNode offers (0: none). Set before nodes
  // register.
  void set_round_link_port(int port) { round_link_port_.store(port); }

 private:
  // Runs a key-value call forwarded over a round link admitted as node
  // `caller`: the checks of the Peer service's unary call (CheckClaims for
  // the request's rank), then the coordinator's call; `done` gets what the
  // unary call would answer. Never blocks (a waiting get waits in the
  // coordinator, released by `cancellation`).
  void RunKvLinkCall(std::optional<uint32_t> caller,
                     const v1::KvLinkRequest& request,
                     const CancellationRef& cancellation,
                     RoundLinkServer::KvDone done) const;

  // Authenticates the caller as a node (FailedPrecondition first when
  // this daemon does not coordinate) and checks that it is not this
  // daemon's own node, that it names itself (`claimed_node`) and that
  // `rank` is one of its ranks; each check only when given.
  absl::Status Authorize(grpc::CallbackServerContext* context,
                         std::optional<uint32_t> claimed_node,
                         std::optional<uint32_t> rank) const;
  // Authorize's two halves. AuthenticateCaller: the caller's node (nullopt
  // when authentication is off), or the error. CheckClaims: that `caller`
  // may name `claimed_node` and act for `rank` (each when given).
  absl::StatusOr<std::optional<uint32_t>> AuthenticateCaller(
      grpc::CallbackServerContext* context) const;
  absl::Status CheckClaims(std::optional<uint32_t> caller,
                           std::optional<uint32_t> claimed_node,
                           std::optional<uint32_t> rank) const;
  absl::Status Check(grpc::CallbackServerContext* context,
                     uint32_t claimed_node) const;
  absl::Status CheckForRank(grpc::CallbackServerContext* context,
                            uint32_t rank) const;

  Coordinator* const coordinator_;
  const std::string coordinator_address_;
  const uint32_t own_node_;
  const Authenticator* const auth_;
  DeadlineTimer* const formation_timer_;
  // Shared by every node's event stream.
  EventEncoder event_encoder_;
  std::atomic<int> round_link_port_{0};
};

class AdminService final : public v1::Admin::CallbackService {
 public:
  // `coordinator` may be null (answers come from the agent's replica).
  // Read-only: answers carry no incarnation, so nothing Admin returns works
  // as a credential for the Peer or Rank service. Serves at most
  // `max_streams` WatchEvents streams at once (--max_operator_streams).
  AdminService(NodeAgent* agent, Coordinator* coordinator,
               const Authenticator* auth, uint32_t max_streams);

  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request,
                                   v1::JobStatus* response) override;
  grpc::ServerUnaryReactor* GetTopology(grpc::CallbackServerContext* context,
                                        const v1::GetTopologyRequest* request,
                                        v1::Topology* response) override;
  grpc::ServerUnaryReactor* ListMembers(grpc::CallbackServerContext* context,
                                        const v1::ListMembersRequest* request,
                                        v1::MemberList* response) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* context,
                                  const v1::AdminKvGetRequest* request,
                                  v1::AdminKvGetResponse* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchEvents(
      grpc::CallbackServerContext* context,
      const v1::WatchEventsRequest* request) override;

 private:
  NodeAgent* const agent_;
  Coordinator* const coordinator_;
  const Authenticator* const auth_;
  const uint32_t max_streams_;
  // WatchEvents streams open (at most max_streams_).
  std::atomic<uint32_t> open_streams_{0};
};

}  // namespace rankd

#endif  // RANKD_DAEMON_SERVICES_H_
