// Synthetic request traffic per slot (see request_stream.h).
#include "examples/serving/request_stream.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::examples {

size_t SlotBatch::tokens() const {
  size_t n = 0;
  for (const RequestSlice& r : requests) n += r.count;
  return n;
}

std::vector<TokenRef> SlotBatch::TokenRefs() const {
  std::vector<TokenRef> refs;
  refs.reserve(tokens());
  for (const RequestSlice& r : requests) {
    for (uint32_t k = 0; k < r.count; ++k) {
      refs.push_back({r.request_id, r.start + k});
    }
  }
  return refs;
}

std::string SlotBatch::ToString() const {
  std::vector<uint32_t> ids;
  for (const RequestSlice& r : requests) ids.push_back(r.request_id);
  return absl::StrCat(requests.size(), " requests (", absl::StrJoin(ids, ", "),
                      "), ", tokens(), " tokens");
}

RequestStream::RequestStream(uint64_t seed, uint32_t slot, uint32_t num_slots)
    : state_(seed * 0x2545f4914f6cdd1dull + slot + 1),
      slot_(slot),
      num_slots_(num_slots) {}

uint64_t RequestStream::Random() {
  // xorshift64*
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return state_ * 0x2545f4914f6cdd1dull;
}

SlotBatch RequestStream::Next() {
  // Arrivals: 0, 1 or 2 new requests, while there is room.
  const uint32_t arrivals = static_cast<uint32_t>(Random() % 3);
  for (uint32_t k = 0; k < arrivals && active_.size() < kMaxRequestsPerStep;
       ++k) {
    Active a;
    a.id = next_local_id_++ * num_slots_ + slot_ + 1;
    a.prompt = 2 + static_cast<uint32_t>(Random() % 7);  // 2..8
    a.output = 2 + static_cast<uint32_t>(Random() % 9);  // 2..10
    active_.push_back(a);
  }
  SlotBatch batch;
  for (Active& a : active_) {
    // Prefill: the whole prompt in one step; then one token per step.
    const uint32_t count = a.served == 0 ? a.prompt : 1;
    batch.requests.push_back({a.id, a.served, count});
    a.served += count;
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const Active& a) {
                                 return a.served >= a.prompt + a.output;
                               }),
                active_.end());
  return batch;
}

}  // namespace rankd::examples
