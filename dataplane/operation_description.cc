#include "dataplane/operation_description.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rankd::dataplane {

std::string DescribeOnValue(absl::string_view kind,
                            const ValueDescriptor& value) {
  return absl::StrCat(kind, " ", value.ToString());
}

std::shared_ptr<const std::string> DescribeOnValueRemembered(
    absl::string_view kind, const ValueDescriptor& value) {
  struct Remembered {
    std::string kind;
    std::optional<ValueDescriptor> value;
    std::shared_ptr<const std::string> description;
  };
  thread_local Remembered last;
  if (!last.value.has_value() || last.kind != kind || !(*last.value == value)) {
    // Built first, then moved in (no throw): an allocation failure leaves
    // the last entry whole.
    auto description =
        std::make_shared<const std::string>(DescribeOnValue(kind, value));
    std::string key(kind);
    std::optional<ValueDescriptor> copy(value);
    last.description = std::move(description);
    last.kind = std::move(key);
    last.value = std::move(copy);
  }
  return last.description;
}

std::string DescribeRooted(absl::string_view kind, uint32_t root,
                           const ValueDescriptor& value) {
  return absl::StrCat(kind, " root=", root, " ", value.ToString());
}

std::string DescribeAlongAxis(absl::string_view kind, size_t axis,
                              const ValueDescriptor& value,
                              absl::Span<const size_t> counts) {
  std::vector<std::string> dims;
  if (value.shape().empty()) {
    dims.push_back(axis == 0 ? "*" : "1");
  }
  for (size_t i = 0; i < value.shape().size(); ++i) {
    dims.push_back(i == axis ? "*" : absl::StrCat(value.shape()[i]));
  }
  std::string out = absl::StrCat(kind, " axis=", axis, " ");
  if (!counts.empty()) {
    absl::StrAppend(&out, "counts=[", absl::StrJoin(counts, ","), "] ");
  }
  absl::StrAppend(&out, DtypeName(value.dtype()), "[",
                  absl::StrJoin(dims, ", "), "]");
  return out;
}

std::string DescribeBundle(absl::Span<const ValueDescriptor> values) {
  std::vector<std::string> parts;
  parts.reserve(values.size());
  for (const ValueDescriptor& v : values) parts.push_back(v.ToString());
  return absl::StrCat("bundle(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace rankd::dataplane
