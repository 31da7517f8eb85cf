#include "daemon/node/coordinator_link.h"

#include <utility>

#include "common/monotonic_clock.h"

namespace rankd {

LocalCoordinatorLink::LocalCoordinatorLink(Coordinator* coordinator,
                                           DeadlineTimer* timer,
                                           std::string address)
    : coordinator_(coordinator), timer_(timer), address_(std::move(address)) {}

LocalCoordinatorLink::~LocalCoordinatorLink() { Stop(); }

void LocalCoordinatorLink::Start(const v1::RegisterNodeRequest& request,
                                 absl::Time /*register_deadline*/,
                                 Listener* listener,
                                 Reply<v1::RegisterNodeResponse> registered) {
  auto response = coordinator_->RegisterNode(request);
  if (!response.ok()) return registered(response.status());
  v1::NodeRef node;
  node.set_job_id(request.config().job_id());
  node.set_node_index(request.node().node_index());
  node.set_daemon_incarnation(request.node().daemon_incarnation());
  v1::SubscribeRequest subscribe;
  *subscribe.mutable_node() = node;
  // Deliver from the registration on: earlier events describe a job
  // formation this node has not seen, but replaying them is harmless and
  // keeps every daemon's mirror identical.
  subscribe.set_after_sequence(0);
  auto id = coordinator_->Subscribe(
      subscribe, [listener](const v1::JobEvent& e) { listener->OnEvent(e); });
  if (!id.ok()) return registered(id.status());
  {
    absl::MutexLock lock(&mu_);
    node_ = node;
    subscription_ = *id;
    heartbeat_timer_ = timer_->Schedule(
        MonotonicNow() + coordinator_->spec().heartbeat_interval,
        [this] { Beat(); });
  }
  registered(*response);
}

void LocalCoordinatorLink::Beat() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  v1::HeartbeatRequest request;
  *request.mutable_node() = node_;
  (void)coordinator_->Heartbeat(request);
  heartbeat_timer_ =
      timer_->Schedule(MonotonicNow() + coordinator_->spec().heartbeat_interval,
                       [this] { Beat(); });
}

template <typename T>
static void Answer(absl::StatusOr<T> result, const Reply<T>& reply) {
  reply(std::move(result));
}

void LocalCoordinatorLink::JoinRank(const v1::JoinRankRequest& request,
                                    Reply<v1::JoinRankResponse> reply) {
  coordinator_->JoinRank(request, std::move(reply));
}

void LocalCoordinatorLink::ReleaseRank(const v1::ReleaseRankRequest& request,
                                       Reply<v1::ReleaseRankResponse> reply) {
  Answer(coordinator_->ReleaseRank(request), reply);
}

void LocalCoordinatorLink::ContributeWords(
    const v1::ContributeWordsRequest& request,
    Reply<v1::AllGatherWordsResponse> reply) {
  coordinator_->ContributeWords(request, std::move(reply));
}

void LocalCoordinatorLink::KvSet(const v1::KvSetRequest& request,
                                 Reply<v1::KvSetResponse> reply) {
  Answer(coordinator_->KvSet(request), reply);
}

void LocalCoordinatorLink::KvGet(const v1::KvGetRequest& request,
                                 Reply<v1::KvGetResponse> reply,
                                 const CancellationRef& cancellation) {
  coordinator_->KvGet(request, std::move(reply), cancellation);
}

void LocalCoordinatorLink::KvAdd(const v1::KvAddRequest& request,
                                 Reply<v1::KvAddResponse> reply) {
  Answer(coordinator_->KvAdd(request), reply);
}

void LocalCoordinatorLink::KvDelete(const v1::KvDeleteRequest& request,
                                    Reply<v1::KvDeleteResponse> reply) {
  Answer(coordinator_->KvDelete(request), reply);
}

void LocalCoordinatorLink::KvCount(const v1::KvCountRequest& request,
                                   Reply<v1::KvCountResponse> reply) {
  Answer(coordinator_->KvCount(request), reply);
}

void LocalCoordinatorLink::LeaveNode(const v1::LeaveNodeRequest& request,
                                     Reply<v1::LeaveNodeResponse> reply) {
  auto result = coordinator_->LeaveNode(request);
  Stop();
  reply(std::move(result));
}

void LocalCoordinatorLink::Stop() {
  EventLog::SubscriptionId subscription = 0;
  v1::NodeRef node;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    timer_->Cancel(heartbeat_timer_);
    subscription = subscription_;
    node = node_;
  }
  if (subscription != 0) {
    coordinator_->EndSubscription(subscription, node, /*connection_lost=*/false,
                                  "stopped");
  }
}

}  // namespace rankd
