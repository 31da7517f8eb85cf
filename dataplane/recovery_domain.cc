#include "dataplane/recovery_domain.h"

#include "absl/strings/str_cat.h"

namespace rankd::dataplane {

std::string RecoveryDomain::ToString() const {
  return absl::StrCat("domain ", index, " (ranks ", first_rank, "-",
                      first_rank + size - 1, ")");
}

}  // namespace rankd::dataplane
