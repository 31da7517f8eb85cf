// C++ element types for every TensorDtype, and the compile-time map between
// them (DtypeOf<T>). Float16 and BFloat16 are 16-bit storage types with
// round-to-nearest-even conversions from float; Complex64 is two f32 (real,
// imaginary). Used by HostTensor's typed accessors and by backends that
// reduce on the host. Depends on dataplane/dtype.h only.
#ifndef RANKD_DATAPLANE_ELEMENT_TYPES_H_
#define RANKD_DATAPLANE_ELEMENT_TYPES_H_

#include <complex>
#include <cstdint>
#include <cstring>

#include "dataplane/dtype.h"

namespace rankd::dataplane {

// IEEE 754 binary16.
struct Float16 {
  uint16_t bits = 0;

  static Float16 FromFloat(float value);
  float ToFloat() const;

  friend bool operator==(Float16 a, Float16 b) { return a.bits == b.bits; }
};

// bfloat16: the upper half of an IEEE 754 binary32.
struct BFloat16 {
  uint16_t bits = 0;

  static BFloat16 FromFloat(float value);
  float ToFloat() const;

  friend bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }
};

using Complex64 = std::complex<float>;

// DtypeOf<T>::value is the TensorDtype stored as T. Undefined for other T,
// so a typed accessor with an unsupported type does not compile.
template <typename T>
struct DtypeOf;
template <>
struct DtypeOf<bool> {
  static constexpr TensorDtype value = TensorDtype::kBool;
};
template <>
struct DtypeOf<float> {
  static constexpr TensorDtype value = TensorDtype::kF32;
};
template <>
struct DtypeOf<Float16> {
  static constexpr TensorDtype value = TensorDtype::kF16;
};
template <>
struct DtypeOf<BFloat16> {
  static constexpr TensorDtype value = TensorDtype::kBf16;
};
template <>
struct DtypeOf<double> {
  static constexpr TensorDtype value = TensorDtype::kF64;
};
template <>
struct DtypeOf<int8_t> {
  static constexpr TensorDtype value = TensorDtype::kI8;
};
template <>
struct DtypeOf<int16_t> {
  static constexpr TensorDtype value = TensorDtype::kI16;
};
template <>
struct DtypeOf<int32_t> {
  static constexpr TensorDtype value = TensorDtype::kI32;
};
template <>
struct DtypeOf<int64_t> {
  static constexpr TensorDtype value = TensorDtype::kI64;
};
template <>
struct DtypeOf<uint8_t> {
  static constexpr TensorDtype value = TensorDtype::kU8;
};
template <>
struct DtypeOf<uint16_t> {
  static constexpr TensorDtype value = TensorDtype::kU16;
};
template <>
struct DtypeOf<uint32_t> {
  static constexpr TensorDtype value = TensorDtype::kU32;
};
template <>
struct DtypeOf<uint64_t> {
  static constexpr TensorDtype value = TensorDtype::kU64;
};
template <>
struct DtypeOf<Complex64> {
  static constexpr TensorDtype value = TensorDtype::kComplex64;
};

// ---- inline conversions ----------------------------------------------------

inline BFloat16 BFloat16::FromFloat(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  BFloat16 out;
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN
    out.bits = static_cast<uint16_t>((bits >> 16) | 0x0040u);
    return out;
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // nearest even
  out.bits = static_cast<uint16_t>((bits + rounding) >> 16);
  return out;
}

inline float BFloat16::ToFloat() const {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

inline Float16 Float16::FromFloat(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t u = x & 0x7fffffffu;
  Float16 out;
  if (u > 0x7f800000u) {  // NaN
    out.bits = static_cast<uint16_t>(sign | 0x7e00u);
    return out;
  }
  if (u >= 0x477ff000u) {  // rounds to infinity (or is infinity)
    out.bits = static_cast<uint16_t>(sign | 0x7c00u);
    return out;
  }
  if (u < 0x33000001u) {  // rounds to zero
    out.bits = static_cast<uint16_t>(sign);
    return out;
  }
  uint32_t exponent = u >> 23;
  uint32_t mantissa = u & 0x7fffffu;
  uint32_t shift;
  if (exponent > 0x70) {  // normal half
    shift = 13;
    exponent -= 0x70;
  } else {  // subnormal half
    shift = 0x7e - exponent;
    exponent = 0;
    mantissa |= 0x800000u;
  }
  const uint32_t lsb = 1u << shift;
  const uint32_t half = lsb >> 1;
  const uint32_t remainder = mantissa & (lsb - 1);
  mantissa >>= shift;
  if (remainder > half || (remainder == half && (mantissa & 1u))) {
    ++mantissa;  // a carry out of the mantissa bumps the exponent below
  }
  out.bits = static_cast<uint16_t>(sign | ((exponent << 10) + mantissa));
  return out;
}

inline float Float16::ToFloat() const {
  const uint32_t sign = (bits >> 15) & 1u;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = (bits & 0x3ffu) << 13;
  if (exponent == 0x1f) {  // Inf or NaN
    exponent = 0xff;
  } else if (exponent == 0) {
    if (mantissa != 0) {  // subnormal: normalize
      exponent = 0x71;
      while ((mantissa & 0x800000u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x7fffffu;
    }
  } else {
    exponent += 0x70;
  }
  const uint32_t wide = (sign << 31) | (exponent << 23) | mantissa;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

}  // namespace rankd::dataplane

#endif  // RANKD_DATAPLANE_ELEMENT_TYPES_H_
