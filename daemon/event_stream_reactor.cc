#include "daemon/event_stream_reactor.h"

#include <memory>
#include <utility>

#include "daemon/security.h"

namespace rankd {

EventStreamReactor* EventStreamReactor::Start(absl::Status precheck, Open open,
                                              OnEnd on_end) {
  // gRPC takes ownership; OnDone deletes.
  auto owned = std::unique_ptr<EventStreamReactor>(
      new EventStreamReactor(std::move(on_end)));
  EventStreamReactor* reactor = owned.release();
  if (!precheck.ok()) {
    reactor->Close(precheck, false);
    return reactor;
  }
  Sinks sinks;
  sinks.deliver = [reactor](const v1::JobEvent& e) { reactor->Deliver(e); };
  sinks.close = [reactor](absl::Status s) { reactor->Close(s, false); };
  absl::StatusOr<uint64_t> id = open(std::move(sinks));
  if (!id.ok()) {
    reactor->Close(id.status(), false);
    return reactor;
  }
  reactor->subscribed_ = true;
  reactor->id_ = *id;
  return reactor;
}

EventStreamReactor::EventStreamReactor(OnEnd on_end)
    : on_end_(std::move(on_end)) {}

void EventStreamReactor::Deliver(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (closing_ || finished_) return;
  queue_.push_back(event);
  if (!writing_) {
    writing_ = true;
    StartWrite(&queue_.front());
  }
}

void EventStreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  queue_.pop_front();
  if (!ok) {
    // The call is broken; OnCancel/OnDone follow.
    writing_ = false;
    client_gone_ = true;
    if (!finished_) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    }
    return;
  }
  if (!queue_.empty() && !closing_) {
    StartWrite(&queue_.front());
    return;
  }
  writing_ = false;
  if (closing_ && !finished_) {
    finished_ = true;
    Finish(close_status_);
  }
}

void EventStreamReactor::Close(absl::Status status, bool client_gone) {
  absl::MutexLock lock(&mu_);
  if (closing_ || finished_) return;
  closing_ = true;
  client_gone_ = client_gone_ || client_gone;
  close_status_ = ToGrpc(status);
  if (!writing_) {
    finished_ = true;
    Finish(close_status_);
  }
}

void EventStreamReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    if (finished_) return;
    // A write in progress completes with ok=false and finishes the call.
    if (writing_) {
      closing_ = true;
      return;
    }
    finished_ = true;
    Finish(grpc::Status::CANCELLED);
  }
}

void EventStreamReactor::OnDone() {
  bool gone;
  {
    absl::MutexLock lock(&mu_);
    gone = client_gone_;
  }
  if (subscribed_) {
    on_end_(id_, gone, gone ? "client cancelled or disconnected" : "closed");
  }
  delete this;
}

}  // namespace rankd
