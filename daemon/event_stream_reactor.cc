#include "daemon/event_stream_reactor.h"

#include <algorithm>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/security.h"

namespace rankd {

template <typename Message>
EventStreamReactorOf<Message>* EventStreamReactorOf<Message>::Start(
    absl::Status precheck, Open open, OnEnd on_end,
    DeadlineTimer* formation_timer) {
  // gRPC takes ownership; OnDone deletes.
  auto owned = std::unique_ptr<EventStreamReactorOf>(
      new EventStreamReactorOf(std::move(on_end)));
  EventStreamReactorOf* reactor = owned.release();
  if constexpr (std::is_same_v<Message, v1::JobEventBatch>) {
    reactor->formation_timer_ = formation_timer;
  }
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

template <typename Message>
EventStreamReactorOf<Message>::EventStreamReactorOf(OnEnd on_end)
    : on_end_(std::move(on_end)) {
  absl::MutexLock lock(&link_->mu);
  link_->reactor = this;
}

template <typename Message>
void EventStreamReactorOf<Message>::Deliver(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (closing_ || finished_) return;
  if (queue_.size() >= kMaxQueuedEvents) {
    // The client does not keep up: drop what it has not received (except
    // the event being written, whose buffer gRPC still reads) and end the
    // stream, rather than hold an unbounded backlog.
    while (queue_.size() > (writing_ ? in_flight_ : 0)) queue_.pop_back();
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
  if (writing_) return;  // it goes out with the next batch
  const bool formation = event.kind() == v1::EVENT_KIND_MEMBER_JOINED ||
                         event.kind() == v1::EVENT_KIND_NODE_REGISTERED;
  if (formation_timer_ != nullptr && formation) {
    if (!flush_scheduled_) {
      flush_scheduled_ = true;
      formation_timer_->Schedule(absl::Now() + kFormationDelay, [link = link_] {
        absl::MutexLock lock(&link->mu);
        if (link->reactor != nullptr) {
          link->reactor->Flush();
        }
      });
    }
    return;
  }
  WriteNextLocked();
}

template <typename Message>
void EventStreamReactorOf<Message>::Flush() {
  absl::MutexLock lock(&mu_);
  flush_scheduled_ = false;
  if (!writing_ && !finished_ && !queue_.empty()) WriteNextLocked();
}

template <typename Message>
void EventStreamReactorOf<Message>::WriteNextLocked() {
  writing_ = true;
  if constexpr (std::is_same_v<Message, v1::JobEventBatch>) {
    batch_.Clear();
    in_flight_ = std::min(queue_.size(), kMaxBatchEvents);
    for (size_t i = 0; i < in_flight_; ++i) {
      *batch_.add_events() = std::move(queue_[i]);
    }
    this->StartWrite(&batch_);
  } else {
    in_flight_ = 1;
    this->StartWrite(&queue_.front());
  }
}

template <typename Message>
void EventStreamReactorOf<Message>::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  queue_.erase(queue_.begin(), queue_.begin() + in_flight_);
  in_flight_ = 0;
  if (!ok) {
    // The call is broken; OnCancel/OnDone follow.
    writing_ = false;
    client_gone_ = true;
    if (!finished_) {
      finished_ = true;
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    }
    return;
  }
  // Also while closing: what was queued before the close still goes out.
  if (!queue_.empty()) return WriteNextLocked();
  writing_ = false;
  if (closing_) FinishWhenIdleLocked();
}

template <typename Message>
void EventStreamReactorOf<Message>::FinishWhenIdleLocked() {
  if (writing_ || finished_) return;
  finished_ = true;
  this->Finish(close_status_);
}

template <typename Message>
void EventStreamReactorOf<Message>::Close(absl::Status status,
                                          bool client_gone) {
  absl::MutexLock lock(&mu_);
  if (closing_ || finished_) return;
  closing_ = true;
  client_gone_ = client_gone_ || client_gone;
  close_status_ = ToGrpc(status);
  // Held formation events go out before the close.
  if (!writing_ && !queue_.empty() && !client_gone_) WriteNextLocked();
  FinishWhenIdleLocked();
}

template <typename Message>
void EventStreamReactorOf<Message>::OnCancel() {
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
    this->Finish(grpc::Status::CANCELLED);
  }
}

template <typename Message>
void EventStreamReactorOf<Message>::OnDone() {
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

template class EventStreamReactorOf<v1::JobEvent>;
template class EventStreamReactorOf<v1::JobEventBatch>;

}  // namespace rankd
