// Names and timing of the example's collectives (see collectives.h).
#include "examples/serving/collectives.h"

#include <algorithm>

namespace rankd::examples {

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGatherWords:
      return "all_gather_words";
    case CollectiveKind::kAllReduceSum:
      return "all_reduce_sum";
    case CollectiveKind::kAllToAllV:
      return "all_to_all_v";
    case CollectiveKind::kSendReceive:
      return "send/receive";
    case CollectiveKind::kAllGather:
      return "all_gather";
  }
  return "unknown";
}

const char* CollectiveKindPurpose(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGatherWords:
      return "batch agreement";
    case CollectiveKind::kAllReduceSum:
      return "tensor-parallel combine";
    case CollectiveKind::kAllToAllV:
      return "expert dispatch+return";
    case CollectiveKind::kSendReceive:
      return "pipeline activations";
    case CollectiveKind::kAllGather:
      return "outputs to self-check";
  }
  return "";
}

void CollectiveStats::Record(CollectiveKind kind, absl::Duration elapsed) {
  KindStats& k = kinds_[static_cast<size_t>(kind)];
  ++k.calls;
  k.total += elapsed;
  k.max = std::max(k.max, elapsed);
}

}  // namespace rankd::examples
