#include "dataplane/mismatch_diagnosis.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/monotonic_clock.h"
#include "common/rank_list.h"

namespace rankd::dataplane {
namespace {

// How long one poll for a peer's report may block, and the pause between
// sweeps over the members still missing.
constexpr absl::Duration kPollWait = absl::Milliseconds(1);
constexpr absl::Duration kSweepPause = absl::Milliseconds(20);

}  // namespace

MismatchDiagnosis::MismatchDiagnosis(ControlPlane* control_plane,
                                     std::string key_prefix,
                                     absl::Duration grace, uint64_t epoch)
    : control_plane_(control_plane),
      key_prefix_(std::move(key_prefix)),
      epoch_(epoch),
      grace_(grace) {}

std::string MismatchDiagnosis::KeyOf(const SubmittedOperation& op,
                                     uint32_t rank) const {
  // Each report is its member's own key: nobody else can file it.
  return OwnedKey(rank,
                  absl::StrCat(key_prefix_, "diagnosis/", op.scope_key, "/",
                               op.sequence, "/", rank),
                  epoch_);
}

Explanation MismatchDiagnosis::Explain(const SubmittedOperation& op,
                                       const absl::Status& error) const {
  if (!control_plane_->JobHealth().ok()) return {error};
  // Published even after a local abort: the peers this abort disconnected
  // are asking too, and conclude at once once every member reported.
  if (!control_plane_->KvSet(KeyOf(op, op.self), op.canonical).ok()) {
    return {error};
  }
  if (locally_aborted_.load()) return {error};
  std::map<uint32_t, std::string> reported = {{op.self, op.canonical}};
  const absl::Time deadline = MonotonicNow() + grace_;
  while (reported.size() < op.members.size()) {
    if (locally_aborted_.load()) return {error};
    for (uint32_t rank : op.members) {
      if (reported.count(rank) > 0) continue;
      auto value = control_plane_->KvGet(KeyOf(op, rank), kPollWait);
      if (value.ok()) reported.emplace(rank, *std::move(value));
    }
    if (reported.size() == op.members.size()) break;
    if (!control_plane_->JobHealth().ok()) return {error};
    if (MonotonicNow() + kSweepPause >= deadline) break;
    absl::SleepFor(kSweepPause);
  }

  // Group the ranks by what they submitted, this rank's submission first.
  std::vector<std::pair<std::string, std::vector<uint32_t>>> groups;
  std::vector<uint32_t> silent;
  for (uint32_t rank : op.members) {
    auto it = reported.find(rank);
    if (it == reported.end()) {
      silent.push_back(rank);
      continue;
    }
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      return g.first == it->second;
    });
    if (group == groups.end()) {
      groups.push_back({it->second, {rank}});
    } else {
      group->second.push_back(rank);
    }
  }
  std::stable_partition(groups.begin(), groups.end(),
                        [&](const auto& g) { return g.first == op.canonical; });
  const std::string where =
      absl::StrCat("operation #", op.sequence, " on ", op.scope_name);
  std::string silent_text;
  if (!silent.empty()) {
    silent_text = absl::StrCat("; ", NameRanks(silent), " did not report ",
                               where, " within ", absl::FormatDuration(grace_),
                               " (behind, stalled, or never submitted it)");
  }
  if (groups.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [canonical, ranks] : groups) {
      parts.push_back(
          absl::StrCat(NameRanks(ranks), " submitted `", canonical, "`"));
    }
    return {
        absl::InvalidArgumentError(absl::StrCat(
            "members disagree on ", where, ": ", absl::StrJoin(parts, "; "),
            silent_text, " (so they did not complete: ", error.message(), ")")),
        /*members_disagree=*/true};
  }
  if (silent.empty()) return {error};
  // Members that never reported are the cause when this member's transport
  // timed out, or saw a peer tear the connection down (after the peer's own
  // timeout fired first): both are the silent members' delay. Any other
  // error keeps its code.
  const bool delay = error.code() == absl::StatusCode::kDeadlineExceeded ||
                     error.code() == absl::StatusCode::kUnavailable;
  return {
      absl::Status(delay ? absl::StatusCode::kDeadlineExceeded : error.code(),
                   absl::StrCat(error.message(), silent_text))};
}

}  // namespace rankd::dataplane
