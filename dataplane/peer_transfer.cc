#include "dataplane/peer_transfer.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

absl::Status CheckPeer(size_t peer, const ResolvedScope& scope,
                       const char* operation) {
  if (peer >= scope.members.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(operation, ": peer ", peer, " is outside the scope's ",
                     scope.members.size(), " members"));
  }
  if (peer == scope.local_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(operation, ": peer ", peer, " is this rank itself"));
  }
  return absl::OkStatus();
}

}  // namespace rankd::dataplane
