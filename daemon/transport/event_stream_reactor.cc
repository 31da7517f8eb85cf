#include "daemon/transport/event_stream_reactor.h"

#include <algorithm>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"
#include "daemon/transport/security.h"

namespace rankd {

grpc::Slice EventEncoder::Encode(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (event.sequence() != 0 && event.sequence() == last_sequence_) {
    return last_;  // a reference, not a copy
  }
  const std::string body = event.SerializeAsString();
  std::string element;
  element.reserve(body.size() + 6);
  element.push_back(static_cast<char>((1 << 3) | 2));  // field 1, bytes
  for (uint64_t n = body.size();; n >>= 7) {
    const uint8_t low = n & 0x7f;
    if (n < 0x80) {
      element.push_back(static_cast<char>(low));
      break;
    }
    element.push_back(static_cast<char>(low | 0x80));
  }
  element += body;
  last_ = grpc::Slice(element);
  last_sequence_ = event.sequence();
  return last_;
}

template <typename Message>
EventStreamReactorOf<Message>* EventStreamReactorOf<Message>::Start(
    absl::Status precheck, Open open, OnEnd on_end,
    DeadlineTimer* formation_timer, EventEncoder* encoder) {
  // gRPC takes ownership; OnDone deletes.
  auto owned = std::unique_ptr<EventStreamReactorOf>(
      new EventStreamReactorOf(std::move(on_end)));
  EventStreamReactorOf* reactor = owned.release();
  if constexpr (kBatches) {
    reactor->formation_timer_ = formation_timer;
    reactor->encoder_ = encoder;
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
                     "the last sequence number received (refused with "
                     "OUT_OF_RANGE where the events after it are no longer "
                     "kept)"));
    FinishWhenIdleLocked();
    return;
  }
  if constexpr (kBatches) {
    queue_.push_back(encoder_->Encode(event));
  } else {
    queue_.push_back(event);
  }
  const bool formation = event.kind() == v1::EVENT_KIND_MEMBER_JOINED ||
                         event.kind() == v1::EVENT_KIND_NODE_REGISTERED;
  if (!formation) urgent_ = true;
  if (writing_) return;  // it goes out with the next batch
  if (formation_timer_ != nullptr && !urgent_) return HoldLocked();
  WriteNextLocked();
}

template <typename Message>
void EventStreamReactorOf<Message>::HoldLocked() {
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  // A storm (this hold follows the last flush closely) waits longer each
  // time, up to kMaxFormationDelay; a lone event waits kFormationDelay.
  const absl::Time now = MonotonicNow();
  hold_ = now - last_flush_ > 2 * hold_
              ? kFormationDelay
              : std::min(2 * hold_, kMaxFormationDelay);
  formation_timer_->Schedule(now + hold_, [link = link_] {
    absl::MutexLock lock(&link->mu);
    if (link->reactor != nullptr) link->reactor->Flush();
  });
}

template <typename Message>
void EventStreamReactorOf<Message>::Flush() {
  absl::MutexLock lock(&mu_);
  flush_scheduled_ = false;
  last_flush_ = MonotonicNow();
  if (!writing_ && !finished_ && !queue_.empty()) WriteNextLocked();
}

template <typename Message>
void EventStreamReactorOf<Message>::WriteNextLocked() {
  writing_ = true;
  if constexpr (kBatches) {
    // The message is the events' encodings one after another, each taken
    // by reference.
    in_flight_ = std::min(queue_.size(), kMaxBatchEvents);
    if (in_flight_ == queue_.size()) urgent_ = false;
    std::vector<grpc::Slice> parts(queue_.begin(), queue_.begin() + in_flight_);
    batch_ = grpc::ByteBuffer(parts.data(), parts.size());
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
  // Formation events that came during the write wait for company.
  if (!queue_.empty()) {
    if (formation_timer_ == nullptr || urgent_ || closing_) {
      return WriteNextLocked();
    }
    writing_ = false;
    return HoldLocked();
  }
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
template class EventStreamReactorOf<grpc::ByteBuffer>;

}  // namespace rankd
