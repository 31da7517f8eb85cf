#include "dataplane/gloo/internal/sum_kernels.h"

#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "dataplane/element_types.h"
#include "dataplane/sum_dtypes.h"

namespace rankd::dataplane::gloo::internal {
namespace {

template <typename T>
void SumArithmetic(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  if constexpr (std::is_integral_v<T>) {
    // Unsigned arithmetic: wraps modulo 2^bits with no undefined behaviour.
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < n; ++i) {
      o[i] = static_cast<T>(static_cast<U>(x[i]) + static_cast<U>(y[i]));
    }
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  }
}

template <typename H>
void SumHalf(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<H*>(out);
  const auto* x = static_cast<const H*>(a);
  const auto* y = static_cast<const H*>(b);
  for (size_t i = 0; i < n; ++i) {
    o[i] = H::FromFloat(x[i].ToFloat() + y[i].ToFloat());
  }
}

void SumComplex64(void* out, const void* a, const void* b, size_t n) {
  SumArithmetic<float>(out, a, b, 2 * n);
}

template <typename T>
SumKernel Kernel() {
  return SumKernel{sizeof(T), &SumArithmetic<T>};
}

}  // namespace

bool SumSupported(TensorDtype dtype) { return SumDefined(dtype); }

absl::StatusOr<SumKernel> SumKernelFor(TensorDtype dtype,
                                       const char* operation) {
  switch (dtype) {
    case TensorDtype::kF32:
      return Kernel<float>();
    case TensorDtype::kF64:
      return Kernel<double>();
    case TensorDtype::kI8:
      return Kernel<int8_t>();
    case TensorDtype::kI16:
      return Kernel<int16_t>();
    case TensorDtype::kI32:
      return Kernel<int32_t>();
    case TensorDtype::kI64:
      return Kernel<int64_t>();
    case TensorDtype::kU8:
      return Kernel<uint8_t>();
    case TensorDtype::kU16:
      return Kernel<uint16_t>();
    case TensorDtype::kU32:
      return Kernel<uint32_t>();
    case TensorDtype::kU64:
      return Kernel<uint64_t>();
    case TensorDtype::kF16:
      return SumKernel{sizeof(Float16), &SumHalf<Float16>};
    case TensorDtype::kBf16:
      return SumKernel{sizeof(BFloat16), &SumHalf<BFloat16>};
    case TensorDtype::kComplex64:
      return SumKernel{sizeof(Complex64), &SumComplex64};
    case TensorDtype::kBool:
      break;
  }
  return SumUndefinedError("gloo", operation, dtype);
}

}  // namespace rankd::dataplane::gloo::internal
