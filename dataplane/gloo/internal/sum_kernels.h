// Element-wise sum kernels in the form Gloo's allreduce takes
// (out[i] = a[i] + b[i] over untyped buffers), one per dtype the Gloo backend
// can sum: f32, f64, i8..i64, u8..u64 (integers wrap modulo 2^bits), f16 and
// bf16 (each add computed in f32 and rounded to nearest even), complex64 (as
// pairs of f32). Bool has no sum: SumKernelFor fails closed. Pure functions,
// thread-safe. Depends on dataplane/types.h, element_types.h and absl.
#ifndef RANKD_DATAPLANE_GLOO_SUM_KERNELS_H_
#define RANKD_DATAPLANE_GLOO_SUM_KERNELS_H_

#include <cstddef>
#include <functional>

#include "absl/status/statusor.h"
#include "dataplane/dtype.h"

namespace rankd::dataplane::gloo::internal {

struct SumKernel {
  // Bytes per element (Gloo segments buffers at element boundaries).
  size_t element_size = 0;
  // out[i] = a[i] + b[i] for `elements` elements; out may alias a or b.
  std::function<void(void* out, const void* a, const void* b, size_t elements)>
      reduce;
};

// Whether all_reduce_sum supports `dtype` on the Gloo backend.
bool SumSupported(TensorDtype dtype);

// The kernel for `dtype`; Unimplemented naming the dtype and the operation
// when it has no sum (bool).
absl::StatusOr<SumKernel> SumKernelFor(TensorDtype dtype,
                                       const char* operation);

}  // namespace rankd::dataplane::gloo::internal

#endif  // RANKD_DATAPLANE_GLOO_SUM_KERNELS_H_
