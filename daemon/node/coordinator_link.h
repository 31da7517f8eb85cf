// CoordinatorLink: how a daemon's NodeAgent reaches its job's coordinator.
//
// Two implementations: LocalCoordinatorLink for the coordinating daemon
// (in-process calls) and RemoteCoordinatorLink (remote_coordinator.h) for
// every other daemon (gRPC to the coordinator's Peer service, rounds and
// key-value calls over the round link while it is open). Both
// register the node, heartbeat, follow the coordinator's event stream, and
// forward rank requests. Replies may run on any thread, never with the
// link's locks held. Depends on Coordinator and the protos.
#ifndef RANKD_DAEMON_COORDINATOR_LINK_H_
#define RANKD_DAEMON_COORDINATOR_LINK_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/deadline_timer.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

class CoordinatorLink {
 public:
  // Receives what the coordinator pushes. Callbacks must not block.
  class Listener {
   public:
    virtual ~Listener() = default;
    // Every job event, in sequence order, starting after registration.
    virtual void OnEvent(const v1::JobEvent& event) = 0;
    // The coordinator cannot be reached any more (heartbeats unanswered for
    // the heartbeat timeout, or its event stream broke). Called once.
    virtual void OnCoordinatorLost(const std::string& reason) = 0;
    // The coordinator refused this daemon for good: its node was declared
    // lost, or a newer daemon registered for it (a heartbeat answered with
    // kDaemonFenced, or the event stream said so after this daemon's own
    // registration). Called once, instead of OnCoordinatorLost.
    virtual void OnFenced(const std::string& reason) {
      OnCoordinatorLost(reason);
    }
  };

  virtual ~CoordinatorLink() = default;

  // Registers this node (retrying while the coordinator is unreachable,
  // until `register_deadline`), then follows the event stream and sends
  // heartbeats. `registered` runs once with the coordinator's answer or the
  // final error. `listener` must outlive the link.
  virtual void Start(const v1::RegisterNodeRequest& request,
                     absl::Time register_deadline, Listener* listener,
                     Reply<v1::RegisterNodeResponse> registered) = 0;

  virtual void JoinRank(const v1::JoinRankRequest& request,
                        Reply<v1::JoinRankResponse> reply) = 0;
  virtual void ReleaseRank(const v1::ReleaseRankRequest& request,
                           Reply<v1::ReleaseRankResponse> reply) = 0;
  virtual void ContributeWords(const v1::ContributeWordsRequest& request,
                               Reply<v1::AllGatherWordsResponse> reply) = 0;
  virtual void KvSet(const v1::KvSetRequest& request,
                     Reply<v1::KvSetResponse> reply) = 0;
  // `cancellation` (may be null) releases the wait when the rank cancels.
  virtual void KvGet(const v1::KvGetRequest& request,
                     Reply<v1::KvGetResponse> reply,
                     const CancellationRef& cancellation) = 0;
  virtual void KvAdd(const v1::KvAddRequest& request,
                     Reply<v1::KvAddResponse> reply) = 0;
  virtual void KvDelete(const v1::KvDeleteRequest& request,
                        Reply<v1::KvDeleteResponse> reply) = 0;
  virtual void KvCount(const v1::KvCountRequest& request,
                       Reply<v1::KvCountResponse> reply) = 0;
  // Tells the coordinator this daemon is leaving, then stops heartbeats and
  // the event stream without reporting the coordinator lost.
  virtual void LeaveNode(const v1::LeaveNodeRequest& request,
                         Reply<v1::LeaveNodeResponse> reply) = 0;
  // Stops heartbeats and the event stream (no more listener calls after it
  // returns). Idempotent.
  virtual void Stop() = 0;

  // "in-process" or the coordinator's host:port, for messages.
  virtual std::string coordinator_address() const = 0;
};

// The coordinating daemon's link to its own Coordinator.
class LocalCoordinatorLink : public CoordinatorLink {
 public:
  // `coordinator` and `timer` must outlive the link.
  LocalCoordinatorLink(Coordinator* coordinator, DeadlineTimer* timer,
                       std::string address);
  ~LocalCoordinatorLink() override;

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

 private:
  void Beat();

  Coordinator* const coordinator_;
  DeadlineTimer* const timer_;
  const std::string address_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  v1::NodeRef node_ ABSL_GUARDED_BY(mu_);
  EventLog::SubscriptionId subscription_ ABSL_GUARDED_BY(mu_) = 0;
  DeadlineTimer::TimerId heartbeat_timer_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_COORDINATOR_LINK_H_
