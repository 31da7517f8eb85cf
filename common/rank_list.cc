#include "common/rank_list.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rankd {

std::string FormatRankList(std::vector<uint32_t> ranks, size_t max_items) {
  if (ranks.empty()) return "none";
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  size_t items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items == max_items) {
      absl::StrAppend(&out, ", ... (", ranks.size(), " in all)");
      break;
    }
    if (!out.empty()) out += ", ";
    if (j == i) {
      absl::StrAppend(&out, ranks[i]);
    } else {
      absl::StrAppend(&out, ranks[i], "-", ranks[j]);
    }
    ++items;
    i = j + 1;
  }
  return out;
}

std::string NameRanks(std::vector<uint32_t> ranks) {
  if (ranks.empty()) return "no rank";
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  const char* noun = ranks.size() == 1 ? "rank " : "ranks ";
  return absl::StrCat(noun, FormatRankList(std::move(ranks)));
}

}  // namespace rankd
