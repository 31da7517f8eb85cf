#include "common/limits.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rankd {

uint32_t MaxFrameWords(uint32_t world_size) {
  uint64_t share = kMaxRoundResultWords / std::max<uint32_t>(world_size, 1);
  return static_cast<uint32_t>(std::min<uint64_t>(kMaxFrameWords, share));
}

absl::Status CheckFrameWords(size_t words, uint32_t world_size) {
  const uint32_t limit = MaxFrameWords(world_size);
  if (words <= limit) return absl::OkStatus();
  if (limit == kMaxFrameWords) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", words, " words exceeds the limit of ",
                     kMaxFrameWords, " words per rank per round"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("frame of ", words, " words exceeds the limit of ", limit,
                   " words per rank per round in a world of ", world_size,
                   " ranks (a round's result holds at most ",
                   kMaxRoundResultWords, " words)"));
}

int MaxCallsPerConnection(uint32_t ranks_per_node, const CallerLimits& limits) {
  // Per rank: its waiting gets, its streams, a round in flight for each of
  // the 64 rounds that may be open, and a join, a leave and a few unary
  // calls.
  const uint64_t per_rank = uint64_t{limits.max_waiting_gets_per_rank} +
                            limits.max_streams_per_caller + 64 + 8;
  const uint64_t calls = uint64_t{ranks_per_node} * per_rank + 64;
  return static_cast<int>(std::clamp<uint64_t>(calls, 1024, 1 << 30));
}

bool IsJobId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxJobIdBytes) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status CheckTimeoutMs(uint32_t timeout_ms, absl::string_view field) {
  if (timeout_ms == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be > 0: every wait needs a deadline"));
  }
  if (timeout_ms > kMaxTimeoutMs) {
    return absl::InvalidArgumentError(absl::StrCat(field, "=", timeout_ms,
                                                   " exceeds the limit of ",
                                                   kMaxTimeoutMs, " ms"));
  }
  return absl::OkStatus();
}

absl::Status CheckOptionalTimeoutMs(uint32_t timeout_ms,
                                    absl::string_view field) {
  if (timeout_ms == 0) return absl::OkStatus();
  return CheckTimeoutMs(timeout_ms, field);
}

absl::Status CheckTextSize(absl::string_view field, absl::string_view value,
                           size_t max_bytes) {
  if (value.size() <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " has ", value.size(), " bytes; the limit is ", max_bytes));
}

}  // namespace rankd
