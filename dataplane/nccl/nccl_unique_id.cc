#include "dataplane/nccl/nccl_unique_id.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane::nccl {

std::string UniqueIdKey(absl::string_view ns, absl::string_view tag,
                        absl::string_view comm_name, uint32_t index,
                        uint32_t count) {
  std::string key;
  if (!ns.empty()) absl::StrAppend(&key, ns, "/");
  absl::StrAppend(&key, "nccl/", tag, "/", comm_name, "/uid/", index, "of",
                  count);
  return key;
}

}  // namespace rankd::dataplane::nccl
