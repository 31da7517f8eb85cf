#include "daemon/event_stream_reactor.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
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
  // Held across the call into the reactor, so OnDone cannot delete it
  // meanwhile; once OnDone cut the link, a sink does nothing.
  std::shared_ptr<Link> link = reactor->link_;
  Sinks sinks;
  sinks.deliver = [link](const v1::JobEvent& e) {
    absl::MutexLock lock(&link->mu);
    if (link->reactor != nullptr) link->reactor->Deliver(e);
  };
  sinks.close = [link](absl::Status s) {
    absl::MutexLock lock(&link->mu);
    if (link->reactor != nullptr) link->reactor->Close(std::move(s), false);
  };
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
    : on_end_(std::move(on_end)) {
  absl::MutexLock lock(&link_->mu);
  link_->reactor = this;
}

void EventStreamReactor::Deliver(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (closing_ || finished_) return;
  if (queue_.size() >= kMaxQueuedEvents) {
    // The client does not keep up: drop what it has not received (except
    // the event being written, whose buffer gRPC still reads) and end the
    // stream, rather than hold an unbounded backlog.
    while (queue_.size() > (writing_ ? 1 : 0)) queue_.pop_back();
    closing_ = true;
    close_status_ = grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("more than ", kMaxQueuedEvents,
                     " events waited for this stream's client; resume from "
                     "the last sequence number received"));
    FinishWhenIdleLocked();
    return;
  }
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
  // Also while closing: what was queued before the close still goes out.
  if (!queue_.empty()) {
    StartWrite(&queue_.front());
    return;
  }
  writing_ = false;
  if (closing_) FinishWhenIdleLocked();
}

void EventStreamReactor::FinishWhenIdleLocked() {
  if (writing_ || finished_) return;
  finished_ = true;
  Finish(close_status_);
}

void EventStreamReactor::Close(absl::Status status, bool client_gone) {
  absl::MutexLock lock(&mu_);
  if (closing_ || finished_) return;
  closing_ = true;
  client_gone_ = client_gone_ || client_gone;
  close_status_ = ToGrpc(status);
  FinishWhenIdleLocked();
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
  {
    // First: from now on the sinks do nothing, and none is inside.
    absl::MutexLock lock(&link_->mu);
    link_->reactor = nullptr;
  }
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
