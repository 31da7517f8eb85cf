#include "dataplane/nccl/internal/unique_id_broker.h"

#include <algorithm>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/monotonic_clock.h"
#include "dataplane/nccl/internal/session_tag.h"

namespace rankd::dataplane::nccl::internal {

namespace {
constexpr absl::string_view kUniqueIdPrefix = "nccl-uid-v1:";
}  // namespace

std::string EncodeUniqueId(absl::string_view id_bytes) {
  return absl::StrCat(kUniqueIdPrefix, absl::BytesToHexString(id_bytes));
}

absl::StatusOr<std::string> DecodeUniqueId(absl::string_view value,
                                           absl::string_view key) {
  if (!absl::StartsWith(value, kUniqueIdPrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl backend: key '", key,
                     "' does not hold an NCCL unique id (expected the prefix '",
                     kUniqueIdPrefix, "')"));
  }
  absl::string_view hex = value.substr(kUniqueIdPrefix.size());
  if (hex.size() != 2 * kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl backend: key '", key, "' holds ", hex.size() / 2,
        " bytes of unique id; NCCL ids have ", kNcclUniqueIdBytes));
  }
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl backend: key '", key, "' holds a unique id that is not hex"));
    }
  }
  return absl::HexStringToBytes(hex);
}

namespace {

// Longest single KvGet, so that the interrupt is checked regularly even if
// the broker does not fail pending gets itself.
constexpr absl::Duration kGetSlice = absl::Milliseconds(500);

absl::StatusOr<std::string> Generate(const UniqueIdGenerator& generator,
                                     absl::string_view comm_name) {
  if (!generator) {
    return absl::FailedPreconditionError(
        "nccl backend: no unique id generator");
  }
  absl::StatusOr<std::string> id = generator();
  if (!id.ok()) return id.status();
  if (id->size() != kNcclUniqueIdBytes) {
    return absl::InternalError(
        absl::StrCat("nccl backend: the unique id generator returned ",
                     id->size(), " bytes for communicator ", comm_name,
                     "; expected ", kNcclUniqueIdBytes));
  }
  return id;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<std::string>>> BrokerUniqueIds(
    ControlPlane& control_plane, absl::string_view tag,
    absl::Span<const CommIdRequest> requests,
    const UniqueIdGenerator& generator, absl::Time deadline,
    const InterruptCheck& interrupt, uint64_t epoch) {
  absl::Status tag_ok = ValidateSessionTag(tag);
  if (!tag_ok.ok()) return tag_ok;
  const std::string ns = control_plane.Namespace();
  std::vector<std::vector<std::string>> ids(requests.size());

  // Phase 1: generate (and publish, for communicators of 2+ ranks) the ids
  // this rank is root for.
  for (size_t c = 0; c < requests.size(); ++c) {
    const CommIdRequest& req = requests[c];
    const uint32_t n = static_cast<uint32_t>(req.members.size());
    if (n == 0 || req.rank >= n || req.plan.nranks != n ||
        req.plan.count() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl backend: communicator ", req.comm_name, " has rank ", req.rank,
          " of ", n, " and a plan for ", req.plan.nranks, " ranks with ",
          req.plan.count(), " ids"));
    }
    ids[c].resize(req.plan.count());
    for (uint32_t i = 0; i < req.plan.count(); ++i) {
      if (req.plan.roots[i] != req.rank) continue;
      auto id = Generate(generator, req.comm_name);
      if (!id.ok()) return id.status();
      if (n > 1) {
        // Under the root's own key: no other rank can publish an id
        // first or replace it (docs/operations.md, "Key-value ownership").
        const std::string key = OwnedKey(
            req.members[req.rank],
            UniqueIdKey(ns, tag, req.comm_name, i, req.plan.count()), epoch);
        absl::Status set = control_plane.KvSet(key, EncodeUniqueId(*id));
        if (!set.ok()) {
          return absl::Status(
              set.code(), absl::StrCat("nccl backend: publishing unique id '",
                                       key, "': ", set.message()));
        }
      }
      ids[c][i] = *std::move(id);
    }
  }

  // Phase 2: fetch the others.
  for (size_t c = 0; c < requests.size(); ++c) {
    const CommIdRequest& req = requests[c];
    for (uint32_t i = 0; i < req.plan.count(); ++i) {
      if (!ids[c][i].empty()) continue;
      const uint32_t root = req.plan.roots[i];
      const std::string key = OwnedKey(
          req.members[root],
          UniqueIdKey(ns, tag, req.comm_name, i, req.plan.count()), epoch);
      absl::Status interrupted;
      std::function<absl::Status()> stop;
      if (interrupt) {
        stop = [&] { return interrupted = interrupt(); };
      }
      absl::StatusOr<std::string> value = AwaitKey(
          control_plane, key, deadline - MonotonicNow(), kGetSlice, stop);
      if (!value.ok()) {
        if (!interrupted.ok()) return interrupted;
        if (value.status().code() == absl::StatusCode::kDeadlineExceeded) {
          return absl::DeadlineExceededError(
              absl::StrCat("nccl backend: unique id '", key,
                           "' of communicator ", req.comm_name,
                           " was not published by its root (communicator "
                           "rank ",
                           root, ", world rank ", req.members[root],
                           ") before the init deadline"));
        }
        return absl::Status(
            value.status().code(),
            absl::StrCat("nccl backend: waiting for unique id '", key,
                         "': ", value.status().message()));
      }
      auto decoded = DecodeUniqueId(*value, key);
      if (!decoded.ok()) return decoded.status();
      ids[c][i] = *std::move(decoded);
    }
  }
  return ids;
}

}  // namespace rankd::dataplane::nccl::internal
