// RequestStream: the synthetic traffic of one serving slot, and the batch
// types the rest of the example passes around.
//
// A *slot* is one independent stream of requests: in the example, one per
// (data-parallel replica, expert-parallel index) pair; its batch is served by
// every tensor-parallel rank and every pipeline stage of that pair. Each
// step a slot's scheduler takes the next batch: requests arrive at random,
// are prefilled (all prompt tokens in one step) and then decode one token per
// step until done, at most kMaxRequestsPerStep at a time.
//
// Deterministic: the stream of slot s for a given seed is the same in every
// process, which is how rank 0's reference checks the agreed batches.
#ifndef RANKD_EXAMPLES_SERVING_REQUEST_STREAM_H_
#define RANKD_EXAMPLES_SERVING_REQUEST_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rankd::examples {

// The most requests one slot serves in one step (bounds the agreement frame).
inline constexpr uint32_t kMaxRequestsPerStep = 8;

// Tokens [start, start + count) of one request, served this step.
struct RequestSlice {
  uint32_t request_id = 0;
  uint32_t start = 0;
  uint32_t count = 0;

  friend bool operator==(const RequestSlice&, const RequestSlice&) = default;
};

// One token of a batch: which request, which position.
struct TokenRef {
  uint32_t request_id = 0;
  uint32_t position = 0;
};

// What one slot serves in one step.
struct SlotBatch {
  std::vector<RequestSlice> requests;

  // Total tokens (sum of counts).
  size_t tokens() const;
  // Every token, request by request, positions ascending: the row order of
  // the slot's activations.
  std::vector<TokenRef> TokenRefs() const;
  // "3 requests (17, 22, 40), 9 tokens".
  std::string ToString() const;

  friend bool operator==(const SlotBatch&, const SlotBatch&) = default;
};

class RequestStream {
 public:
  // The stream of `slot` among `num_slots`; request ids are unique across
  // slots and never zero.
  RequestStream(uint64_t seed, uint32_t slot, uint32_t num_slots);

  // The next step's batch (may be empty: no request active).
  SlotBatch Next();

 private:
  struct Active {
    uint32_t id;
    uint32_t prompt;
    uint32_t output;
    uint32_t served = 0;  // tokens served so far
  };
  uint64_t Random();

  uint64_t state_;
  uint32_t slot_;
  uint32_t num_slots_;
  uint32_t next_local_id_ = 0;
  std::vector<Active> active_;
};

}  // namespace rankd::examples

#endif  // RANKD_EXAMPLES_SERVING_REQUEST_STREAM_H_
