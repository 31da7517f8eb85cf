#include "launcher/line_prefixer.h"

#include "absl/strings/str_cat.h"

namespace rankd::launcher {

std::string LinePrefixer::Feed(absl::string_view data) {
  std::string out;
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    const size_t room = kMaxLineBytes - pending_.size();
    if (newline != absl::string_view::npos && newline < room) {
      absl::StrAppend(&out, label_, pending_, data.substr(0, newline + 1));
      pending_.clear();
      data.remove_prefix(newline + 1);
    } else if (data.size() < room) {
      absl::StrAppend(&pending_, data);
      data = {};
    } else {
      // A line longer than kMaxLineBytes: release what fits.
      absl::StrAppend(&out, label_, pending_, data.substr(0, room), "\n");
      pending_.clear();
      data.remove_prefix(room);
    }
  }
  return out;
}

std::string LinePrefixer::Flush() {
  if (pending_.empty()) return "";
  std::string out = absl::StrCat(label_, pending_, "\n");
  pending_.clear();
  return out;
}

}  // namespace rankd::launcher
