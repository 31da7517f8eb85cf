// Rank 0's requests served, in flight at a loss, re-run and lost (see
// request_ledger.h).
#include "examples/serving/request_ledger.h"

#include <algorithm>

namespace rankd::examples {

void RequestLedger::Completed(const StepPlan& plan) {
  if (highest_id_.size() < plan.slots.size()) {
    highest_id_.resize(plan.slots.size(), 0);
  }
  for (size_t s = 0; s < plan.slots.size(); ++s) {
    for (const RequestSlice& r : plan.slots[s].requests) {
      if (r.request_id > highest_id_[s]) {
        highest_id_[s] = r.request_id;
        ++served_;
      }
    }
  }
  if (!pending_.has_value() || pending_->step != plan.step) return;
  for (size_t s = 0; s < pending_->slots.size(); ++s) {
    for (const RequestSlice& r : pending_->slots[s].requests) {
      const bool again =
          s < plan.slots.size() && std::find(plan.slots[s].requests.begin(),
                                             plan.slots[s].requests.end(),
                                             r) != plan.slots[s].requests.end();
      ++(again ? rerun_ : lost_);
    }
  }
  pending_.reset();
}

uint64_t RequestLedger::lost() const {
  uint64_t lost = lost_;
  if (pending_.has_value()) {
    for (const SlotBatch& b : pending_->slots) lost += b.requests.size();
  }
  return lost;
}

void RequestLedger::Interrupted(const StepPlan& plan) {
  if (pending_.has_value() && pending_->step == plan.step) return;
  if (pending_.has_value()) {
    // The earlier interrupted step never completed: its requests are lost.
    for (const SlotBatch& b : pending_->slots) lost_ += b.requests.size();
  }
  for (const SlotBatch& b : plan.slots) in_flight_ += b.requests.size();
  pending_ = plan;
}

}  // namespace rankd::examples
