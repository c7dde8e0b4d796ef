#include "mx_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace a4w4::cli {
namespace {

constexpr double kE2M1Values[16] = {0.0,  0.5,  1.0,  1.5,  2.0,  3.0,  4.0,  6.0,
                                    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};
constexpr uint8_t kScaleNaN = 0xFF;

// rows x K decoded values; exact in double (E2M1 * 2^-127 .. 6 * 2^127).
std::vector<double> decode(const MxMatrix& op) {
  std::vector<double> out(static_cast<size_t>(op.rows * op.k));
  const int64_t blocks = op.k / 32;
  for (int64_t r = 0; r < op.rows; ++r) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const uint8_t scale_byte = op.scales[static_cast<size_t>(r * blocks + blk)];
      const double scale = scale_byte == kScaleNaN ? std::numeric_limits<double>::quiet_NaN()
                                                   : std::ldexp(1.0, scale_byte - 127);
      for (int64_t i = 0; i < 32; ++i) {
        const int64_t k = blk * 32 + i;
        const uint8_t byte = op.values[static_cast<size_t>(r * (op.k / 2) + k / 2)];
        const int code = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);  // element 2i: low nibble
        out[static_cast<size_t>(r * op.k + k)] = kE2M1Values[code] * scale;
      }
    }
  }
  return out;
}

// Element k of row r, decoded exactly.
double element(const MxMatrix& op, int64_t r, int64_t k) {
  const uint8_t scale_byte = op.scales[static_cast<size_t>(r * (op.k / 32) + k / 32)];
  if (scale_byte == kScaleNaN) return std::numeric_limits<double>::quiet_NaN();
  const uint8_t byte = op.values[static_cast<size_t>(r * (op.k / 2) + k / 2)];
  const int code = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);  // element 2i: low nibble
  return kE2M1Values[code] * std::ldexp(1.0, scale_byte - 127);
}

}  // namespace

double reference_entry(const MxMatrix& a, int64_t row, const MxMatrix& b, int64_t col) {
  double sum = 0;
  for (int64_t k = 0; k < a.k; ++k) sum += element(a, row, k) * element(b, col, k);
  return sum;
}

std::vector<double> reference_gemm(const MxMatrix& a, const MxMatrix& b) {
  const std::vector<double> da = decode(a), db = decode(b);
  const int64_t m_count = a.rows, n_count = b.rows, k_count = a.k;
  std::vector<double> ref(static_cast<size_t>(m_count * n_count));
  for (int64_t m = 0; m < m_count; ++m) {
    const double* row_a = da.data() + m * k_count;
    int64_t n = 0;
    // Four columns at a time: independent sums keep the FPU busy.
    for (; n + 4 <= n_count; n += 4) {
      const double* b0 = db.data() + n * k_count;
      const double *b1 = b0 + k_count, *b2 = b1 + k_count, *b3 = b2 + k_count;
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t k = 0; k < k_count; ++k) {
        s0 += row_a[k] * b0[k];
        s1 += row_a[k] * b1[k];
        s2 += row_a[k] * b2[k];
        s3 += row_a[k] * b3[k];
      }
      double* out = ref.data() + m * n_count + n;
      out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
    }
    for (; n < n_count; ++n) {
      const double* row_b = db.data() + n * k_count;
      double sum = 0;
      for (int64_t k = 0; k < k_count; ++k) sum += row_a[k] * row_b[k];
      ref[static_cast<size_t>(m * n_count + n)] = sum;
    }
  }
  return ref;
}

Comparison compare(std::span<const double> result, std::span<const double> reference) {
  Comparison comparison;
  // Scale by the largest reference magnitude so that the sums of squares cannot overflow.
  double largest = 0.0;
  for (const double r : reference)
    if (std::isfinite(r)) largest = std::max(largest, std::abs(r));
  const double scale = largest > 0.0 ? 1.0 / largest : 1.0;
  double error_squares = 0.0, reference_squares = 0.0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double r = reference[i], d = result[i];
    if (std::isnan(r) || std::isnan(d)) {
      if (std::isnan(r) != std::isnan(d)) ++comparison.nan_mismatches;
      continue;
    }
    if (std::isinf(d) || std::isinf(r)) {
      if (d != r) ++comparison.infinite;
      continue;
    }
    error_squares += (d - r) * scale * ((d - r) * scale);
    reference_squares += r * scale * (r * scale);
  }
  comparison.relative_error = reference_squares > 0.0 ? std::sqrt(error_squares / reference_squares)
                                                      : std::sqrt(error_squares) / scale;
  return comparison;
}

}  // namespace a4w4::cli
