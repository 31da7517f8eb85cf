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

#include "absl/synchronization/mutex.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

class EventLog {
 public:
  using Subscriber = std::function<void(const v1::JobEvent&)>;
  using SubscriptionId = uint64_t;

  // Keeps at most `capacity` events for replay; older ones are dropped
  // (subscribers that ask for them get the oldest kept onwards).
  explicit EventLog(size_t capacity = 4096);

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
  // later event as it is appended, in order, from the appending thread while
  // the log's lock is held: the subscriber must only queue the event and
  // must not call back into this log.
  SubscriptionId Subscribe(uint64_t after, Subscriber subscriber);

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
  std::map<SubscriptionId, Subscriber> subscribers_ ABSL_GUARDED_BY(mu_);
};

// "MEMBER_LOST" etc. without the EVENT_KIND_ prefix.
std::string EventKindName(v1::EventKind kind);

// One line describing an event for logs and rankctl.
std::string DescribeEvent(const v1::JobEvent& event);

}  // namespace rankd

#endif  // RANKD_DAEMON_EVENT_LOG_H_
