#include "dataplane/nccl/nccl_data_type.h"

namespace rankd::dataplane::nccl {

const char* NcclDataTypeName(NcclDataType type) {
  switch (type) {
    case NcclDataType::kInt8:
      return "ncclInt8";
    case NcclDataType::kUint8:
      return "ncclUint8";
    case NcclDataType::kInt32:
      return "ncclInt32";
    case NcclDataType::kUint32:
      return "ncclUint32";
    case NcclDataType::kInt64:
      return "ncclInt64";
    case NcclDataType::kUint64:
      return "ncclUint64";
    case NcclDataType::kFloat16:
      return "ncclFloat16";
    case NcclDataType::kFloat32:
      return "ncclFloat32";
    case NcclDataType::kFloat64:
      return "ncclFloat64";
    case NcclDataType::kBfloat16:
      return "ncclBfloat16";
  }
  return "unknown";
}

}  // namespace rankd::dataplane::nccl
