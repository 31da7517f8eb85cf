// client/internal/round_call.cc: see round_call.h.

#include "client/internal/round_call.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/status.h"

namespace rankd::internal {
namespace {

// Time granted to the daemon beyond a round's own timeout, so that its
// answer (which names the missing ranks) arrives before the client-side
// deadline would cut it off with a bare DEADLINE_EXCEEDED.
constexpr absl::Duration kRoundGrace = absl::Seconds(5);
// How long a round that must go over gRPC waits for the daemon to take the
// rank's earlier slot rounds (its watcher does so within microseconds).
constexpr absl::Duration kTakePatience = absl::Seconds(5);

}  // namespace

void RoundCall::Start(const std::shared_ptr<RoundCall>& self,
                      absl::Duration rpc_timeout) {
  self->rpc_timeout_ = rpc_timeout;
  self->core_->grpc_rounds_in_flight.fetch_add(1);
  self->core_->conn->PrepareContext(&self->context_, rpc_timeout);
  self->core_->stub->async()->AllGatherWords(
      &self->context_, &self->request_, &self->response_,
      [self](grpc::Status status) { self->OnDone(status); });
}

void RoundCall::StartOnSlots(std::shared_ptr<RoundSlotClient> slots,
                             uint64_t sequence, absl::Duration answer_timeout) {
  slots_ = std::move(slots);
  sequence_ = sequence;
  answer_timeout_ = answer_timeout;
  answer_deadline_ = MonotonicNow() + answer_timeout;
}

void RoundCall::Cancel() {
  if (IsDone()) return;
  if (slots_ != nullptr) {
    absl::MutexLock lock(&mu_);
    if (done_.HasBeenNotified()) return;
    slots_->Abandon(sequence_);
    FinishLocked(absl::CancelledError(
        absl::StrCat(Context(), ": cancelled by the caller")));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  context_.TryCancel();
  WaitDone();
}

void RoundCall::OnDone(const grpc::Status& status) {
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
  }
  core_->grpc_rounds_in_flight.fetch_sub(1);
  if (status.ok()) {
    if (domain_size_ != 0) {
      partial_ = response_.partial();
      for (const v1::DomainEpoch& d : response_.domains()) {
        domains_.push_back({d.domain(), d.epoch()});
      }
    }
    result_ = CheckResult(response_.round(), response_.words_per_rank(),
                          std::vector<uint32_t>(response_.words().begin(),
                                                response_.words().end()));
  } else if (cancelled && status.error_code() == grpc::StatusCode::CANCELLED) {
    result_ = absl::CancelledError(
        absl::StrCat(Context(), ": cancelled by the caller"));
  } else {
    result_ = FromGrpcStatus(status, Context(), rpc_timeout_);
  }
  if (!result_.ok()) core_->PoisonRounds(generation_, round_, result_.status());
  done_.Notify();
}

bool RoundCall::AwaitSlots(absl::Time deadline) {
  while (true) {
    const uint32_t bell = slots_->Bell();
    {
      absl::MutexLock lock(&mu_);
      if (done_.HasBeenNotified()) return true;
      std::optional<SlotAnswer> answer = slots_->Claim(sequence_);
      if (!answer.has_value()) {
        if (absl::Status health = slots_->health(); !health.ok()) {
          answer = slots_->Claim(sequence_);  // it may just have come
          if (!answer.has_value()) {
            FinishLocked(InContext(health));
            return true;
          }
        }
      }
      if (answer.has_value()) {
        FinishLocked(answer->status.ok()
                         ? CheckResult(answer->round, answer->words_per_rank,
                                       std::move(answer->words))
                         : InContext(answer->status));
        return true;
      }
      if (MonotonicNow() >= answer_deadline_) {
        FinishLocked(absl::DeadlineExceededError(
            absl::StrCat(Context(), ": the daemon did not answer within ",
                         absl::FormatDuration(answer_timeout_),
                         " (the round's timeout plus grace)")));
        return true;
      }
    }
    if (MonotonicNow() >= deadline) return false;
    slots_->Wait(bell, std::min(deadline, answer_deadline_));
  }
}

void RoundCall::FinishLocked(absl::StatusOr<std::vector<uint32_t>> result) {
  result_ = std::move(result);
  if (!result_.ok()) core_->PoisonRounds(generation_, round_, result_.status());
  done_.Notify();
}

absl::StatusOr<std::vector<uint32_t>> RoundCall::CheckResult(
    uint64_t round, uint32_t words_per_rank,
    std::vector<uint32_t> words) const {
  // A partial round (recovery by domain) holds its domains' ranks only.
  const uint32_t world =
      partial_ ? static_cast<uint32_t>(domains_.size()) * domain_size_
               : core_->current_descriptor().world_size();
  if (round != round_ || words_per_rank != frame_words_ ||
      static_cast<uint64_t>(words.size()) !=
          static_cast<uint64_t>(frame_words_) * world) {
    return absl::InternalError(
        absl::StrCat(Context(), ": malformed answer from the daemon (round ",
                     round, ", ", words_per_rank, " words per rank, ",
                     words.size(), " words; expected round ", round_, ", ",
                     frame_words_, " words per rank, ", frame_words_ * world,
                     " words for ", world, " ranks)"));
  }
  return words;
}

absl::StatusOr<std::shared_ptr<RoundCall>> SubmitRound(
    const std::shared_ptr<RankConnection>& core,
    absl::Span<const uint32_t> words, absl::Duration timeout) {
  const std::string context = core->conn->Context("AllGatherWords");
  if (timeout == absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": round timeout is zero; every round needs a deadline"));
  }
  absl::StatusOr<uint32_t> timeout_ms = ToMillis32(timeout, "round timeout");
  if (!timeout_ms.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": ", timeout_ms.status().message()));
  }
  if (words.size() > kMaxFrameWords) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": frame of ", words.size(),
                     " words exceeds the limit of ", kMaxFrameWords));
  }
  // Numbering and starting happen under submit_mu, so rounds reach gRPC in
  // the order of their numbers. core->mu is not held while starting: gRPC
  // may run the completion callback inline, and it takes core->mu.
  absl::MutexLock submit_lock(&core->submit_mu);
  std::shared_ptr<RoundCall> call;
  std::shared_ptr<RoundSlotClient> slots;
  {
    absl::MutexLock lock(&core->mu);
    absl::StatusOr<v1::MemberRef> member =
        core->CheckJoinedLocked("AllGatherWords");
    if (!member.ok()) return member.status();
    if (!core->rounds_failed.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(context, ": ", core->rounds_failed.message()));
    }
    if (core->awaiting_first_round) {
      // Recovery by domain: no number is taken before the domain is whole.
      return absl::UnavailableError(absl::StrCat(
          context, ": rank ", core->member.rank(), "'s domain ", core->domain,
          " is recovering at epoch ", core->epoch,
          "; its world rounds resume once the domain is whole (its "
          "DOMAIN_READY event)"));
    }
    call = std::make_shared<RoundCall>(core, core->generation,
                                       ++core->last_round, words.size());
    v1::AllGatherWordsRequest& request = call->request();
    *request.mutable_member() = *std::move(member);
    request.set_round(call->round());
    request.set_timeout_ms(*timeout_ms);
    if (core->by_domain) call->set_domain_size(core->domain_size);
    slots = core->round_slots;
  }
  const absl::Duration answer_timeout =
      absl::Milliseconds(*timeout_ms) + kRoundGrace;
  // The slots carry the round unless its frame is too long, every slot
  // waits for an answer, or gRPC rounds are still out (they could be
  // overtaken: the daemon takes each rank's rounds strictly in order).
  if (slots != nullptr && slots->Fits(words.size()) &&
      core->grpc_rounds_in_flight.load() == 0) {
    if (std::optional<uint64_t> sequence =
            slots->TryPost(call->round(), *timeout_ms, words)) {
      call->StartOnSlots(slots, *sequence, answer_timeout);
      return call;
    }
  }
  // Likewise a gRPC round must not overtake slot rounds the daemon has not
  // taken yet; its watcher takes them within microseconds.
  if (slots != nullptr) {
    const absl::Duration patience = std::min(answer_timeout, kTakePatience);
    const absl::Time give_up = MonotonicNow() + patience;
    while (!slots->AllTaken()) {
      absl::Status health = slots->health();
      if (health.ok() && MonotonicNow() >= give_up) {
        health = absl::UnavailableError(absl::StrCat(
            "the daemon did not take this rank's earlier rounds from its "
            "round slots within ",
            absl::FormatDuration(patience)));
      }
      if (!health.ok()) {
        // Sending the round anyway would reach the daemon before earlier
        // ones; the numbering is lost either way.
        absl::Status failed = call->InContext(health);
        core->PoisonRounds(call->generation(), call->round(), failed);
        return failed;
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }
  call->request().mutable_words()->Add(words.begin(), words.end());
  RoundCall::Start(call, answer_timeout);
  return call;
}

}  // namespace rankd::internal
