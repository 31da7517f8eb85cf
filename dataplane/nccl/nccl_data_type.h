// NcclDataType: the values of NCCL's ncclDataType_t that rankd uses
// (nccl.h's; passed to the NCCL that internal/native_library.h loads, and
// checked against nccl.h by native_abi_conformance_test). Which type sums
// which TensorDtype is internal/sum_type.h. Depends on nothing but the
// standard library.
#ifndef RANKD_DATAPLANE_NCCL_NCCL_DATA_TYPE_H_
#define RANKD_DATAPLANE_NCCL_NCCL_DATA_TYPE_H_

namespace rankd::dataplane::nccl {

enum class NcclDataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

// nccl.h's name of `type`: "ncclFloat32", ...; "unknown" for a value
// outside the enum. A static string.
const char* NcclDataTypeName(NcclDataType type);

}  // namespace rankd::dataplane::nccl

#endif  // RANKD_DATAPLANE_NCCL_NCCL_DATA_TYPE_H_
