// client/internal/round_slot_client.cc: see round_slot_client.h.
#include "client/internal/round_slot_client.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd {
namespace internal {

absl::StatusOr<std::unique_ptr<RoundSlotClient>> RoundSlotClient::Open(
    const std::string& path, RoundSlotsGeometry geometry, absl::Duration spin) {
  absl::StatusOr<std::unique_ptr<RoundSlots>> slots =
      RoundSlots::Open(path, geometry);
  if (!slots.ok()) return slots.status();
  (*slots)->Attach();
  return std::unique_ptr<RoundSlotClient>(
      new RoundSlotClient(*std::move(slots), spin));
}

RoundSlotClient::RoundSlotClient(std::unique_ptr<RoundSlots> slots,
                                 absl::Duration spin)
    : slots_(std::move(slots)), spin_(spin) {}

RoundSlotClient::~RoundSlotClient() { slots_->Close(); }

bool RoundSlotClient::Fits(size_t words) const {
  return words <= slots_->geometry().frame_words;
}

std::optional<uint64_t> RoundSlotClient::TryPost(
    uint64_t round, uint32_t timeout_ms, absl::Span<const uint32_t> words) {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok() || slots_->closed()) return std::nullopt;
  const uint64_t sequence = next_;
  const uint32_t slots = slots_->geometry().slots;
  if (sequence >= slots) {
    // The slot's previous occupant must have been answered and read out.
    const uint64_t previous = sequence - slots;
    auto it = unclaimed_.find(previous);
    if (it != unclaimed_.end()) {
      std::optional<SlotAnswer> answer = slots_->ReadAnswer(previous);
      if (!answer.has_value()) return std::nullopt;
      if (it->second) kept_.emplace(previous, *std::move(answer));
      unclaimed_.erase(it);
    }
  }
  slots_->Post(sequence, round, timeout_ms, words);
  unclaimed_.emplace(sequence, true);
  ++next_;
  return sequence;
}

bool RoundSlotClient::AllTaken() const {
  absl::MutexLock lock(&mu_);
  return slots_->consumed() >= next_;
}

std::optional<SlotAnswer> RoundSlotClient::Claim(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  if (auto kept = kept_.find(sequence); kept != kept_.end()) {
    SlotAnswer answer = std::move(kept->second);
    kept_.erase(kept);
    return answer;
  }
  auto it = unclaimed_.find(sequence);
  if (it == unclaimed_.end()) return std::nullopt;
  std::optional<SlotAnswer> answer = slots_->ReadAnswer(sequence);
  if (answer.has_value()) unclaimed_.erase(it);
  return answer;
}

void RoundSlotClient::Abandon(uint64_t sequence) {
  absl::MutexLock lock(&mu_);
  kept_.erase(sequence);
  if (auto it = unclaimed_.find(sequence); it != unclaimed_.end()) {
    it->second = false;
  }
}

uint32_t RoundSlotClient::Bell() const { return slots_->AnswerBell(); }

void RoundSlotClient::Wait(uint32_t seen, absl::Time deadline) const {
  slots_->WaitForAnswers(seen, deadline, spin_);
}

absl::Status RoundSlotClient::health() const {
  absl::MutexLock lock(&mu_);
  if (!broken_.ok()) return broken_;
  if (slots_->closed()) {
    return absl::UnavailableError(
        "the daemon closed this rank's shared-memory round slots (it is "
        "shutting down, or no longer counts this rank as a member)");
  }
  return absl::OkStatus();
}

void RoundSlotClient::Break(const absl::Status& cause) {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return;
    broken_ = cause;
  }
  slots_->Close();
}

}  // namespace internal
}  // namespace rankd
