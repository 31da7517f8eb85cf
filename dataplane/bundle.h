// The rules every bundle (send_receive, receive_bundle,
// receive_bundle_into: the ordered tensors one transfer moves on a route,
// dataplane/session.h) obeys whatever the backend, checked here so that
// both backends refuse the same bundle with the same words. The route's own
// rules are route.h's. Header-only; depends on dataplane/peer_transfer.h
// and absl.
#ifndef RANKD_DATAPLANE_BUNDLE_H_
#define RANKD_DATAPLANE_BUNDLE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dataplane/peer_transfer.h"

namespace rankd::dataplane {

// OK when a bundle of `tensors` tensors is within kMaxBundleTensors;
// otherwise InvalidArgument "<backend> backend: <operation>: a bundle holds
// at most 60000 tensors; got N".
inline absl::Status CheckBundleSize(absl::string_view backend,
                                    absl::string_view operation,
                                    size_t tensors) {
  if (tensors <= kMaxBundleTensors) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      backend, " backend: ", operation, ": a bundle holds at most ",
      kMaxBundleTensors, " tensors; got ", tensors));
}

// The caller's outputs of receive_bundle_into, for a bundle of `values`
// values: OK when there is one output per value and no two outputs share a
// byte. Otherwise InvalidArgument "<backend> backend: <operation>: " then
// "N outputs for a bundle of M values", or "output I overlaps output J of
// the bundle" (J < I; of several overlaps, the first by address is named).
// `Tensor` has data() (a pointer) and byte_size(); empty outputs overlap
// nothing. O(n log n) in the number of outputs.
template <typename Tensor>
absl::Status CheckBundleOutputs(absl::string_view backend,
                                absl::string_view operation,
                                absl::Span<const Tensor> outputs,
                                size_t values) {
  auto refuse = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend, " backend: ", operation, ": ", parts...));
  };
  if (outputs.size() != values) {
    return refuse(outputs.size(), " outputs for a bundle of ", values,
                  " values");
  }
  struct Range {
    uintptr_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].byte_size() == 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(outputs[i].data());
    ranges.push_back({begin, begin + outputs[i].byte_size(), i});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.index < b.index);
  });
  // Sorted by start, the ranges are disjoint when each ends before the
  // next starts.
  for (size_t k = 1; k < ranges.size(); ++k) {
    if (ranges[k].begin < ranges[k - 1].end) {
      return refuse("output ", std::max(ranges[k].index, ranges[k - 1].index),
                    " overlaps output ",
                    std::min(ranges[k].index, ranges[k - 1].index),
                    " of the bundle");
    }
  }
  return absl::OkStatus();
}

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_BUNDLE_H_
