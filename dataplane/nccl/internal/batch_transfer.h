// BatchTransfer: one transfer of a batched send/receive as this member
// submitted it, which is what the NCCL backend's agreement records
// (internal/operation_agreement.h) compare between the transfer's two ends.
// Carried by SessionImpl's OpPlan (internal/session_impl.h). Private to
// dataplane/nccl. A plain value; depends on nothing but the standard
// library.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_BATCH_TRANSFER_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_BATCH_TRANSFER_H_

#include <cstdint>
#include <string>

namespace rankd::dataplane::nccl::internal {

struct BatchTransfer {
  uint32_t peer = 0;  // member index of the other end
  bool send = false;  // this member is the source
  // OperationFingerprint(canonical) (dataplane/agreement.h): the two
  // ends agree when theirs are equal.
  uint64_t fingerprint = 0;
  std::string canonical;  // what this end submitted
};

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_BATCH_TRANSFER_H_
