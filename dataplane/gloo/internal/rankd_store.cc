#include "dataplane/gloo/internal/rankd_store.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/monotonic_clock.h"
#include "gloo/common/error.h"

namespace rankd::dataplane::gloo::internal {
namespace {

[[noreturn]] void Throw(const absl::Status& status, const std::string& what) {
  throw ::gloo::IoException(absl::StrCat(
      "rankd rendezvous store: ", what, ": ",
      absl::StatusCodeToString(status.code()), ": ", status.message()));
}

}  // namespace

std::string RankdStore::Prefix(absl::string_view name_space, uint32_t instance,
                               absl::string_view group) {
  return absl::StrCat("gloo/", name_space, "/",
                      instance == 0 ? "" : absl::StrCat("i", instance, "/"),
                      group, "/");
}

RankdStore::RankdStore(ControlPlane* control_plane, std::string prefix,
                       absl::Duration timeout, std::vector<uint32_t> members,
                       uint64_t epoch)
    : control_plane_(control_plane),
      prefix_(std::move(prefix)),
      timeout_(timeout),
      members_(std::move(members)),
      epoch_(epoch) {}

std::string RankdStore::FullKey(absl::string_view key) const {
  // Gloo names a member's keys by its index: "<i>" (its addresses for
  // every pair), "<i>/<j>" (older versions: for the pair with j) and
  // "rank_<i>" (its host name).
  absl::string_view index = key;
  absl::ConsumePrefix(&index, "rank_");
  index = index.substr(0, index.find('/'));
  uint32_t member = 0;
  if (!members_.empty() && !index.empty() && absl::SimpleAtoi(index, &member) &&
      absl::StrCat(member) == index && member < members_.size()) {
    return OwnedKey(members_[member], absl::StrCat(prefix_, key), epoch_);
  }
  return EpochKey(epoch_, absl::StrCat(prefix_, key));
}

absl::StatusOr<std::string> RankdStore::Await(const std::string& full,
                                              absl::Duration bound) {
  // A daemon ends a wait when the job's epoch ends (KvStore::EndEpoch); the
  // slices also stop a wait whose failure this process learned another way
  // (its control plane's failure, an older daemon), so a session that
  // cannot connect any more never waits out its timeout.
  return AwaitKey(*control_plane_, full, bound, kRendezvousHealthEvery,
                  [this] { return control_plane_->JobHealth(); });
}

void RankdStore::set(const std::string& key, const std::vector<char>& data) {
  const std::string full = FullKey(key);
  absl::Status s =
      control_plane_->KvSet(full, absl::string_view(data.data(), data.size()));
  if (!s.ok()) Throw(s, absl::StrCat("set ", full));
}

std::vector<char> RankdStore::get(const std::string& key) {
  const std::string full = FullKey(key);
  {
    absl::MutexLock lock(&mu_);
    if (auto it = fetched_.find(full); it != fetched_.end()) {
      std::vector<char> data(it->second.begin(), it->second.end());
      fetched_.erase(it);
      return data;
    }
  }
  auto value = Await(full, timeout_);
  if (!value.ok()) Throw(value.status(), absl::StrCat("get ", full));
  return std::vector<char>(value->begin(), value->end());
}

void RankdStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void RankdStore::wait(const std::vector<std::string>& keys,
                      const std::chrono::milliseconds& timeout) {
  absl::Duration bound =
      std::min(timeout_, absl::Milliseconds(timeout.count()));
  if (bound <= absl::ZeroDuration()) bound = timeout_;
  const absl::Time deadline = MonotonicNow() + bound;
  for (const std::string& key : keys) {
    const std::string full = FullKey(key);
    absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) left = absl::Milliseconds(1);
    auto value = Await(full, left);
    if (!value.ok()) Throw(value.status(), absl::StrCat("wait for ", full));
    absl::MutexLock lock(&mu_);
    fetched_[full] = *std::move(value);
  }
}

}  // namespace rankd::dataplane::gloo::internal
