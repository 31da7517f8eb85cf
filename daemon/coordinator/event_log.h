// EventLog: the ordered, sequence-numbered record of a job's membership and
// state changes, with live subscribers.
//
// The coordinator owns the authoritative log (it assigns sequence numbers);
// every daemon keeps a mirror fed from the coordinator, from which its local
// ranks' Watch streams are served. Depends on the rankd.v1 protos and absl.
#ifndef RANKD_DAEMON_EVENT_LOG_H_
#define RANKD_DAEMON_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

class EventLog {
 public:
  using Subscriber = std::function<void(const v1::JobEvent&)>;
  using SubscriptionId = uint64_t;

  // Events kept for replay by default (a new stream replays them all at
  // once, so a stream queues at least this many).
  static constexpr size_t kDefaultCapacity = 8192;

  // Keeps at most `capacity` events for replay; older ones are dropped
  // (Subscribe from before them gets the oldest kept onwards; Resume
  // refuses).
  explicit EventLog(size_t capacity = kDefaultCapacity);

  // Appends a new event numbered last_sequence()+1, stamped now, and hands
  // it to every subscriber before returning. Returns the event.
  v1::JobEvent Append(v1::EventKind kind, std::optional<uint32_t> node_index,
                      std::vector<uint32_t> ranks, std::string message);

  // Appends `event` (kind, node, ranks, message and details as given),
  // numbered last_sequence()+1 and stamped now. Returns the stored event.
  v1::JobEvent Append(v1::JobEvent event);

  // Appends an event numbered elsewhere (a mirror of the coordinator's log).
  // Events at or below last_sequence() are ignored (duplicates after a
  // resubscribe). Returns false when ignored.
  bool Mirror(const v1::JobEvent& event);

  uint64_t last_sequence() const;

  // Events with sequence > after, oldest first.
  std::vector<v1::JobEvent> Since(uint64_t after) const;

  // Calls `subscriber` with every kept event after `after`, then with every
  // later event after `after` as it is appended, in order, from the
  // appending thread while the log's lock is held: the subscriber must only
  // queue the event and must not call back into this log. Events after
  // `after` that were dropped already are skipped (see Resume).
  SubscriptionId Subscribe(uint64_t after, Subscriber subscriber);

  // Subscribe for a client that has seen every event up to `after` (> 0):
  // OutOfRange, naming the oldest kept event, when events after `after`
  // were dropped already (it would miss them unseen). `after` 0 is
  // Subscribe.
  absl::StatusOr<SubscriptionId> Resume(uint64_t after, Subscriber subscriber);

  // The oldest kept event's sequence number; last_sequence()+1 when none is
  // kept. Events before it were dropped (or never existed: 1).
  uint64_t first_kept() const;

  // Stops deliveries; when it returns, the subscriber is not running and
  // will not be called again. Unknown ids are ignored.
  void Unsubscribe(SubscriptionId id);

 private:
  void DeliverLocked(const v1::JobEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<v1::JobEvent> events_ ABSL_GUARDED_BY(mu_);
  uint64_t last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  SubscriptionId next_subscription_ ABSL_GUARDED_BY(mu_) = 1;
  struct Subscription {
    uint64_t after;  // events up to this one are not wanted
    Subscriber deliver;
  };
  SubscriptionId SubscribeLocked(uint64_t after, Subscriber subscriber)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t FirstKeptLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::map<SubscriptionId, Subscription> subscribers_ ABSL_GUARDED_BY(mu_);
};

// "MEMBER_LOST" etc. without the EVENT_KIND_ prefix.
std::string EventKindName(v1::EventKind kind);

// One line describing an event for logs and rankctl.
std::string DescribeEvent(const v1::JobEvent& event);

}  // namespace rankd

#endif  // RANKD_DAEMON_EVENT_LOG_H_
