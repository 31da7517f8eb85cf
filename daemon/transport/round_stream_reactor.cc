#include "daemon/transport/round_stream_reactor.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/transport/security.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace rankd {
namespace {

// A slice over the outcome's encoding that keeps the outcome alive until
// gRPC has sent it (no copy of the bytes).
grpc::Slice SharedEncoding(std::shared_ptr<const WordRounds::Outcome> outcome) {
  const std::string& bytes = outcome->Encoded();
  auto holder =
      std::make_unique<std::shared_ptr<const WordRounds::Outcome>>(outcome);
  return grpc::Slice(
      const_cast<char*>(bytes.data()), bytes.size(),
      [](void* p) {
        // Takes back the holder released below.
        std::unique_ptr<std::shared_ptr<const WordRounds::Outcome>> owned(
            static_cast<std::shared_ptr<const WordRounds::Outcome>*>(p));
      },
      holder.release());
}

}  // namespace

RoundStreamReactor* RoundStreamReactor::Start(absl::Status precheck,
                                              Authorize authorize,
                                              Contribute contribute) {
  // gRPC takes ownership; OnDone deletes.
  auto owned = std::unique_ptr<RoundStreamReactor>(
      new RoundStreamReactor(std::move(authorize), std::move(contribute)));
  RoundStreamReactor* reactor = owned.release();
  absl::MutexLock lock(&reactor->mu_);
  if (!precheck.ok()) {
    reactor->CloseLocked(ToGrpc(precheck));
  } else {
    reactor->StartRead(&reactor->incoming_);
  }
  return reactor;
}

RoundStreamReactor::RoundStreamReactor(Authorize authorize,
                                       Contribute contribute)
    : authorize_(std::move(authorize)), contribute_(std::move(contribute)) {
  absl::MutexLock lock(&link_->mu);
  link_->reactor = this;
}

void RoundStreamReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The node half-closed (or the call broke: OnCancel follows).
    absl::MutexLock lock(&mu_);
    reads_done_ = true;
    if (unanswered_ == 0) CloseLocked(grpc::Status::OK);
    return;
  }
  v1::ContributeWordsRequest request;
  grpc::Status parsed =
      grpc::SerializationTraits<v1::ContributeWordsRequest>::Deserialize(
          &incoming_, &request);
  absl::Status allowed =
      parsed.ok() ? authorize_(request)
                  : absl::InvalidArgumentError(absl::StrCat(
                        "a Rounds message is not a ContributeWordsRequest: ",
                        parsed.error_message()));
  {
    absl::MutexLock lock(&mu_);
    if (closing_ || finished_) return;
    if (!allowed.ok()) {
      CloseLocked(ToGrpc(allowed));
      return;
    }
    ++unanswered_;
  }
  const uint64_t tag = request.tag();
  contribute_(request, [link = link_, tag](
                           std::shared_ptr<const WordRounds::Outcome> outcome) {
    absl::MutexLock lock(&link->mu);
    if (link->reactor != nullptr)
      link->reactor->Deliver(std::move(outcome), tag);
  });
  absl::MutexLock lock(&mu_);
  if (!closing_ && !finished_) StartRead(&incoming_);
}

void RoundStreamReactor::Deliver(
    std::shared_ptr<const WordRounds::Outcome> outcome, uint64_t tag) {
  absl::MutexLock lock(&mu_);
  if (unanswered_ > 0) --unanswered_;
  if (closing_ || finished_) return;
  if (queue_.size() >= kMaxQueuedOutcomes) {
    // The node does not read: drop what waits (except the message being
    // written, whose bytes gRPC still reads) rather than hold a backlog.
    while (queue_.size() > (writing_ ? 1 : 0)) queue_.pop_back();
    CloseLocked(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("more than ", kMaxQueuedOutcomes,
                     " round outcomes waited for this node to read them")));
    return;
  }
  grpc::Slice parts[2] = {SharedEncoding(std::move(outcome)),
                          grpc::Slice(WordRounds::Outcome::TagSuffix(tag))};
  queue_.emplace_back(parts, 2);
  if (!writing_) WriteNextLocked();
}

void RoundStreamReactor::WriteNextLocked() {
  writing_ = true;
  StartWrite(&queue_.front());
}

void RoundStreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  queue_.pop_front();
  writing_ = false;
  if (!ok) {
    // The call is broken; OnCancel/OnDone follow.
    closing_ = true;
    close_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
    FinishWhenIdleLocked();
    return;
  }
  if (!queue_.empty()) return WriteNextLocked();
  if (reads_done_ && unanswered_ == 0 && !closing_) {
    closing_ = true;
    close_status_ = grpc::Status::OK;
  }
  if (closing_) FinishWhenIdleLocked();
}

void RoundStreamReactor::CloseLocked(grpc::Status status) {
  if (closing_ || finished_) return;
  closing_ = true;
  close_status_ = std::move(status);
  FinishWhenIdleLocked();
}

void RoundStreamReactor::FinishWhenIdleLocked() {
  if (writing_ || finished_) return;
  finished_ = true;
  Finish(close_status_);
}

void RoundStreamReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  CloseLocked(grpc::Status::CANCELLED);
}

void RoundStreamReactor::OnDone() {
  {
    // First: from now on pending outcomes are dropped, and none is inside.
    absl::MutexLock lock(&link_->mu);
    link_->reactor = nullptr;
  }
  delete this;
}

}  // namespace rankd
