#include "daemon/transport/services.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "daemon/coordinator/kv_store.h"
#include "daemon/request_limits.h"
#include "daemon/transport/event_stream_reactor.h"
#include "daemon/transport/round_link_protocol.h"
#include "daemon/transport/security.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace rankd {
namespace {

// Finishes `reactor` with `result`, copying a value into `response`.
template <typename T>
Reply<T> FinishInto(grpc::ServerUnaryReactor* reactor, T* response) {
  return [reactor, response](absl::StatusOr<T> result) {
    if (result.ok()) *response = *std::move(result);
    reactor->Finish(ToGrpc(result.status()));
  };
}

// Unary handler boilerplate: authenticate, then hand the request to `run`
// with a reply that finishes the call.
template <typename T, typename Run>
grpc::ServerUnaryReactor* Handle(grpc::CallbackServerContext* context,
                                 absl::Status auth, T* response, Run run) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!auth.ok()) {
    reactor->Finish(ToGrpc(auth));
    return reactor;
  }
  run(FinishInto(reactor, response));
  return reactor;
}

// A unary call whose client can cancel it: the reactor cancels the call's
// CallCancellation, so the wait it started (a blocking key-value get) is
// released at once rather than at its deadline. gRPC owns the reactor from
// return until OnDone, where it deletes itself.
class CancellableReactor final : public grpc::ServerUnaryReactor {
 public:
  static CancellableReactor* Create() { return new CancellableReactor(); }

  const CancellationRef& cancellation() const { return cancellation_; }

  void OnCancel() override { cancellation_->Cancel(); }
  void OnDone() override { delete this; }

 private:
  CancellableReactor() : cancellation_(std::make_shared<CallCancellation>()) {}

  const CancellationRef cancellation_;
};

// Handle for a call that waits: `run` gets the reply and the call's
// cancellation.
template <typename T, typename Run>
grpc::ServerUnaryReactor* HandleWait(absl::Status auth, T* response, Run run) {
  CancellableReactor* reactor = CancellableReactor::Create();
  if (!auth.ok()) {
    reactor->Finish(ToGrpc(auth));
    return reactor;
  }
  // A copy: whoever parks a waiter keeps it, whatever becomes of the
  // reactor once the call finishes.
  CancellationRef cancellation = reactor->cancellation();
  run(FinishInto(static_cast<grpc::ServerUnaryReactor*>(reactor), response),
      cancellation);
  return reactor;
}

}  // namespace

// ---------------------------------------------------------------- Rank

RankService::RankService(NodeAgent* agent, const Authenticator* auth,
                         RoundSlotServer* round_slots,
                         const LocalSocket* local_socket,
                         bool issue_rank_tokens)
    : agent_(agent),
      auth_(auth),
      round_slots_(round_slots),
      local_socket_(local_socket),
      issue_rank_tokens_(issue_rank_tokens) {}

NodeAgent::Caller RankService::CallerOf(
    const grpc::CallbackServerContext* context) const {
  NodeAgent::Caller caller;
  const std::string peer = context->peer();
  if (local_socket_ != nullptr) {
    if (std::optional<LocalPeer> local = local_socket_->PeerOf(peer)) {
      caller.connection = absl::StrCat("unix#", local->connection);
      caller.pid = local->pid;
      caller.uid = local->uid;
      return caller;
    }
  }
  // A TCP peer's address and port name its connection while it is open.
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    caller.connection = peer;
  }
  return caller;
}

absl::Status RankService::Admit(const grpc::CallbackServerContext* context,
                                uint32_t rank) const {
  auto token_rank = auth_->AuthenticateRank(context);
  if (!token_rank.ok()) return token_rank.status();
  if (absl::Status s = CheckTokenRank(*token_rank, rank); !s.ok()) return s;
  const NodeAgent::Caller caller = CallerOf(context);
  // A call on the Unix socket whose connection the daemon cannot name
  // (LocalSocket keeps every accepted one while gRPC holds it) acts for no
  // rank: binding a rank to no connection would let every connection act
  // for it.
  if (caller.connection.empty() && local_socket_ != nullptr &&
      absl::StartsWith(context->peer(), "fd:")) {
    return absl::PermissionDeniedError(
        absl::StrCat("this call's local connection (", context->peer(),
                     ") is not one the daemon accepted; it acts for no rank"));
  }
  return agent_->CheckCaller(rank, caller);
}

grpc::ServerUnaryReactor* RankService::Join(
    grpc::CallbackServerContext* context, const v1::JoinRequest* request,
    v1::JoinResponse* response) {
  // Cancellable: a process that dies while its join waits for the world
  // gives its slot back at once (NodeAgent::Join).
  return HandleWait(
      Admit(context, agent_->JoinRankOf(*request)), response,
      [&](Reply<v1::JoinResponse> reply, const CancellationRef& cancellation) {
        agent_->Join(*request, std::move(reply), CallerOf(context),
                     cancellation);
      });
}

grpc::ServerUnaryReactor* RankService::GetDescriptor(
    grpc::CallbackServerContext* context,
    const v1::GetDescriptorRequest* request, v1::SessionDescriptor* response) {
  return Handle(context, Admit(context, request->member().rank()), response,
                [&](Reply<v1::SessionDescriptor> reply) {
                  reply(agent_->GetDescriptor(*request));
                });
}

grpc::ServerUnaryReactor* RankService::AllGatherWords(
    grpc::CallbackServerContext* context,
    const v1::AllGatherWordsRequest* request,
    v1::AllGatherWordsResponse* response) {
  // Cancellable: a rank that gives up on a round gets back what the round
  // held at once, not at its deadline.
  return HandleWait(Admit(context, request->member().rank()), response,
                    [&](Reply<v1::AllGatherWordsResponse> reply,
                        const CancellationRef& cancellation) {
                      agent_->AllGatherWords(*request, std::move(reply),
                                             cancellation);
                    });
}

grpc::ServerUnaryReactor* RankService::OpenRoundSlots(
    grpc::CallbackServerContext* context,
    const v1::OpenRoundSlotsRequest* request,
    v1::OpenRoundSlotsResponse* response) {
  return Handle(context, Admit(context, request->member().rank()), response,
                [&](Reply<v1::OpenRoundSlotsResponse> reply) {
                  if (round_slots_ == nullptr || !FromUnixSocket(context)) {
                    return reply(absl::FailedPreconditionError(
                        "shared-memory round slots are offered on the "
                        "daemon's Unix socket only; use AllGatherWords"));
                  }
                  reply(round_slots_->Open(*request));
                });
}

grpc::ServerUnaryReactor* RankService::OpenKvChannel(
    grpc::CallbackServerContext* context,
    const v1::OpenKvChannelRequest* request,
    v1::OpenKvChannelResponse* response) {
  const uint32_t rank = request->member().rank();
  absl::Status admitted = Admit(context, rank);
  if (admitted.ok()) admitted = agent_->CheckMember(request->member());
  return Handle(context, admitted, response,
                [&](Reply<v1::OpenKvChannelResponse> reply) {
                  if (kv_socket_ == nullptr || !FromUnixSocket(context)) {
                    return reply(absl::FailedPreconditionError(
                        "the key-value channel is offered on the daemon's "
                        "Unix socket only; use the Rank service's Kv calls"));
                  }
                  // Admit passed: the token, if any, names `rank`.
                  auto token_rank = auth_->AuthenticateRank(context);
                  if (!token_rank.ok()) return reply(token_rank.status());
                  reply(kv_socket_->Open(rank, *token_rank, CallerOf(context),
                                         request->error_reasons()));
                });
}

grpc::ServerUnaryReactor* RankService::KvSet(
    grpc::CallbackServerContext* context, const v1::KvSetRequest* request,
    v1::KvSetResponse* response) {
  return Handle(context, Admit(context, request->member().rank()), response,
                [&](Reply<v1::KvSetResponse> reply) {
                  agent_->KvSet(*request, std::move(reply));
                });
}

grpc::ServerUnaryReactor* RankService::KvGet(
    grpc::CallbackServerContext* context, const v1::KvGetRequest* request,
    v1::KvGetResponse* response) {
  return HandleWait(
      Admit(context, request->member().rank()), response,
      [&](Reply<v1::KvGetResponse> reply, const CancellationRef& cancellation) {
        agent_->KvGet(*request, std::move(reply), cancellation);
      });
}

grpc::ServerUnaryReactor* RankService::KvAdd(
    grpc::CallbackServerContext* context, const v1::KvAddRequest* request,
    v1::KvAddResponse* response) {
  return Handle(context, Admit(context, request->member().rank()), response,
                [&](Reply<v1::KvAddResponse> reply) {
                  agent_->KvAdd(*request, std::move(reply));
                });
}

grpc::ServerUnaryReactor* RankService::KvDelete(
    grpc::CallbackServerContext* context, const v1::KvDeleteRequest* request,
    v1::KvDeleteResponse* response) {
  return Handle(context, Admit(context, request->member().rank()), response,
                [&](Reply<v1::KvDeleteResponse> reply) {
                  agent_->KvDelete(*request, std::move(reply));
                });
}

grpc::ServerUnaryReactor* RankService::KvCount(
    grpc::CallbackServerContext* context, const v1::KvCountRequest* request,
    v1::KvCountResponse* response) {
  return Handle(context, Admit(context, request->member().rank()), response,
                [&](Reply<v1::KvCountResponse> reply) {
                  agent_->KvCount(*request, std::move(reply));
                });
}

v1::JobEvent RankService::ScrubForRank(const v1::JobEvent& event,
                                       uint32_t own_rank) {
  v1::JobEvent scrubbed = event;
  // `members` follows `ranks`, in its order; `member` is the one rank of a
  // single-rank event.
  for (int i = 0; i < scrubbed.members_size(); ++i) {
    if (i >= scrubbed.ranks_size() || scrubbed.ranks(i) != own_rank) {
      scrubbed.mutable_members(i)->clear_incarnation();
    }
  }
  if (scrubbed.has_member() &&
      !(scrubbed.ranks_size() == 1 && scrubbed.ranks(0) == own_rank)) {
    scrubbed.mutable_member()->clear_incarnation();
  }
  if (scrubbed.has_node()) scrubbed.mutable_node()->clear_daemon_incarnation();
  return scrubbed;
}

grpc::ServerWriteReactor<v1::JobEvent>* RankService::Watch(
    grpc::CallbackServerContext* context, const v1::WatchRequest* request) {
  NodeAgent* agent = agent_;
  const uint32_t own_rank = request->member().rank();
  return EventStreamReactor::Start(
      Admit(context, own_rank),
      [agent, request, own_rank](EventStreamReactor::Sinks sinks) {
        // Incarnations identify ranks and daemons; a rank sees its own
        // only, as operators see none (AdminService).
        auto scrubbed = [own_rank, forward = std::move(sinks.deliver)](
                            const v1::JobEvent& event) {
          if (!event.has_member() && event.members_size() == 0 &&
              !event.has_node()) {
            return forward(event);
          }
          forward(ScrubForRank(event, own_rank));
        };
        return agent->Attach(
            *request,
            NodeAgent::WatchSink{std::move(scrubbed), std::move(sinks.close)});
      },
      [agent](uint64_t id, bool client_gone, const std::string& reason) {
        agent->Detach(id, client_gone, reason);
      });
}

grpc::ServerUnaryReactor* RankService::Leave(
    grpc::CallbackServerContext* context, const v1::LeaveRequest* request,
    v1::LeaveResponse* response) {
  return Handle(context, Admit(context, request->member().rank()), response,
                [&](Reply<v1::LeaveResponse> reply) {
                  agent_->Leave(*request, std::move(reply));
                });
}

grpc::ServerUnaryReactor* RankService::IssueRankTokens(
    grpc::CallbackServerContext* context,
    const v1::IssueRankTokensRequest* request,
    v1::IssueRankTokensResponse* response) {
  absl::Status allowed =
      CheckJobId(request->job_id(), agent_->LocalJob().job_id(), "daemon");
  if (allowed.ok() && !FromUnixSocket(context)) {
    allowed = absl::PermissionDeniedError(
        "rank tokens are issued on the daemon's Unix socket only");
  }
  if (allowed.ok() && !issue_rank_tokens_ && auth_->enabled()) {
    allowed = absl::FailedPreconditionError(
        "this daemon does not issue rank tokens (start it with "
        "--issue_rank_tokens=true, or mint them with `rankctl credentials "
        "rank-token`, or give rankrun the job's --credentials_dir)");
  }
  return Handle(
      context, allowed, response,
      [&](Reply<v1::IssueRankTokensResponse> reply) {
        v1::IssueRankTokensResponse out;
        if (!auth_->enabled()) return reply(out);  // nothing to present
        const NodeAgent::Caller caller = CallerOf(context);
        {
          absl::MutexLock lock(&issued_mu_);
          // Once: the launcher beside the daemon asks before it starts any
          // rank, so a rank that asks later (a compromised one) gets none.
          if (issued_to_.has_value()) {
            return reply(absl::PermissionDeniedError(absl::StrCat(
                "this node's rank tokens were issued already, to ",
                issued_to_->Describe(), "; they are handed out once")));
          }
          issued_to_ = caller;
        }
        const v1::JobStatus job = agent_->LocalJob();
        const uint32_t nproc = job.world_size() / std::max(job.nnodes(), 1u);
        for (uint32_t local = 0; local < nproc; ++local) {
          const uint32_t rank = job.served_by_node() * nproc + local;
          v1::IssueRankTokensResponse::Token* token = out.add_tokens();
          token->set_local_rank(local);
          token->set_rank(rank);
          token->set_token(auth_->MintRankToken(rank));
        }
        reply(std::move(out));
      });
}

// ---------------------------------------------------------------- Peer

PeerService::PeerService(Coordinator* coordinator,
                         std::string coordinator_address, uint32_t own_node,
                         const Authenticator* auth,
                         DeadlineTimer* formation_timer)
    : coordinator_(coordinator),
      coordinator_address_(std::move(coordinator_address)),
      own_node_(own_node),
      auth_(auth),
      formation_timer_(formation_timer) {}

absl::StatusOr<std::optional<uint32_t>> PeerService::AuthenticateCaller(
    grpc::CallbackServerContext* context) const {
  if (coordinator_ == nullptr) {
    // Where the coordinator is is no secret, and it is what a daemon
    // pointed at the wrong node needs to hear.
    return absl::FailedPreconditionError(absl::StrCat(
        "this daemon is not the job's coordinator; the coordinator is at ",
        coordinator_address_, " (check --coordinator)"));
  }
  auto node = auth_->AuthenticateNode(context);
  if (!node.ok()) return node.status();
  if (node->has_value() && **node == own_node_) {
    // The coordinator's own node reaches it in-process, never over TCP: a
    // caller with this token minted it from a copy of the node key.
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", own_node_,
        " is this coordinator's own node and never calls it over the "
        "network; refusing a caller presenting its token"));
  }
  return node;
}

absl::Status PeerService::CheckClaims(std::optional<uint32_t> caller,
                                      std::optional<uint32_t> claimed_node,
                                      std::optional<uint32_t> rank) const {
  if (!caller.has_value()) return absl::OkStatus();  // authentication off
  if (claimed_node.has_value() && *claimed_node != *caller) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", *caller, "'s credential cannot act as node ", *claimed_node));
  }
  // Outside the world: the caller's mistake, named as the coordinator
  // would (its node is nobody's).
  if (rank.has_value() && *rank >= coordinator_->spec().world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", *rank, " is outside the world of size ",
                     coordinator_->spec().world_size));
  }
  if (rank.has_value() && coordinator_->NodeOfRank(*rank) != *caller) {
    return absl::PermissionDeniedError(
        absl::StrCat("node ", *caller, "'s credential cannot act for rank ",
                     *rank, ", which is not on that node"));
  }
  return absl::OkStatus();
}

absl::Status PeerService::Authorize(grpc::CallbackServerContext* context,
                                    std::optional<uint32_t> claimed_node,
                                    std::optional<uint32_t> rank) const {
  auto caller = AuthenticateCaller(context);
  if (!caller.ok()) return caller.status();
  return CheckClaims(*caller, claimed_node, rank);
}

absl::Status PeerService::Check(grpc::CallbackServerContext* context,
                                uint32_t claimed_node) const {
  return Authorize(context, claimed_node, std::nullopt);
}

absl::Status PeerService::CheckForRank(grpc::CallbackServerContext* context,
                                       uint32_t rank) const {
  return Authorize(context, std::nullopt, rank);
}

grpc::ServerUnaryReactor* PeerService::RegisterNode(
    grpc::CallbackServerContext* context,
    const v1::RegisterNodeRequest* request,
    v1::RegisterNodeResponse* response) {
  return Handle(context, Check(context, request->node().node_index()), response,
                [&](Reply<v1::RegisterNodeResponse> reply) {
                  auto registered = coordinator_->RegisterNode(*request);
                  if (registered.ok()) {
                    registered->set_round_link_port(
                        static_cast<uint32_t>(round_link_port_.load()));
                  }
                  reply(std::move(registered));
                });
}

grpc::ServerUnaryReactor* PeerService::Heartbeat(
    grpc::CallbackServerContext* context, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  return Handle(context, Check(context, request->node().node_index()), response,
                [&](Reply<v1::HeartbeatResponse> reply) {
                  reply(coordinator_->Heartbeat(*request));
                });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* PeerService::Subscribe(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  v1::SubscribeRequest request;
  grpc::ByteBuffer copy(*raw);  // Deserialize consumes its buffer
  absl::Status precheck =
      grpc::SerializationTraits<v1::SubscribeRequest>::Deserialize(&copy,
                                                                   &request)
              .ok()
          ? Check(context, request.node().node_index())
          : absl::InvalidArgumentError("not a SubscribeRequest");
  Coordinator* coordinator = coordinator_;
  v1::NodeRef node = request.node();
  return EventBatchStreamReactor::Start(
      precheck,
      [coordinator, &request](EventBatchStreamReactor::Sinks sinks) {
        return coordinator->Subscribe(request, std::move(sinks.deliver),
                                      std::move(sinks.close));
      },
      [coordinator, node](uint64_t id, bool client_gone,
                          const std::string& reason) {
        coordinator->EndSubscription(id, node, client_gone, reason);
      },
      formation_timer_, &event_encoder_);
}

grpc::ServerUnaryReactor* PeerService::LeaveNode(
    grpc::CallbackServerContext* context, const v1::LeaveNodeRequest* request,
    v1::LeaveNodeResponse* response) {
  return Handle(context, Check(context, request->node().node_index()), response,
                [&](Reply<v1::LeaveNodeResponse> reply) {
                  reply(coordinator_->LeaveNode(*request));
                });
}

grpc::ServerUnaryReactor* PeerService::JoinRank(
    grpc::CallbackServerContext* context, const v1::JoinRankRequest* request,
    v1::JoinRankResponse* response) {
  return Handle(context, Check(context, request->node().node_index()), response,
                [&](Reply<v1::JoinRankResponse> reply) {
                  coordinator_->JoinRank(*request, std::move(reply));
                });
}

grpc::ServerUnaryReactor* PeerService::ReleaseRank(
    grpc::CallbackServerContext* context, const v1::ReleaseRankRequest* request,
    v1::ReleaseRankResponse* response) {
  return Handle(
      context,
      Authorize(context, request->node().node_index(), request->rank()),
      response, [&](Reply<v1::ReleaseRankResponse> reply) {
        reply(coordinator_->ReleaseRank(*request));
      });
}

grpc::ServerUnaryReactor* PeerService::ContributeWords(
    grpc::CallbackServerContext* context,
    const v1::ContributeWordsRequest* request,
    v1::AllGatherWordsResponse* response) {
  return Handle(context, Check(context, request->node().node_index()), response,
                [&](Reply<v1::AllGatherWordsResponse> reply) {
                  coordinator_->ContributeWords(*request, std::move(reply));
                });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
PeerService::Rounds(grpc::CallbackServerContext* context) {
  // Who the caller is is settled once, for the stream (a token check per
  // round would cost the coordinator a MAC per node per round); every
  // message must then name that node.
  auto caller = AuthenticateCaller(context);
  Coordinator* coordinator = coordinator_;
  return RoundStreamReactor::Start(
      caller.status(),
      [this, caller = caller.value_or(std::nullopt)](
          const v1::ContributeWordsRequest& request) {
        return CheckClaims(caller, request.node().node_index(), std::nullopt);
      },
      [coordinator](const v1::ContributeWordsRequest& request,
                    WordRounds::SharedDone done) {
        coordinator->ContributeWordsShared(request, std::move(done));
      });
}

RoundLinkServer::Handlers PeerService::RoundLinkHandlers() {
  RoundLinkServer::Handlers handlers;
  handlers.admit = [this](const v1::RoundLinkHello& hello,
                          absl::string_view node_transcript,
                          absl::string_view coordinator_transcript)
      -> absl::StatusOr<RoundLinkServer::Admission> {
    const uint32_t node = hello.node().node_index();
    if (coordinator_ == nullptr) {
      return absl::FailedPreconditionError(
          "this daemon is not the job's coordinator");
    }
    // Refused, naming the caller's id only when it could be a job id.
    if (absl::Status s = CheckJobId(hello.node().job_id(),
                                    coordinator_->spec().job_id, "coordinator");
        !s.ok()) {
      return absl::PermissionDeniedError(s.message());
    }
    if (node >= coordinator_->spec().nnodes || node == own_node_) {
      return absl::PermissionDeniedError(absl::StrCat(
          "node ", node, " cannot open a round link (the job's nodes are 0..",
          coordinator_->spec().nnodes - 1, "; node ", own_node_,
          " is the coordinator's own)"));
    }
    if (absl::Status s =
            auth_->VerifyNodeProof(node, node_transcript, hello.proof());
        !s.ok()) {
      return s;
    }
    // The daemon serving the node now, not a fenced predecessor that still
    // holds the node's token: its link would replace the live one's.
    if (absl::Status s = coordinator_->CheckNode(hello.node()); !s.ok()) {
      return s;
    }
    // Without authentication too, a link speaks for the node it named
    // (and a node has one link).
    return RoundLinkServer::Admission{
        node, auth_->ProveToNode(node, coordinator_transcript)};
  };
  handlers.authorize = [this](std::optional<uint32_t> caller,
                              const v1::ContributeWordsRequest& request) {
    return CheckClaims(caller, request.node().node_index(), std::nullopt);
  };
  Coordinator* coordinator = coordinator_;
  handlers.contribute = [coordinator](const v1::ContributeWordsRequest& request,
                                      WordRounds::SharedDone done) {
    coordinator->ContributeWordsShared(request, std::move(done));
  };
  handlers.kv = [this](std::optional<uint32_t> caller,
                       const v1::KvLinkRequest& request,
                       const CancellationRef& cancellation,
                       RoundLinkServer::KvDone done) {
    RunKvLinkCall(caller, request, cancellation, std::move(done));
  };
  return handlers;
}

namespace {

// A forwarded key-value call's reply: `result`'s status, and its response
// in the reply's field `response` when OK.
template <typename T>
v1::KvLinkReply KvLinkReplyOf(absl::StatusOr<T> result,
                              T* (v1::KvLinkReply::*response)()) {
  v1::KvLinkReply reply;
  if (!result.ok()) {
    SetKvLinkError(result.status(), &reply);
  } else {
    *(reply.*response)() = *std::move(result);
  }
  return reply;
}

}  // namespace

void PeerService::RunKvLinkCall(std::optional<uint32_t> caller,
                                const v1::KvLinkRequest& request,
                                const CancellationRef& cancellation,
                                RoundLinkServer::KvDone done) const {
  // The unary calls' checks (CheckForRank) for the node the link's
  // handshake proved: the coordinator is this daemon, the node is not its
  // own (both settled when the link was admitted), the rank is the node's.
  auto refused = [&](const v1::MemberRef& member) {
    return CheckClaims(caller, std::nullopt, member.rank());
  };
  using R = v1::KvLinkReply;
  // A call the coordinator answers at once.
  auto answer = [&](const auto& call, auto method, auto response) {
    using Response =
        std::remove_pointer_t<decltype((std::declval<R&>().*response)())>;
    absl::Status s = refused(call.member());
    done(KvLinkReplyOf<Response>(
        s.ok() ? (coordinator_->*method)(call) : absl::StatusOr<Response>(s),
        response));
  };
  switch (request.call_case()) {
    case v1::KvLinkRequest::kKvSet:
      return answer(request.kv_set(), &Coordinator::KvSet, &R::mutable_kv_set);
    case v1::KvLinkRequest::kKvAdd:
      return answer(request.kv_add(), &Coordinator::KvAdd, &R::mutable_kv_add);
    case v1::KvLinkRequest::kKvDelete:
      return answer(request.kv_delete(), &Coordinator::KvDelete,
                    &R::mutable_kv_delete);
    case v1::KvLinkRequest::kKvCount:
      return answer(request.kv_count(), &Coordinator::KvCount,
                    &R::mutable_kv_count);
    case v1::KvLinkRequest::kKvGet: {
      auto reply =
          [done = std::move(done)](absl::StatusOr<v1::KvGetResponse> result) {
            done(KvLinkReplyOf(std::move(result), &R::mutable_kv_get));
          };
      if (absl::Status s = refused(request.kv_get().member()); !s.ok()) {
        return reply(s);
      }
      // Waits in the coordinator, not on the link's thread.
      return coordinator_->KvGet(request.kv_get(), std::move(reply),
                                 cancellation);
    }
    case v1::KvLinkRequest::CALL_NOT_SET:
      break;
  }
  done(KvLinkReplyOf<v1::KvCountResponse>(
      absl::InvalidArgumentError("a KvLinkRequest without a call"),
      &R::mutable_kv_count));
}

grpc::ServerUnaryReactor* PeerService::KvSet(
    grpc::CallbackServerContext* context, const v1::KvSetRequest* request,
    v1::KvSetResponse* response) {
  return Handle(context, CheckForRank(context, request->member().rank()),
                response, [&](Reply<v1::KvSetResponse> reply) {
                  reply(coordinator_->KvSet(*request));
                });
}

grpc::ServerUnaryReactor* PeerService::KvGet(
    grpc::CallbackServerContext* context, const v1::KvGetRequest* request,
    v1::KvGetResponse* response) {
  return HandleWait(
      CheckForRank(context, request->member().rank()), response,
      [&](Reply<v1::KvGetResponse> reply, const CancellationRef& cancellation) {
        coordinator_->KvGet(*request, std::move(reply), cancellation);
      });
}

grpc::ServerUnaryReactor* PeerService::KvAdd(
    grpc::CallbackServerContext* context, const v1::KvAddRequest* request,
    v1::KvAddResponse* response) {
  return Handle(context, CheckForRank(context, request->member().rank()),
                response, [&](Reply<v1::KvAddResponse> reply) {
                  reply(coordinator_->KvAdd(*request));
                });
}

grpc::ServerUnaryReactor* PeerService::KvDelete(
    grpc::CallbackServerContext* context, const v1::KvDeleteRequest* request,
    v1::KvDeleteResponse* response) {
  return Handle(context, CheckForRank(context, request->member().rank()),
                response, [&](Reply<v1::KvDeleteResponse> reply) {
                  reply(coordinator_->KvDelete(*request));
                });
}

grpc::ServerUnaryReactor* PeerService::KvCount(
    grpc::CallbackServerContext* context, const v1::KvCountRequest* request,
    v1::KvCountResponse* response) {
  return Handle(context, CheckForRank(context, request->member().rank()),
                response, [&](Reply<v1::KvCountResponse> reply) {
                  reply(coordinator_->KvCount(*request));
                });
}

// ---------------------------------------------------------------- Admin

AdminService::AdminService(NodeAgent* agent, Coordinator* coordinator,
                           const Authenticator* auth, uint32_t max_streams)
    : agent_(agent),
      coordinator_(coordinator),
      auth_(auth),
      max_streams_(max_streams) {}

grpc::ServerUnaryReactor* AdminService::GetJob(
    grpc::CallbackServerContext* context, const v1::GetJobRequest* /*request*/,
    v1::JobStatus* response) {
  return Handle(context, auth_->AuthorizeOperator(context), response,
                [&](Reply<v1::JobStatus> reply) {
                  v1::JobStatus local = agent_->LocalJob();
                  if (coordinator_ == nullptr) return reply(local);
                  v1::JobStatus status = coordinator_->GetJob();
                  status.set_served_by_node(local.served_by_node());
                  status.set_served_by_coordinator(true);
                  status.set_coordinator_address(local.coordinator_address());
                  status.set_open_local_rounds(local.open_local_rounds());
                  reply(status);
                });
}

grpc::ServerUnaryReactor* AdminService::GetTopology(
    grpc::CallbackServerContext* context,
    const v1::GetTopologyRequest* /*request*/, v1::Topology* response) {
  return Handle(context, auth_->AuthorizeOperator(context), response,
                [&](Reply<v1::Topology> reply) {
                  v1::Topology topology = coordinator_ != nullptr
                                              ? coordinator_->GetTopology()
                                              : agent_->LocalTopology();
                  for (auto& node : *topology.mutable_nodes()) {
                    node.clear_daemon_incarnation();
                  }
                  reply(topology);
                });
}

grpc::ServerUnaryReactor* AdminService::ListMembers(
    grpc::CallbackServerContext* context,
    const v1::ListMembersRequest* /*request*/, v1::MemberList* response) {
  return Handle(context, auth_->AuthorizeOperator(context), response,
                [&](Reply<v1::MemberList> reply) {
                  v1::MemberList members = coordinator_ != nullptr
                                               ? coordinator_->ListMembers()
                                               : agent_->LocalMembers();
                  for (auto& member : *members.mutable_members()) {
                    member.clear_incarnation();
                  }
                  reply(members);
                });
}

grpc::ServerUnaryReactor* AdminService::KvGet(
    grpc::CallbackServerContext* context, const v1::AdminKvGetRequest* request,
    v1::AdminKvGetResponse* response) {
  absl::Status auth = auth_->AuthorizeKvRead(context);
  if (auth.ok()) auth = KvStore::ValidateKey(request->key());
  return Handle(context, auth, response,
                [&](Reply<v1::AdminKvGetResponse> reply) {
                  if (coordinator_ == nullptr) {
                    return reply(absl::FailedPreconditionError(absl::StrCat(
                        "the key-value broker lives on the coordinator at ",
                        agent_->LocalJob().coordinator_address(), "; ask it")));
                  }
                  auto value = coordinator_->PeekKey(request->key());
                  if (!value.has_value()) {
                    return reply(absl::NotFoundError(
                        absl::StrCat("key '", request->key(), "' is not set")));
                  }
                  v1::AdminKvGetResponse out;
                  out.set_value(*value);
                  reply(out);
                });
}

grpc::ServerWriteReactor<v1::JobEvent>* AdminService::WatchEvents(
    grpc::CallbackServerContext* context,
    const v1::WatchEventsRequest* request) {
  EventLog* events = &agent_->events();
  uint64_t after = request->after_sequence();
  std::atomic<uint32_t>* open_streams = &open_streams_;
  const uint32_t max_streams = max_streams_;
  return EventStreamReactor::Start(
      auth_->AuthorizeOperator(context),
      [events, after, open_streams, max_streams](
          EventStreamReactor::Sinks sinks) -> absl::StatusOr<uint64_t> {
        if (open_streams->fetch_add(1) >= max_streams) {
          open_streams->fetch_sub(1);
          return absl::ResourceExhaustedError(
              absl::StrCat("this daemon serves ", max_streams,
                           " WatchEvents streams already (the limit, "
                           "--max_operator_streams)"));
        }
        // A resume from an event this daemon no longer keeps is refused
        // (OUT_OF_RANGE), not answered with a silent gap.
        absl::StatusOr<uint64_t> id = events->Resume(
            after,
            [deliver = std::move(sinks.deliver)](const v1::JobEvent& event) {
              if (!event.has_member() && event.members_size() == 0 &&
                  !event.has_node()) {
                return deliver(event);
              }
              // Operators see who joined and registered, not the incarnations
              // that identify them: neither a lone member's nor those of the
              // ranks that joined together (MemberDetails in `members`).
              v1::JobEvent scrubbed = event;
              if (scrubbed.has_member()) {
                scrubbed.mutable_member()->clear_incarnation();
              }
              for (v1::MemberDetails& m : *scrubbed.mutable_members()) {
                m.clear_incarnation();
              }
              if (scrubbed.has_node()) {
                scrubbed.mutable_node()->clear_daemon_incarnation();
              }
              deliver(scrubbed);
            });
        // The stream ends without a subscription: its place is given back
        // here, not by the end callback.
        if (!id.ok()) open_streams->fetch_sub(1);
        return id;
      },
      [events, open_streams](uint64_t id, bool, const std::string&) {
        events->Unsubscribe(id);
        open_streams->fetch_sub(1);
      });
}

}  // namespace rankd
