// An independent float64 evaluation of the MXFP4 GEMM contract (docs: mx-numerics.md), used by
// `a4w4 gemm --check` to judge the library's result.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common.h"

namespace a4w4::cli {

// ref[m, n] = sum_k a[m, k] * b[n, k] with every element decoded as E2M1(code) * 2^(scale - 127)
// and a NaN scale making its whole block NaN. Products of decoded values are exact in double and
// so is each 32-element block sum; only the sum over blocks rounds, in double.
std::vector<double> reference_gemm(const MxMatrix& a, const MxMatrix& b);

// ref[row, col] alone, as reference_gemm computes it: spot checks of problems too large for the
// whole product.
double reference_entry(const MxMatrix& a, int64_t row, const MxMatrix& b, int64_t col);

struct Comparison {
  double relative_error = 0.0;  // ||D - ref|| / ||ref|| over the entries where ref is not NaN
  int64_t nan_mismatches = 0;   // NaN where ref is a number, or a number where ref is NaN
  int64_t infinite = 0;         // infinities in D or ref that the other does not match
};

Comparison compare(std::span<const double> result, std::span<const double> reference);

}  // namespace a4w4::cli
