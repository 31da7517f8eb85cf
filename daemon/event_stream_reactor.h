// EventStreamReactor: a server-streaming gRPC call that delivers JobEvents
// from a subscription (a rank's Watch, a node's Subscribe, an operator's
// WatchEvents) with flow control: events are queued and written one at a
// time. It tells its owner when the stream ends and whether the client
// went away (the liveness signal for ranks and nodes). Depends on gRPC and
// the protos.
#ifndef RANKD_DAEMON_EVENT_STREAM_REACTOR_H_
#define RANKD_DAEMON_EVENT_STREAM_REACTOR_H_

#include <deque>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/common.pb.h"

namespace rankd {

class EventStreamReactor : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  // Sinks handed to the subscription: `deliver` queues an event, `close`
  // finishes the stream with a status. Both are safe from any thread.
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
  static EventStreamReactor* Start(absl::Status precheck, Open open,
                                   OnEnd on_end);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  explicit EventStreamReactor(OnEnd on_end);
  void Deliver(const v1::JobEvent& event);
  void Close(absl::Status status, bool client_gone);

  OnEnd on_end_;
  absl::Mutex mu_;
  std::deque<v1::JobEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status close_status_ ABSL_GUARDED_BY(mu_);
  bool subscribed_ = false;
  uint64_t id_ = 0;
};

}  // namespace rankd

#endif  // RANKD_DAEMON_EVENT_STREAM_REACTOR_H_
