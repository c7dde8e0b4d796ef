// Shared helpers of the a4w4 library tests. Everything here is written from the numerics contract
// (docs/semantics.md) and uses no a4w4 code: the expected side of every test is computed
// independently of the library. It only includes the public header (for a4w4_tensor and the
// enums), so both black-box tests (linking liba4w4) and white-box tests (linking a4w4_objects)
// can use it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "a4w4/a4w4.h"

namespace a4w4_test {

// ---- Formats, decoded independently --------------------------------------------------------

// The E2M1 table of the contract, by code (codes 8..15 are the negatives; 0x8 is -0).
inline constexpr double kE2M1Table[16] = {0.0,  0.5,  1.0,  1.5,  2.0,  3.0,  4.0,  6.0,
                                          -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};

// 2^(byte - 127); NaN for 0xFF.
double e8m0_value(uint8_t byte);
// IEEE binary16 and bfloat16 bit patterns to double (every value is exact in double).
double fp16_to_double(uint16_t bits);
double bf16_to_double(uint16_t bits);
double f32_bits_to_double(uint32_t bits);

// A binary floating-point output format: `precision` significand bits (implicit one included),
// minimum normal exponent, largest finite value.
struct FloatFormat {
  int precision;
  int min_exponent;
  double max_finite;
};
FloatFormat format_of(a4w4_dtype dtype);  // F32, BF16 or F16

// hi + lo (hi + lo exact, |lo| <= ulp(hi)/2 or lo == 0) rounded once to the format: to nearest,
// ties to even, overflow to +-Inf, gradual underflow. Returned as a double holding that value.
double round_to_format(const FloatFormat& format, double hi, double lo = 0.0);
double round_to_dtype(a4w4_dtype dtype, double hi, double lo = 0.0);

// Bit patterns of a value that is exactly representable in the format (or +-Inf / NaN).
uint16_t fp16_bits_of(double exact);
uint16_t bf16_bits_of(double exact);

int dtype_bits(a4w4_dtype dtype);  // 4, 8, 16 or 32

// ---- Host tensors with poison --------------------------------------------------------------

inline constexpr uint8_t kPoison = 0xA5;

// A rank-2 (or rank-1) host buffer of `dtype` viewed as [rows, cols] with a row stride in
// elements (for rank 1: `cols` is 1 and the stride is the element stride). The bytes outside the
// view (the row gaps) are part of the buffer, so a test can check nothing wrote there.
class HostTensor {
 public:
  HostTensor() = default;
  static HostTensor matrix(a4w4_dtype dtype, int64_t rows, int64_t cols, int64_t row_stride = 0,
                           uint8_t fill = kPoison);
  static HostTensor vector(a4w4_dtype dtype, int64_t n, int64_t stride = 1, uint8_t fill = kPoison);

  a4w4_tensor desc(a4w4_device device = a4w4_cpu()) const;

  a4w4_dtype dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t stride() const { return stride_; }
  uint8_t* data() { return bytes_.data(); }
  const uint8_t* data() const { return bytes_.data(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t>& bytes() { return bytes_; }

  // Element index (in elements of the dtype) of [r, c], and whether a byte offset lies in the view.
  int64_t index(int64_t r, int64_t c) const { return r * stride_ + c; }
  bool byte_in_view(size_t offset) const;

  // Float dtypes (F32/BF16/F16): exact read; set() requires a value representable in the dtype.
  double get(int64_t r, int64_t c) const;
  void set(int64_t r, int64_t c, double exact);
  void set_bits(int64_t r, int64_t c, uint32_t bits);  // raw pattern (16 or 32 bits)
  // E2M1: the 4-bit code of element [r, c]. E8M0/U8: the byte.
  uint8_t code(int64_t r, int64_t c) const;
  void set_code(int64_t r, int64_t c, uint8_t code);
  uint8_t byte(int64_t r, int64_t c) const;
  void set_byte(int64_t r, int64_t c, uint8_t value);

  // Vectors: element i.
  double get(int64_t i) const { return get(i, 0); }

  void fill_bytes(uint8_t value);
  void fill_random_bytes(std::mt19937_64& rng);

 private:
  a4w4_dtype dtype_ = A4W4_DTYPE_F32;
  int64_t rows_ = 0, cols_ = 0, stride_ = 0;
  bool rank1_ = false;
  std::vector<uint8_t> bytes_;
};

// Passes when the tensor's bytes equal `before` (e.g. a poisoned output after a failed call);
// otherwise names the first differing offset.
::testing::AssertionResult bytes_unchanged(const std::vector<uint8_t>& before,
                                           const HostTensor& after);
// Passes when every byte outside the [rows, cols] view equals `before` (row gaps untouched).
::testing::AssertionResult gaps_unchanged(const std::vector<uint8_t>& before,
                                          const HostTensor& after);

// ---- MX operands -----------------------------------------------------------------------------

// Scale bytes drawn uniformly from [lo, hi]; a fraction of them replaced by 0xFF (NaN).
struct ScaleRange {
  int lo = 120;
  int hi = 134;
  double nan_fraction = 0.0;
};

// values [rows, K] E2M1 and scales [rows, K/32] E8M0, with optional row padding. Padding bytes are
// random (so a kernel that read them would produce wrong results), codes are uniform over 0..15.
struct MxOperand {
  HostTensor values;
  HostTensor scales;
  int64_t rows() const { return values.rows(); }
  int64_t k() const { return values.cols(); }
};
MxOperand random_mx(std::mt19937_64& rng, int64_t rows, int64_t k, const ScaleRange& scales,
                    int64_t value_pad = 0, int64_t scale_pad = 0);

// Random finite values of `dtype` (random sign, exponent in [min_exp, max_exp], random
// significand) written into every element of the view.
void fill_random_floats(std::mt19937_64& rng, HostTensor& t, int min_exp, int max_exp);

// ---- The float64 evaluation of the GEMM formula ----------------------------------------------

// Per element of D: the exact value of alpha * sum_b 2^(sa+sb-254) * sum_k a*b + beta*C + bias,
// as a normalised double-double (hi + lo), and sum of the absolute values of its terms (to bound
// what a reordered accumulation may change). NaN (hi) where the contract says NaN.
struct GemmReference {
  int64_t m = 0, n = 0;
  int64_t terms = 0;  // K/32 block partials + C + bias: the additions a kernel makes
  std::vector<double> hi, lo, magnitude;
};
GemmReference reference_gemm(const MxOperand& a, const MxOperand& b, float alpha, float beta,
                             const HostTensor* c, const HostTensor* bias);

struct CompareStats {
  int64_t exact = 0;      // D == the correctly rounded reference
  int64_t allowance = 0;  // differs, but within the accumulation allowance (near a midpoint)
  int64_t nan = 0, inf = 0, zero = 0, finite_nonzero = 0;
};

// Checks D against the reference. Each element must be the reference rounded once to D's dtype;
// a different value passes only if it is what the exact value perturbed by at most
// accumulation_eps * magnitude rounds to (the kernel accumulates partials in a floating format of
// that unit roundoff, in any order). NaN must match NaN exactly; Inf must match Inf. Also checks
// ||D - ref|| / ||ref|| over the normal-range elements against the contract's bound.
::testing::AssertionResult check_gemm(const GemmReference& ref, const HostTensor& d,
                                      double accumulation_eps, CompareStats* stats = nullptr);

// ---- The contract's quantizer, written independently -----------------------------------------

// One block of 32 exact values (fp32/fp16/bf16 values, widened) -> scale byte and 32 codes.
struct QuantizedBlock {
  uint8_t scale;
  uint8_t codes[32];
};
QuantizedBlock reference_quantize_block(const double* values, a4w4_scale_mode mode);

// The E2M1 code nearest to x (finite) by exhaustive comparison of distances to the 8 magnitudes,
// ties to the even code, |x| > 6 saturating, sign kept.
uint8_t reference_e2m1_code(double x);

std::string hex_byte(uint8_t value);

}  // namespace a4w4_test
