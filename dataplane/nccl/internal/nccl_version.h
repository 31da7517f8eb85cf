// NCCL version codes, as nccl.h's NCCL_VERSION macro makes them, and the
// versions from which rankd uses an NCCL feature. Private to
// dataplane/nccl. Depends on nothing.
#ifndef RANKD_DATAPLANE_NCCL_INTERNAL_NCCL_VERSION_H_
#define RANKD_DATAPLANE_NCCL_INTERNAL_NCCL_VERSION_H_

namespace rankd::dataplane::nccl::internal {

// NCCL_VERSION(X, Y, Z) of nccl.h.
constexpr int NcclVersionCode(int major, int minor, int patch) {
  return (major <= 2 && minor <= 8) ? major * 1000 + minor * 100 + patch
                                    : major * 10000 + minor * 100 + patch;
}
// ncclBfloat16 exists from NCCL 2.10.
inline constexpr int kNcclBf16Version = NcclVersionCode(2, 10, 0);
// ncclCommInitRankScalable exists from NCCL 2.23.4.
inline constexpr int kNcclScalableInitVersion = NcclVersionCode(2, 23, 4);

}  // namespace rankd::dataplane::nccl::internal

#endif  // RANKD_DATAPLANE_NCCL_INTERNAL_NCCL_VERSION_H_
