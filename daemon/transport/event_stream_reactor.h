// EventStreamReactor: a server-streaming gRPC call that delivers JobEvents
// from a subscription (a rank's Watch, a node's Subscribe, an operator's
// WatchEvents) with flow control: events are queued and written one at a
// time. It tells its owner when the stream ends and whether the client
// went away (the liveness signal for ranks and nodes).
//
// Lifetime: gRPC owns the reactor and deletes it once the call is over
// (OnDone), possibly while a subscriber still holds its sinks (a shutdown
// that copied every stream's closer, an event published concurrently). The
// sinks refer to the reactor through a link that OnDone cuts first, so a
// sink called after the stream ended does nothing.
//
// Bounds: at most kMaxQueuedEvents events wait for a client; one more ends
// the stream with RESOURCE_EXHAUSTED (a client that stopped reading; it may
// subscribe again from its last sequence number, which is refused with
// OUT_OF_RANGE where the events after it are no longer kept: EventLog::
// Resume). A close lets the events
// queued before it go out first.
//
// Two message shapes: EventStreamReactor writes one JobEvent per message
// (Rank.Watch, Admin.WatchEvents); EventBatchStreamReactor writes a
// JobEventBatch (raw bytes, from EventEncoder's shared encodings) of every
// event queued while the previous write was in flight, up to
// kMaxBatchEvents (Peer.Subscribe: when thousands of ranks
// join at once, the coordinator writes each node a few large messages, not
// one message per rank per node). With a timer, the batching reactor
// also holds formation events (MEMBER_JOINED, NODE_REGISTERED), also those
// that arrive while a write is under way, for kFormationDelay, longer
// during a storm (up to kMaxFormationDelay), so that a join storm is written
// to each node a few dozen times, not once per join; any other event (a
// failure, the job ready) goes out at once, after what is held.
//
// Depends on gRPC, the protos and daemon/transport/security.h.
#ifndef RANKD_DAEMON_EVENT_STREAM_REACTOR_H_
#define RANKD_DAEMON_EVENT_STREAM_REACTOR_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/event_log.h"
#include "daemon/deadline_timer.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/common.pb.h"
#include "rankd/v1/peer.pb.h"

namespace rankd {

// Encodes each job event once as one element of a JobEventBatch (field 1,
// length-delimited), so that every node stream carrying it sends the same
// bytes by reference: when a join reaches 512 nodes, the event is encoded
// once, not 512 times. Remembers the last event's encoding (the event log
// hands one event to every subscriber in turn). Thread-safe.
class EventEncoder {
 public:
  grpc::Slice Encode(const v1::JobEvent& event);

 private:
  absl::Mutex mu_;
  uint64_t last_sequence_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none
  grpc::Slice last_ ABSL_GUARDED_BY(mu_);
};

// `Message` is v1::JobEvent (one event per message) or grpc::ByteBuffer
// (a JobEventBatch assembled from EventEncoder's shared encodings); the
// only two instantiations, see the aliases below.
template <typename Message>
class EventStreamReactorOf : public grpc::ServerWriteReactor<Message> {
 public:
  // Events one stream may hold for a client that does not keep up: twice
  // the event log's history (EventLog::kDefaultCapacity), so the full
  // replay a new subscription starts with fits, and as many live events
  // again.
  static constexpr size_t kMaxQueuedEvents = 2 * EventLog::kDefaultCapacity;
  // Most events one JobEventBatch carries.
  static constexpr size_t kMaxBatchEvents = 1024;
  // How long a formation event waits for more to share its message: a lone
  // one kFormationDelay; during a storm (each hold following the last
  // flush closely) the wait doubles up to kMaxFormationDelay, so a node
  // gets a join storm in a few dozen messages, not hundreds.
  static constexpr absl::Duration kFormationDelay = absl::Milliseconds(20);
  static constexpr absl::Duration kMaxFormationDelay = absl::Milliseconds(160);

  // Sinks handed to the subscription: `deliver` queues an event, `close`
  // finishes the stream with a status (after the events already queued).
  // Both are safe from any thread, and do nothing once the stream ended.
  struct Sinks {
    std::function<void(const v1::JobEvent&)> deliver;
    std::function<void(absl::Status)> close;
  };
  // Subscribes; returns an id for `on_end`, or an error that ends the call.
  using Open = std::function<absl::StatusOr<uint64_t>(Sinks)>;
  // Called once when the stream is over. `client_gone` is true when the
  // client cancelled or its connection broke (not when we closed it).
  using OnEnd = std::function<void(uint64_t id, bool client_gone,
                                   const std::string& reason)>;

  // Creates the reactor; gRPC owns it and it deletes itself in OnDone.
  // `precheck` (e.g. authentication) is OK or ends the call at once.
  // For batches: `encoder` (required) encodes the events, shared by every
  // stream of the service; `formation_timer` (may be null) holds formation
  // events as described above. Both must outlive the stream's callbacks
  // (the daemon's: the server is shut down before them).
  static EventStreamReactorOf* Start(absl::Status precheck, Open open,
                                     OnEnd on_end,
                                     DeadlineTimer* formation_timer = nullptr,
                                     EventEncoder* encoder = nullptr);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // What the sinks reach: the reactor until OnDone cuts the link.
  struct Link {
    absl::Mutex mu;
    EventStreamReactorOf* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  explicit EventStreamReactorOf(OnEnd on_end);
  void Deliver(const v1::JobEvent& event);
  // Writes what formation events are held, unless a write is under way.
  void Flush();
  // Schedules a Flush for held formation events (once).
  void HoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(absl::Status status, bool client_gone);
  // Finishes with close_status_ once nothing is being written.
  void FinishWhenIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the front of the queue (one event, or a batch of them).
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<Link> link_ = std::make_shared<Link>();
  OnEnd on_end_;
  absl::Mutex mu_;
  // Events (batches: their shared encodings) waiting or being written.
  static constexpr bool kBatches = std::is_same_v<Message, grpc::ByteBuffer>;
  using Queued = std::conditional_t<kBatches, grpc::Slice, v1::JobEvent>;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // The batch being written, and how many queued events it took (they stay
  // queued until the write completes).
  grpc::ByteBuffer batch_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  DeadlineTimer* formation_timer_ = nullptr;
  EventEncoder* encoder_ = nullptr;
  bool flush_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  // A queued event that must not wait (anything but a formation event).
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration hold_ ABSL_GUARDED_BY(mu_) = kFormationDelay;
  absl::Time last_flush_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status close_status_ ABSL_GUARDED_BY(mu_);
  bool subscribed_ = false;
  uint64_t id_ = 0;
};

using EventStreamReactor = EventStreamReactorOf<v1::JobEvent>;
using EventBatchStreamReactor = EventStreamReactorOf<grpc::ByteBuffer>;

}  // namespace rankd

#endif  // RANKD_DAEMON_EVENT_STREAM_REACTOR_H_
