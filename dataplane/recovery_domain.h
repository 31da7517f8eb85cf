// RecoveryDomain: the data-parallel replica a session is confined to when
// the job recovers by domain (docs/contract.md, "Data-parallel domains"):
// its index and its contiguous block of world ranks. A value type; the rule
// of which groups a session then holds is domain_groups.h's. Depends on
// absl only.
#ifndef RANKD_DATAPLANE_RECOVERY_DOMAIN_H_
#define RANKD_DATAPLANE_RECOVERY_DOMAIN_H_

#include <cstdint>
#include <string>

namespace rankd::dataplane {

// Domain `index`: the world ranks [first_rank, first_rank + size).
struct RecoveryDomain {
  uint32_t index = 0;
  uint32_t first_rank = 0;
  uint32_t size = 0;

  bool Contains(uint32_t rank) const {
    return rank >= first_rank && rank - first_rank < size;
  }
  // "domain 1 (ranks 2-3)", the words the daemons use for a domain.
  std::string ToString() const;

  friend bool operator==(const RecoveryDomain&,
                         const RecoveryDomain&) = default;
};

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_RECOVERY_DOMAIN_H_
