// The GEMM epilogue shared by every CPU kernel: D = alpha * acc + beta * C + bias, evaluated in
// double from the block-partial sum `acc` and rounded once to D's dtype. Kernels that produce the
// same acc therefore write the same bits.
#pragma once

#include "dispatch/problem.h"
#include "numerics/float_formats.h"

namespace a4w4::cpu {

inline void store_output(const GemmProblem& p, int64_t m, int64_t n, double acc) {
  double out = static_cast<double>(p.alpha) * acc;
  if (p.c.data != nullptr)
    out +=
        static_cast<double>(p.beta) * numerics::load_float(p.c.dtype, p.c.data, m * p.c.stride + n);
  if (p.bias.data != nullptr)
    out += numerics::load_float(p.bias.dtype, p.bias.data, n * p.bias.stride);
  numerics::store_rounded(p.d_dtype, p.d, m * p.d_stride + n, out);
}

// store_output for D[m, n0 .. n0 + count): the same operations, with the dtype dispatch hoisted
// out of the loop for the common all-fp32 case.
inline void store_output_row(const GemmProblem& p, int64_t m, int64_t n0, int64_t count,
                             const double* acc) {
  const bool f32 = p.d_dtype == A4W4_DTYPE_F32 &&
                   (p.c.data == nullptr || p.c.dtype == A4W4_DTYPE_F32) &&
                   (p.bias.data == nullptr || p.bias.dtype == A4W4_DTYPE_F32);
  if (!f32) {
    for (int64_t j = 0; j < count; ++j) store_output(p, m, n0 + j, acc[j]);
    return;
  }
  const double alpha = p.alpha, beta = p.beta;
  float* d = static_cast<float*>(p.d) + m * p.d_stride + n0;  // (C may be this very row)
  const float* c = p.c.data ? static_cast<const float*>(p.c.data) + m * p.c.stride + n0 : nullptr;
  const float* bias =
      p.bias.data ? static_cast<const float*>(p.bias.data) + n0 * p.bias.stride : nullptr;
  for (int64_t j = 0; j < count; ++j) {
    double out = alpha * acc[j];
    if (c != nullptr) out += beta * static_cast<double>(c[j]);
    if (bias != nullptr) out += static_cast<double>(bias[j * p.bias.stride]);
    numerics::store_rounded(A4W4_DTYPE_F32, d, j, out);
  }
}

}  // namespace a4w4::cpu
