#include "dataplane/gloo/gloo_group.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane::gloo {

GlooGroup::GlooGroup(const void* owner, CollectiveGroupId id, bool is_world,
                     std::vector<uint32_t> members, uint32_t local_rank,
                     std::shared_ptr<::gloo::Context> context, uint32_t lane)
    : owner_(owner),
      id_(id),
      is_world_(is_world),
      members_(std::move(members)),
      local_rank_(local_rank),
      context_(std::move(context)),
      lane_(lane) {}

void GlooGroup::AddLane(std::shared_ptr<::gloo::Context> context) {
  lanes_.push_back(std::make_shared<GlooGroup>(
      owner_, id_, is_world_, members_, local_rank_, std::move(context),
      static_cast<uint32_t>(lanes_.size() + 1)));
}

std::shared_ptr<GlooGroup> GlooGroup::OnLane(uint32_t lane) {
  if (lane_ != 0) return nullptr;
  if (lane == 0) return shared_from_this();
  if (lane > lanes_.size()) return nullptr;
  return lanes_[lane - 1];
}

std::string GlooGroup::ScopeKey() const {
  std::string key = is_world_ ? "world" : absl::StrCat("g", id_);
  if (lane_ > 0) absl::StrAppend(&key, ".e", lane_);
  return key;
}

std::optional<uint32_t> GlooGroup::IndexOf(uint32_t world_rank) const {
  for (uint32_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == world_rank) return i;
  }
  return std::nullopt;
}

std::string GlooGroup::ToString() const {
  std::string name = is_world_ ? "world" : absl::StrCat("group ", id_);
  if (lane_ > 0) absl::StrAppend(&name, " on executor ", lane_);
  return name;
}

std::string GlooRoute::ToString() const {
  return absl::StrCat("route ", source(), "->", destination(), " in ",
                      group_->ToString());
}

}  // namespace rankd::dataplane::gloo
