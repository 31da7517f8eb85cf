// The rules every batched send/receive (BatchSendReceive, dataplane/
// session.h) obeys whatever the backend, checked here so that both
// backends refuse the same batch with the same words. Depends on
// dataplane/peer_transfer.h and absl.
#ifndef RANKD_DATAPLANE_BATCH_H_
#define RANKD_DATAPLANE_BATCH_H_

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

namespace batch_internal {
inline auto Refuser(absl::string_view backend, absl::string_view operation) {
  return [backend, operation](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend, " backend: ", operation, ": ", parts...));
  };
}
}  // namespace batch_internal

// The batch's shape, which names its peers: OK when the batch of member
// `me` of `scope` (`members` members) has at least one and at most
// kMaxBatchTransfers transfers and every peer is another member.
// Otherwise InvalidArgument "<backend> backend: <operation>: ..." naming a
// transfer that breaks a rule (sends and receives are numbered
// separately, from 0). Reads no tensor.
template <typename Tensor>
absl::Status CheckBatchPeers(absl::Span<const PeerValue<Tensor>> sends,
                             absl::Span<const PeerValue<Tensor>> receives,
                             size_t members, size_t me, absl::string_view scope,
                             absl::string_view backend,
                             absl::string_view operation) {
  auto refuse = batch_internal::Refuser(backend, operation);
  if (sends.empty() && receives.empty()) return refuse("the batch is empty");
  if (sends.size() + receives.size() > kMaxBatchTransfers) {
    return refuse("a batch holds at most ", kMaxBatchTransfers,
                  " transfers; got ", sends.size() + receives.size());
  }
  for (const auto* list : {&sends, &receives}) {
    for (size_t i = 0; i < list->size(); ++i) {
      const size_t peer = (*list)[i].peer;
      if (peer >= members || peer == me) {
        return refuse(list == &sends ? "send " : "receive ", i,
                      " names member ", peer, ", which is ",
                      peer >= members ? "outside " : "this member of ", scope,
                      " (", members, " members)");
      }
    }
  }
  return absl::OkStatus();
}

// The batch's buffers: OK when no receive writes bytes an earlier receive
// writes and no send reads bytes a receive writes; otherwise
// InvalidArgument as above (of several overlaps, the first by address is
// named). `Tensor` has data() (a pointer) and byte_size(); empty tensors
// overlap nothing. O(n log n) in the number of transfers.
template <typename Tensor>
absl::Status CheckBatchBuffers(absl::Span<const PeerValue<Tensor>> sends,
                               absl::Span<const PeerValue<Tensor>> receives,
                               absl::string_view backend,
                               absl::string_view operation) {
  auto refuse = batch_internal::Refuser(backend, operation);
  // The receives' byte ranges, sorted by start: disjoint once checked.
  struct Range {
    uintptr_t begin, end;
    size_t index;
  };
  std::vector<Range> written;
  for (size_t i = 0; i < receives.size(); ++i) {
    const Tensor& t = receives[i].value;
    if (t.byte_size() == 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(t.data());
    written.push_back({begin, begin + t.byte_size(), i});
  }
  std::sort(written.begin(), written.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < written.size(); ++k) {
    if (written[k].begin < written[k - 1].end) {
      return refuse("receive ",
                    std::max(written[k].index, written[k - 1].index),
                    " overlaps the output of receive ",
                    std::min(written[k].index, written[k - 1].index));
    }
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    const Tensor& t = sends[i].value;
    if (t.byte_size() == 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(t.data());
    const uintptr_t end = begin + t.byte_size();
    // The last receive that starts before this send ends.
    auto after = std::upper_bound(
        written.begin(), written.end(), end,
        [](uintptr_t e, const Range& r) { return e <= r.begin; });
    if (after != written.begin() && std::prev(after)->end > begin) {
      return refuse("send ", i, " reads bytes that receive ",
                    std::prev(after)->index, " of the batch writes");
    }
  }
  return absl::OkStatus();
}

// Both: CheckBatchPeers, then CheckBatchBuffers.
template <typename Tensor>
absl::Status CheckBatch(absl::Span<const PeerValue<Tensor>> sends,
                        absl::Span<const PeerValue<Tensor>> receives,
                        size_t members, size_t me, absl::string_view scope,
                        absl::string_view backend,
                        absl::string_view operation) {
  absl::Status peers =
      CheckBatchPeers(sends, receives, members, me, scope, backend, operation);
  if (!peers.ok()) return peers;
  return CheckBatchBuffers(sends, receives, backend, operation);
}

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_BATCH_H_
