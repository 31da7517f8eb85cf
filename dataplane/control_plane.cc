#include "dataplane/control_plane.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/monotonic_clock.h"

namespace rankd::dataplane {

absl::StatusOr<DistributedSessionDescriptor> ControlPlane::Rejoin(
    uint64_t ended_epoch, absl::Duration /*timeout*/) {
  return absl::UnimplementedError(
      absl::StrCat("this control plane cannot join a later epoch (after epoch ",
                   ended_epoch, ")"));
}

std::string EpochKey(uint64_t epoch, absl::string_view key) {
  if (epoch <= 1) return std::string(key);
  return absl::StrCat("epoch/", epoch, "/", key);
}

std::string OwnedKey(uint32_t owner, absl::string_view key, uint64_t epoch) {
  return EpochKey(epoch, absl::StrCat("r", owner, "/", key));
}

std::string OwnedKey(uint32_t owner, absl::string_view key) {
  return OwnedKey(owner, key, 1);
}

absl::StatusOr<std::string> AwaitKey(
    ControlPlane& control_plane, absl::string_view key, absl::Duration bound,
    absl::Duration slice, const std::function<absl::Status()>& stop) {
  const absl::Time deadline = MonotonicNow() + bound;
  while (true) {
    if (stop) {
      if (absl::Status s = stop(); !s.ok()) return s;
    }
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "key ", key, " not set within ", absl::FormatDuration(bound)));
    }
    absl::StatusOr<std::string> value =
        control_plane.KvGet(key, std::min(left, slice));
    if (value.ok() ||
        (value.status().code() != absl::StatusCode::kDeadlineExceeded &&
         value.status().code() != absl::StatusCode::kNotFound)) {
      return value;
    }
  }
}

absl::StatusOr<uint32_t> NextSessionNumber(ControlPlane& control_plane,
                                           absl::string_view key,
                                           absl::string_view backend) {
  // In the job's store, so the count outlives any one client of a process.
  absl::StatusOr<int64_t> opened = control_plane.KvAdd(key, 1);
  if (!opened.ok()) {
    return absl::Status(
        opened.status().code(),
        absl::StrCat(backend, " backend: numbering this session: ",
                     opened.status().message()));
  }
  if (*opened < 1 || *opened > std::numeric_limits<uint32_t>::max()) {
    return absl::InternalError(absl::StrCat(
        backend, " backend: numbering this session: the count is ", *opened));
  }
  return static_cast<uint32_t>(*opened - 1);
}

}  // namespace rankd::dataplane
