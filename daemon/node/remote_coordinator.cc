#include "daemon/node/remote_coordinator.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/grpc_deadline.h"
#include "common/monotonic_clock.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/node/pending_rounds.h"
#include "daemon/transport/round_link_protocol.h"
#include "daemon/transport/security.h"

namespace rankd {
namespace {

// Extra time given to gRPC beyond a request's own timeout, so that the
// coordinator's precise timeout error arrives before the transport's.
constexpr absl::Duration kDeadlineMargin = absl::Seconds(5);
constexpr absl::Duration kShortCall = absl::Seconds(10);
// A worker often starts before its coordinator listens: it tries again
// soon, then less often (the channel reconnects at its own backoff,
// security.cc).
constexpr absl::Duration kFirstRegisterRetry = absl::Milliseconds(10);
constexpr absl::Duration kMaxRegisterRetry = absl::Milliseconds(250);

bool Transient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

// Follows the coordinator's Subscribe stream. Owned by the link; the link
// cancels it and waits for OnDone before destroying it.
class RemoteCoordinatorLink::EventStream
    : public grpc::ClientReadReactor<v1::JobEventBatch> {
 public:
  EventStream(RemoteCoordinatorLink* link, v1::Peer::Stub* stub,
              const v1::SubscribeRequest& request, Listener* listener)
      : link_(link), listener_(listener), request_(request) {
    AttachBearerToken(&context_, link->bearer_token_);
    stub->async()->Subscribe(&context_, &request_, this);
    StartRead(&batch_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    for (const v1::JobEvent& event : batch_.events()) {
      listener_->OnEvent(event);
      link_->WatchForFencing(event);
    }
    StartRead(&batch_);
  }

  void OnDone(const grpc::Status& status) override {
    link_->OnStreamDone(status);
    done_.Notify();
  }

  void CancelAndWait() {
    context_.TryCancel();
    done_.WaitForNotification();
  }

 private:
  RemoteCoordinatorLink* const link_;
  Listener* const listener_;
  grpc::ClientContext context_;
  v1::SubscribeRequest request_;
  v1::JobEventBatch batch_;
  absl::Notification done_;
};

// The node's Peer.Rounds stream: contributions go out one write at a
// time, in order; each outcome is matched to its contribution by tag.
// Owned by the link; the link cancels it and waits for OnDone before
// destroying it.
class RemoteCoordinatorLink::RoundStream
    : public grpc::ClientBidiReactor<v1::ContributeWordsRequest,
                                     v1::RoundOutcome> {
 public:
  RoundStream(RemoteCoordinatorLink* link, v1::Peer::Stub* stub)
      : link_(link), pending_(link->address_) {
    AttachBearerToken(&context_, link->bearer_token_);
    stub->async()->Rounds(&context_, this);
    StartRead(&incoming_);
    StartCall();
  }

  // Sends `request`; `reply` runs once with its outcome, or fails at
  // `deadline`. False (and `reply` untouched) once the stream has ended.
  bool Send(v1::ContributeWordsRequest request,
            Reply<v1::AllGatherWordsResponse>& reply, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    const uint64_t tag = pending_.Add(request.round(), deadline, reply);
    if (tag == 0) return false;
    request.set_tag(tag);
    outgoing_.push_back(std::move(request));
    if (!writing_) {
      writing_ = true;
      StartWrite(&outgoing_.front());
    }
    return true;
  }

  // Fails the rounds the coordinator left unanswered past their deadline.
  void ExpireOverdue(absl::Time now) { pending_.ExpireOverdue(now); }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    outgoing_.pop_front();
    if (ok && !outgoing_.empty()) {
      StartWrite(&outgoing_.front());
      return;
    }
    // A failed write means the call is over: OnDone fails what waits.
    writing_ = false;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    // An unknown tag is a round this side gave up on (ExpireOverdue).
    pending_.Answer(incoming_);
    incoming_.Clear();
    StartRead(&incoming_);
  }

  void OnDone(const grpc::Status& status) override {
    absl::Status why;
    if (cancelled_.HasBeenNotified()) {
      why = absl::CancelledError("daemon is shutting down");
    } else {
      // UNAVAILABLE unless the coordinator said why it ended the stream.
      const bool told = !status.ok() &&
                        status.error_code() != grpc::StatusCode::CANCELLED &&
                        status.error_code() != grpc::StatusCode::UNKNOWN;
      why = absl::Status(
          told ? static_cast<absl::StatusCode>(status.error_code())
               : absl::StatusCode::kUnavailable,
          absl::StrCat(
              "round stream to coordinator at ", link_->address_, " ended: ",
              status.error_message().empty() ? "connection closed"
                                             : status.error_message()));
    }
    pending_.Abandon(why);
    done_.Notify();
  }

  void CancelAndWait() {
    cancelled_.Notify();
    context_.TryCancel();
    done_.WaitForNotification();
  }

 private:
  RemoteCoordinatorLink* const link_;
  grpc::ClientContext context_;
  v1::RoundOutcome incoming_;  // only the reading side touches it
  PendingRounds pending_;
  absl::Notification cancelled_;
  absl::Notification done_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::ContributeWordsRequest> outgoing_ ABSL_GUARDED_BY(mu_);
};

RemoteCoordinatorLink::RemoteCoordinatorLink(
    std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials,
    std::string bearer_token, absl::Duration heartbeat_interval,
    absl::Duration heartbeat_timeout, DeadlineTimer* timer)
    : address_(std::move(address)),
      bearer_token_(std::move(bearer_token)),
      heartbeat_interval_(heartbeat_interval),
      heartbeat_timeout_(heartbeat_timeout),
      timer_(timer) {
  channel_ = grpc::CreateCustomChannel(
      address_, credentials, DefaultChannelArguments(heartbeat_timeout));
  stub_ = v1::Peer::NewStub(channel_);
}

RemoteCoordinatorLink::~RemoteCoordinatorLink() { Stop(); }

absl::Status RemoteCoordinatorLink::Annotate(const grpc::Status& status) const {
  return AnnotateCoordinatorError(address_, FromGrpc(status));
}

absl::Status RemoteCoordinatorLink::AnnotateCoordinatorError(
    absl::string_view address, const absl::Status& status) {
  if (Transient(static_cast<grpc::StatusCode>(status.code()))) {
    return KeepReason(
        status,
        absl::Status(status.code(), absl::StrCat("coordinator at ", address,
                                                 ": ", status.message())));
  }
  return status;
}

template <typename Response>
bool RemoteCoordinatorLink::ForwardOverLink(
    v1::KvLinkRequest request, absl::Duration timeout, Reply<Response>& reply,
    Response* (v1::KvLinkReply::*response)(),
    v1::KvLinkReply::ResponseCase response_case,
    const CancellationRef& cancellation) {
  std::shared_ptr<RoundLink> round_link;
  {
    absl::MutexLock lock(&mu_);
    round_link = round_link_;
  }
  if (round_link == nullptr) return false;
  // The coordinator's answer as the unary call would give it: a
  // transient code gets the same "coordinator at" annotation.
  PendingKvCalls::KvReply answer =
      [address = address_, reply, response,
       response_case](absl::StatusOr<v1::KvLinkReply> result) {
        if (!result.ok()) return reply(result.status());
        if (result->code() != 0) {
          return reply(
              AnnotateCoordinatorError(address, KvLinkReplyStatus(*result)));
        }
        if (result->response_case() != response_case) {
          return reply(absl::InternalError(absl::StrCat(
              "round link to coordinator at ", address,
              ": a key-value reply of another kind than its request")));
        }
        reply(std::move(*((*result).*response)()));
      };
  // Refused (leaving `answer` unused) while the link is not open.
  return round_link->SendKv(std::move(request), answer,
                            MonotonicNow() + timeout, cancellation);
}

template <typename Request, typename Response, typename Invoke>
void RemoteCoordinatorLink::Call(const Request& request, absl::Duration timeout,
                                 Reply<Response> reply, Invoke invoke,
                                 const CancellationRef& cancellation) {
  struct State {
    grpc::ClientContext context;
    Request request;
    Response response;
    Reply<Response> reply;
  };
  auto state = std::make_shared<State>();
  state->request = request;
  state->reply = std::move(reply);
  state->context.set_deadline(GrpcDeadlineAfter(timeout));
  AttachBearerToken(&state->context, bearer_token_);
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      id = next_call_++;
      inflight_[id] = &state->context;
    }
  }
  if (id == 0) {
    return state->reply(absl::CancelledError("daemon is shutting down"));
  }
  invoke(&state->context, &state->request, &state->response,
         [this, state, id](grpc::Status status) {
           if (status.ok()) {
             state->reply(std::move(state->response));
           } else {
             state->reply(Annotate(status));
           }
           absl::MutexLock lock(&mu_);
           inflight_.erase(id);
         });
  if (cancellation != nullptr) {
    // The caller's cancellation cancels the forwarded call, and so the
    // coordinator's wait; a call already done is left alone.
    cancellation->OnCancel([weak = std::weak_ptr<State>(state)] {
      if (auto alive = weak.lock()) alive->context.TryCancel();
    });
  }
}

void RemoteCoordinatorLink::Start(const v1::RegisterNodeRequest& request,
                                  absl::Time register_deadline,
                                  Listener* listener,
                                  Reply<v1::RegisterNodeResponse> registered) {
  {
    absl::MutexLock lock(&mu_);
    listener_ = listener;
  }
  TryRegister(std::make_shared<v1::RegisterNodeRequest>(request),
              register_deadline, kFirstRegisterRetry, std::move(registered));
}

void RemoteCoordinatorLink::TryRegister(
    std::shared_ptr<v1::RegisterNodeRequest> request, absl::Time deadline,
    absl::Duration retry, Reply<v1::RegisterNodeResponse> done) {
  Call<v1::RegisterNodeRequest, v1::RegisterNodeResponse>(
      *request, absl::Seconds(2),
      [this, request, deadline, retry,
       done](absl::StatusOr<v1::RegisterNodeResponse> result) {
        {
          absl::MutexLock lock(&mu_);
          if (stopped_) {
            return done(absl::CancelledError("daemon is shutting down"));
          }
        }
        if (result.ok()) {
          if (!OnRegistered(*request, *result)) {
            return done(absl::CancelledError("daemon is shutting down"));
          }
          return done(result);
        }
        bool transient =
            result.status().code() == absl::StatusCode::kUnavailable ||
            result.status().code() == absl::StatusCode::kDeadlineExceeded;
        if (!transient || MonotonicNow() + retry >= deadline) {
          return done(result.status());
        }
        const absl::Duration next = std::min(retry * 2, kMaxRegisterRetry);
        timer_->Schedule(MonotonicNow() + retry,
                         [this, request, deadline, next, done] {
                           TryRegister(request, deadline, next, done);
                         });
      },
      [this](grpc::ClientContext* c, const v1::RegisterNodeRequest* q,
             v1::RegisterNodeResponse* p, std::function<void(grpc::Status)> f) {
        stub_->async()->RegisterNode(c, q, p, std::move(f));
      });
}

bool RemoteCoordinatorLink::OnRegistered(
    const v1::RegisterNodeRequest& request,
    const v1::RegisterNodeResponse& response) {
  absl::MutexLock lock(&mu_);
  // A Stop that ran since the check above (it waits for this call, in
  // flight, with the lock released) found no streams to stop: none may
  // start now, or they would outlive it.
  if (stopped_) return false;
  node_.set_job_id(request.config().job_id());
  node_.set_node_index(request.node().node_index());
  node_.set_daemon_incarnation(request.node().daemon_incarnation());
  v1::SubscribeRequest subscribe;
  *subscribe.mutable_node() = node_;
  subscribe.set_after_sequence(0);
  stream_ =
      std::make_unique<EventStream>(this, stub_.get(), subscribe, listener_);
  rounds_ = std::make_shared<RoundStream>(this, stub_.get());
  auto coordinator = ParseHostPort(address_);
  if (response.round_link_port() != 0 && coordinator.ok() &&
      response.round_link_port() <= 65535) {
    // Rounds take the stream until the link is open, and again if it ends.
    RoundLink::Options options;
    options.host = coordinator->host;
    options.port = static_cast<uint16_t>(response.round_link_port());
    options.coordinator_address = address_;
    options.node = node_;
    options.node_token = bearer_token_;
    const std::string where =
        absl::StrCat("round link to the coordinator (", options.host, ":",
                     options.port, ")");
    options.on_open = [where](const absl::Status& status) {
      Log(status.ok()
              ? absl::StrCat(where,
                             " open: this node's rounds and forwarded "
                             "key-value calls go over it")
              : absl::StrCat(where, " not opened (", status.message(),
                             "): this node's rounds stay on the Rounds "
                             "stream, its key-value calls on unary calls"));
    };
    options.on_end = [where](const absl::Status& status) {
      if (status.code() == absl::StatusCode::kCancelled) return;
      Log(absl::StrCat(where, " ended (", status.message(),
                       "): this node's rounds go over the Rounds stream, "
                       "its key-value calls over unary calls"));
    };
    round_link_ = std::make_shared<RoundLink>(std::move(options));
  }
  last_heartbeat_ok_ = MonotonicNow();
  heartbeat_timer_ = timer_->Schedule(MonotonicNow() + heartbeat_interval_,
                                      [this] { Beat(); });
  return true;
}

void RemoteCoordinatorLink::Beat() {
  v1::HeartbeatRequest request;
  std::string lost_reason;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_ || lost_) return;
    *request.mutable_node() = node_;
    absl::Duration silent = MonotonicNow() - last_heartbeat_ok_;
    if (silent > heartbeat_timeout_) {
      lost_reason = absl::StrCat("coordinator at ", address_,
                                 " answered no heartbeat for ",
                                 absl::ToInt64Milliseconds(silent), " ms");
      if (!last_heartbeat_error_.empty()) {
        absl::StrAppend(&lost_reason, " (last error: ", last_heartbeat_error_,
                        ")");
      }
    } else {
      heartbeat_timer_ = timer_->Schedule(MonotonicNow() + heartbeat_interval_,
                                          [this] { Beat(); });
    }
  }
  if (!lost_reason.empty()) {
    // One last heartbeat, bounded by an interval, before the coordinator is
    // called lost: the silence may have been this daemon's own (a paused
    // process, a partition that healed), and the answer may be that the
    // coordinator fenced it meanwhile -- which this daemon must tell apart.
    return SendHeartbeat(
        request, heartbeat_interval_,
        [this, lost_reason](const absl::Status& status) {
          if (IsFencing(status)) {
            return ReportLost(std::string(status.message()), /*fenced=*/true);
          }
          if (!status.ok()) return ReportLost(lost_reason);
          {
            absl::MutexLock lock(&mu_);
            if (stopped_ || lost_) return;
            heartbeat_timer_ = timer_->Schedule(
                MonotonicNow() + heartbeat_interval_, [this] { Beat(); });
          }
        });
  }
  std::shared_ptr<RoundStream> rounds;
  std::shared_ptr<RoundLink> round_link;
  {
    absl::MutexLock lock(&mu_);
    rounds = rounds_;
    round_link = round_link_;
  }
  if (rounds != nullptr) rounds->ExpireOverdue(MonotonicNow());
  if (round_link != nullptr) round_link->ExpireOverdue(MonotonicNow());
  SendHeartbeat(request, heartbeat_timeout_,
                [this](const absl::Status& status) {
                  if (IsFencing(status)) {
                    ReportLost(std::string(status.message()), /*fenced=*/true);
                  }
                });
}

void RemoteCoordinatorLink::SendHeartbeat(
    const v1::HeartbeatRequest& request, absl::Duration timeout,
    std::function<void(const absl::Status&)> then) {
  Call<v1::HeartbeatRequest, v1::HeartbeatResponse>(
      request, timeout,
      [this,
       then = std::move(then)](absl::StatusOr<v1::HeartbeatResponse> result) {
        if (heartbeat_observer_) heartbeat_observer_(result.status().code());
        {
          absl::MutexLock lock(&mu_);
          if (result.ok()) {
            last_heartbeat_ok_ = MonotonicNow();
            last_heartbeat_error_.clear();
          } else {
            last_heartbeat_error_ = result.status().ToString();
          }
        }
        then(result.status());
      },
      [this](grpc::ClientContext* c, const v1::HeartbeatRequest* q,
             v1::HeartbeatResponse* p, std::function<void(grpc::Status)> f) {
        stub_->async()->Heartbeat(c, q, p, std::move(f));
      });
}

void RemoteCoordinatorLink::OnStreamDone(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
  }
  if (IsFencing(FromGrpc(status))) {
    return ReportLost(status.error_message(), /*fenced=*/true);
  }
  ReportLost(
      absl::StrCat("event stream from coordinator at ", address_, " closed: ",
                   status.error_message().empty() ? "connection closed"
                                                  : status.error_message()));
}

void RemoteCoordinatorLink::WatchForFencing(const v1::JobEvent& event) {
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    if (!event.has_node_index() || event.node_index() != node_.node_index()) {
      return;
    }
    if (event.kind() == v1::EVENT_KIND_NODE_REGISTERED) {
      // The stream replays the job from its start: only what follows this
      // daemon's own registration is about this daemon.
      if (event.node().daemon_incarnation() == node_.daemon_incarnation()) {
        own_registration_seen_ = true;
        return;
      }
      if (own_registration_seen_) {
        reason = absl::StrCat(kDaemonFenced, "node ", node_.node_index(),
                              " was registered by a newer daemon");
      }
    } else if (event.kind() == v1::EVENT_KIND_NODE_LOST &&
               own_registration_seen_) {
      reason = absl::StrCat(kDaemonFenced, "node ", node_.node_index(),
                            " was declared lost (", event.message(),
                            "); only a new daemon can serve it again");
    }
  }
  if (!reason.empty()) ReportLost(reason, /*fenced=*/true);
}

bool RemoteCoordinatorLink::IsFencing(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StrContains(status.message(), kDaemonFenced);
}

void RemoteCoordinatorLink::ReportLost(const std::string& reason, bool fenced) {
  Listener* listener = nullptr;
  std::shared_ptr<RoundLink> round_link;
  {
    absl::MutexLock lock(&mu_);
    // Called lost on silence (its last heartbeat may have timed out as the
    // process came back from a pause), this daemon still learns later that
    // it was fenced (its own NODE_LOST event, a refused stream): that is
    // the answer that counts, and it ends the daemon.
    if (stopped_ || fenced_ || (lost_ && !fenced)) return;
    lost_ = true;
    fenced_ = fenced;
    timer_->Cancel(heartbeat_timer_);
    listener = listener_;
    round_link = round_link_;
  }
  // What waits on the round link ends now: with the heartbeats, the sweep
  // of overdue calls stops, and a hung coordinator whose host still keeps
  // the connection (keepalive answered, data acknowledged) would never end
  // them. The Rounds stream ends by gRPC's keepalive.
  if (round_link != nullptr) {
    round_link->End(absl::UnavailableError(
        absl::StrCat("the coordinator was lost: ", reason)));
  }
  if (listener == nullptr) return;
  if (fenced) {
    listener->OnFenced(reason);
  } else {
    listener->OnCoordinatorLost(reason);
  }
}

#define RANKD_FORWARD(Method, Request, Response, timeout)                     \
  void RemoteCoordinatorLink::Method(const v1::Request& request,              \
                                     Reply<v1::Response> reply) {             \
    Call<v1::Request, v1::Response>(                                          \
        request, timeout, std::move(reply),                                   \
        [this](grpc::ClientContext* c, const v1::Request* q, v1::Response* p, \
               std::function<void(grpc::Status)> f) {                         \
          stub_->async()->Method(c, q, p, std::move(f));                      \
        });                                                                   \
  }

RANKD_FORWARD(JoinRank, JoinRankRequest, JoinRankResponse,
              absl::Milliseconds(request.wait_for_world_ms()) + kDeadlineMargin)
RANKD_FORWARD(ReleaseRank, ReleaseRankRequest, ReleaseRankResponse, kShortCall)

#undef RANKD_FORWARD

// A key-value call goes over the round link while it is open, else (before
// it opens, after it ends, or without one) as a unary Peer call.
#define RANKD_FORWARD_KV(Method, field, Case)                                  \
  void RemoteCoordinatorLink::Method(const v1::Method##Request& request,       \
                                     Reply<v1::Method##Response> reply) {      \
    v1::KvLinkRequest call;                                                    \
    *call.mutable_##field() = request;                                         \
    if (ForwardOverLink(std::move(call), kShortCall, reply,                    \
                        &v1::KvLinkReply::mutable_##field,                     \
                        v1::KvLinkReply::Case, nullptr)) {                     \
      return;                                                                  \
    }                                                                          \
    Call<v1::Method##Request, v1::Method##Response>(                           \
        request, kShortCall, std::move(reply),                                 \
        [this](grpc::ClientContext* c, const v1::Method##Request* q,           \
               v1::Method##Response* p, std::function<void(grpc::Status)> f) { \
          stub_->async()->Method(c, q, p, std::move(f));                       \
        });                                                                    \
  }

RANKD_FORWARD_KV(KvSet, kv_set, kKvSet)
RANKD_FORWARD_KV(KvAdd, kv_add, kKvAdd)
RANKD_FORWARD_KV(KvDelete, kv_delete, kKvDelete)
RANKD_FORWARD_KV(KvCount, kv_count, kKvCount)

#undef RANKD_FORWARD_KV

void RemoteCoordinatorLink::ContributeWords(
    const v1::ContributeWordsRequest& request,
    Reply<v1::AllGatherWordsResponse> reply) {
  const absl::Duration timeout =
      absl::Milliseconds(request.timeout_ms()) + kDeadlineMargin;
  std::shared_ptr<RoundLink> round_link;
  std::shared_ptr<RoundStream> rounds;
  {
    absl::MutexLock lock(&mu_);
    round_link = round_link_;
    rounds = rounds_;
  }
  // Both refuse once ended (after Stop too), leaving `reply` untouched.
  const absl::Time deadline = MonotonicNow() + timeout;
  if (round_link != nullptr && round_link->Send(request, reply, deadline)) {
    return;
  }
  if (rounds != nullptr && rounds->Send(request, reply, deadline)) return;
  Call<v1::ContributeWordsRequest, v1::AllGatherWordsResponse>(
      request, timeout, std::move(reply),
      [this](grpc::ClientContext* c, const v1::ContributeWordsRequest* q,
             v1::AllGatherWordsResponse* p,
             std::function<void(grpc::Status)> f) {
        stub_->async()->ContributeWords(c, q, p, std::move(f));
      });
}

void RemoteCoordinatorLink::KvGet(const v1::KvGetRequest& request,
                                  Reply<v1::KvGetResponse> reply,
                                  const CancellationRef& cancellation) {
  const absl::Duration timeout =
      absl::Milliseconds(request.timeout_ms()) + kDeadlineMargin;
  v1::KvLinkRequest call;
  *call.mutable_kv_get() = request;
  if (ForwardOverLink(std::move(call), timeout, reply,
                      &v1::KvLinkReply::mutable_kv_get, v1::KvLinkReply::kKvGet,
                      cancellation)) {
    return;
  }
  Call<v1::KvGetRequest, v1::KvGetResponse>(
      request, timeout, std::move(reply),
      [this](grpc::ClientContext* c, const v1::KvGetRequest* q,
             v1::KvGetResponse* p, std::function<void(grpc::Status)> f) {
        stub_->async()->KvGet(c, q, p, std::move(f));
      },
      cancellation);
}

void RemoteCoordinatorLink::LeaveNode(const v1::LeaveNodeRequest& request,
                                      Reply<v1::LeaveNodeResponse> reply) {
  {
    // From here on a closing stream is expected, not a loss.
    absl::MutexLock lock(&mu_);
    lost_ = true;
    timer_->Cancel(heartbeat_timer_);
  }
  Call<v1::LeaveNodeRequest, v1::LeaveNodeResponse>(
      request, kShortCall, std::move(reply),
      [this](grpc::ClientContext* c, const v1::LeaveNodeRequest* q,
             v1::LeaveNodeResponse* p, std::function<void(grpc::Status)> f) {
        stub_->async()->LeaveNode(c, q, p, std::move(f));
      });
}

void RemoteCoordinatorLink::Stop() {
  std::unique_ptr<EventStream> stream;
  std::shared_ptr<RoundStream> rounds;
  std::shared_ptr<RoundLink> round_link;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    timer_->Cancel(heartbeat_timer_);
    stream = std::move(stream_);
    rounds = std::move(rounds_);
    round_link = std::move(round_link_);
  }
  if (stream) stream->CancelAndWait();
  if (rounds) rounds->CancelAndWait();
  if (round_link) round_link->Stop();
  // Calls still in flight reference this link: cancel them and wait.
  absl::MutexLock lock(&mu_);
  for (auto& [id, context] : inflight_) context->TryCancel();
  mu_.Await(absl::Condition(
      +[](std::map<uint64_t, grpc::ClientContext*>* calls) {
        return calls->empty();
      },
      &inflight_));
}

}  // namespace rankd
