// SequenceNumbers: the numbering of one group's operations, the same on
// every member that submitted the same work, for both backends. A group
// numbers its collectives in one sequence and the transfers of each
// directed route (source -> destination member) in a sequence of their own,
// so that a send and the receive it pairs with get the same number whatever
// else the two ends do. The numbers key the mismatch diagnosis's reports
// (mismatch_diagnosis.h) and, on Gloo, make each operation's tag.
//
// A backend takes a number where its native layer orders the work (Gloo:
// on the group's executor thread; NCCL: when the communicator accepts the
// work), so the order of numbers is the order members pair in. Not
// thread-safe: the caller serializes (one executor thread, or a lock).
// Depends only on the standard library.
#ifndef RANKD_DATAPLANE_SEQUENCE_NUMBERS_H_
#define RANKD_DATAPLANE_SEQUENCE_NUMBERS_H_

#include <cstdint>
#include <map>
#include <utility>

namespace rankd::dataplane {

class SequenceNumbers {
 public:
  // The number of the next collective on the group: 0, 1, 2, ...
  uint32_t NextCollective() { return collectives_++; }

  // The number of the next transfer from member index `source` to
  // `destination` (a route has one sequence per direction): 0, 1, 2, ...
  uint32_t NextTransfer(uint32_t source, uint32_t destination) {
    return routes_[{source, destination}]++;
  }

 private:
  uint32_t collectives_ = 0;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> routes_;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_SEQUENCE_NUMBERS_H_
