#include "dataplane/dtype.h"

namespace rankd::dataplane {

size_t DtypeSize(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kBool:
    case TensorDtype::kI8:
    case TensorDtype::kU8:
      return 1;
    case TensorDtype::kF16:
    case TensorDtype::kBf16:
    case TensorDtype::kI16:
    case TensorDtype::kU16:
      return 2;
    case TensorDtype::kF32:
    case TensorDtype::kI32:
    case TensorDtype::kU32:
      return 4;
    case TensorDtype::kF64:
    case TensorDtype::kI64:
    case TensorDtype::kU64:
    case TensorDtype::kComplex64:
      return 8;
  }
  return 1;
}

const char* DtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kBool:
      return "bool";
    case TensorDtype::kF32:
      return "f32";
    case TensorDtype::kF16:
      return "f16";
    case TensorDtype::kBf16:
      return "bf16";
    case TensorDtype::kF64:
      return "f64";
    case TensorDtype::kI8:
      return "i8";
    case TensorDtype::kI16:
      return "i16";
    case TensorDtype::kI32:
      return "i32";
    case TensorDtype::kI64:
      return "i64";
    case TensorDtype::kU8:
      return "u8";
    case TensorDtype::kU16:
      return "u16";
    case TensorDtype::kU32:
      return "u32";
    case TensorDtype::kU64:
      return "u64";
    case TensorDtype::kComplex64:
      return "complex64";
  }
  return "unknown";
}

}  // namespace rankd::dataplane
