#include "dataplane/gloo/gloo_group.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

GlooGroup::GlooGroup(const void* owner, CollectiveGroupId id, bool is_world,
                     std::vector<uint32_t> members, uint32_t local_rank,
                     std::shared_ptr<gloo::Context> context)
    : owner_(owner),
      id_(id),
      is_world_(is_world),
      members_(std::move(members)),
      local_rank_(local_rank),
      context_(std::move(context)) {}

std::optional<uint32_t> GlooGroup::IndexOf(uint32_t world_rank) const {
  for (uint32_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == world_rank) return i;
  }
  return std::nullopt;
}

std::string GlooGroup::ToString() const {
  return is_world_ ? "world" : absl::StrCat("group ", id_);
}

std::string GlooRoute::ToString() const {
  return absl::StrCat("route ", source(), "->", destination(), " in ",
                      group_->ToString());
}

}  // namespace rankd::dataplane
