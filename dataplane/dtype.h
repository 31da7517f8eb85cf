// TensorDtype: the element types a data-plane value may hold, with their
// sizes and names (docs/contract.md, Types). The vocabulary every other
// contract header builds on. Depends on nothing but the C++ library.
#ifndef RANKD_DATAPLANE_DTYPE_H_
#define RANKD_DATAPLANE_DTYPE_H_

#include <cstddef>

namespace rankd::dataplane {

// Element types a value may hold.
enum class TensorDtype {
  kBool,
  kF32,
  kF16,
  kBf16,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kComplex64,
};

// Bytes per element of `dtype` (Bool is one byte). Never fails: a value
// outside the enum (a caller's cast) reports 1.
size_t DtypeSize(TensorDtype dtype);
// The lower-case name of `dtype` ("f32", "bf16", "complex64", ...), a
// static string; "unknown" for a value outside the enum.
const char* DtypeName(TensorDtype dtype);

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_DTYPE_H_
