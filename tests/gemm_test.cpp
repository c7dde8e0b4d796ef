// a4w4_gemm against the float64 evaluation of the contract's formula (test_support.h): shapes,
// strides, every epilogue and dtype combination, wide and NaN scales, split-K, thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "a4w4/a4w4.h"
#include "test_support.h"

namespace a4w4_test {
namespace {

// cpu.reference accumulates in double (docs/semantics.md): the unit roundoff its results are
// allowed to deviate by before the final rounding. Away from rounding midpoints this demands the
// correctly rounded result.
constexpr double kDoubleAccumulation = 0x1p-53;

struct GemmCase {
  int64_t m = 1, n = 1, k = 32;
  a4w4_dtype d_dtype = A4W4_DTYPE_F32;
  // Row padding (elements) of each operand; bias_stride is the bias element stride.
  int64_t a_pad = 0, a_scale_pad = 0, b_pad = 0, b_scale_pad = 0, d_pad = 0, c_pad = 0;
  bool with_c = false;
  a4w4_dtype c_dtype = A4W4_DTYPE_F32;
  bool c_is_d = false;  // C is the very tensor D (in-place update)
  bool with_bias = false;
  a4w4_dtype bias_dtype = A4W4_DTYPE_F32;
  int64_t bias_stride = 1;
  float alpha = 1.0f, beta = 0.0f;
  int split_k = 0;
  int threads = 0;
  const char* kernel = nullptr;
  a4w4_math_mode math_mode = A4W4_MATH_EXACT;
  bool prepared_b = false;  // B goes through a4w4_prepare_weight first, into prepared_layout
  a4w4_layout prepared_layout = A4W4_LAYOUT_PREPARED_V2;
  ScaleRange a_scales, b_scales;
  int c_min_exp = -6, c_max_exp = 6;  // magnitudes of C and bias values
  uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream s;
    s << "M=" << m << " N=" << n << " K=" << k << " d=" << a4w4_dtype_name(d_dtype);
    if (a_pad || a_scale_pad || b_pad || b_scale_pad || d_pad || c_pad || bias_stride != 1)
      s << " pads(a " << a_pad << ", as " << a_scale_pad << ", b " << b_pad << ", bs "
        << b_scale_pad << ", d " << d_pad << ", c " << c_pad << ", bias stride " << bias_stride
        << ")";
    if (with_c) s << " c=" << (c_is_d ? "d" : a4w4_dtype_name(c_dtype)) << " beta=" << beta;
    if (with_bias) s << " bias=" << a4w4_dtype_name(bias_dtype);
    s << " alpha=" << alpha << " split_k=" << split_k << " threads=" << threads << " scales a["
      << a_scales.lo << "," << a_scales.hi << "] b[" << b_scales.lo << "," << b_scales.hi
      << "] seed=" << seed;
    if (kernel) s << " kernel='" << kernel << "'";
    if (prepared_b) s << " B prepared (layout " << prepared_layout << ")";
    return s.str();
  }
};

// The sizes the documented tiling (16 rows x 128 K, two E2M1 per byte; 16 x 4 scales) implies.
int64_t tiles(int64_t n, int64_t k) {
  return ((n + 15) / 16) * ((k + 127) / 128);
}

struct PreparedWeight {
  std::vector<uint8_t> values, scales;  // the prepared buffers plus 64 poisoned bytes each
  a4w4_tensor values_desc{}, scales_desc{};
};

// a4w4_prepare_weight of a plain operand into buffers of a4w4_prepared_weight_size bytes (checked
// against the documented tiling) followed by poison that must survive.
PreparedWeight prepare(a4w4_context ctx, const MxOperand& b,
                       a4w4_layout layout = A4W4_LAYOUT_PREPARED_V2) {
  PreparedWeight out;
  size_t weight_bytes = 0, scale_bytes = 0;
  EXPECT_EQ(a4w4_prepared_weight_size(b.rows(), b.k(), layout, &weight_bytes, &scale_bytes),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  if (layout != A4W4_LAYOUT_PREPARED_V2_INT8) {
    EXPECT_EQ(weight_bytes, static_cast<size_t>(tiles(b.rows(), b.k()) * 1024));
  }
  EXPECT_EQ(scale_bytes, static_cast<size_t>(tiles(b.rows(), b.k()) * 64));
  out.values.assign(weight_bytes + 64, kPoison);
  out.scales.assign(scale_bytes + 64, kPoison);
  out.values_desc =
      a4w4_tensor_2d(out.values.data(), A4W4_DTYPE_E2M1, b.rows(), b.k(), 0, a4w4_cpu());
  out.scales_desc =
      a4w4_tensor_2d(out.scales.data(), A4W4_DTYPE_E8M0, b.rows(), b.k() / 32, 0, a4w4_cpu());
  out.values_desc.layout = out.scales_desc.layout = layout;
  const a4w4_tensor bd = b.values.desc(), bsd = b.scales.desc();
  EXPECT_EQ(a4w4_prepare_weight(ctx, &bd, &bsd, &out.values_desc, &out.scales_desc, nullptr),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  for (size_t i = weight_bytes; i < out.values.size(); ++i)
    EXPECT_EQ(out.values[i], kPoison) << "prepare_weight wrote past the weight size at " << i;
  for (size_t i = scale_bytes; i < out.scales.size(); ++i)
    EXPECT_EQ(out.scales[i], kPoison) << "prepare_weight wrote past the scale size at " << i;
  return out;
}

struct GemmRun {
  HostTensor d;
  CompareStats stats;
};

// Builds the operands of `c` (randomly, from its seed), runs a4w4_gemm, checks D against the
// float64 reference, the row gaps of D and that no input changed.
GemmRun run_case(a4w4_context ctx, const GemmCase& c, const MxOperand* a_in = nullptr,
                 const MxOperand* b_in = nullptr) {
  SCOPED_TRACE(c.describe());
  std::mt19937_64 rng(c.seed);
  const MxOperand a = a_in ? *a_in : random_mx(rng, c.m, c.k, c.a_scales, c.a_pad, c.a_scale_pad);
  const MxOperand b = b_in ? *b_in : random_mx(rng, c.n, c.k, c.b_scales, c.b_pad, c.b_scale_pad);
  GemmRun run{HostTensor::matrix(c.d_dtype, c.m, c.n, c.n + c.d_pad), {}};
  HostTensor& d = run.d;
  HostTensor c_tensor, bias;
  if (c.with_c) {
    if (c.c_is_d) {
      fill_random_floats(rng, d, c.c_min_exp, c.c_max_exp);
      c_tensor = d;  // the values C holds before the call
    } else {
      c_tensor = HostTensor::matrix(c.c_dtype, c.m, c.n, c.n + c.c_pad);
      c_tensor.fill_random_bytes(rng);
      fill_random_floats(rng, c_tensor, c.c_min_exp, c.c_max_exp);
    }
  }
  if (c.with_bias) {
    bias = HostTensor::vector(c.bias_dtype, c.n, c.bias_stride);
    bias.fill_random_bytes(rng);
    fill_random_floats(rng, bias, c.c_min_exp, c.c_max_exp);
  }
  const GemmReference ref = reference_gemm(a, b, c.alpha, c.beta, c.with_c ? &c_tensor : nullptr,
                                           c.with_bias ? &bias : nullptr);

  const auto a_before = a.values.bytes(), as_before = a.scales.bytes();
  const auto b_before = b.values.bytes(), bs_before = b.scales.bytes();
  const auto d_before = d.bytes();
  const auto c_before = c_tensor.bytes(), bias_before = bias.bytes();

  EXPECT_EQ(a4w4_context_set_num_threads(ctx, c.threads), A4W4_SUCCESS);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.alpha = c.alpha;
  options.beta = c.beta;
  options.split_k = c.split_k;
  options.kernel = c.kernel;
  options.math_mode = c.math_mode;
  a4w4_tensor ad = a.values.desc(), asd = a.scales.desc(), bd = b.values.desc(),
              bsd = b.scales.desc(), dd = d.desc();
  const a4w4_tensor cd = c.c_is_d ? d.desc() : c_tensor.desc(), biasd = bias.desc();
  PreparedWeight prepared;
  if (c.prepared_b) {
    prepared = prepare(ctx, b, c.prepared_layout);
    bd = prepared.values_desc;
    bsd = prepared.scales_desc;
  }
  const a4w4_status status = a4w4_gemm(ctx, &ad, &asd, &bd, &bsd, c.with_c ? &cd : nullptr,
                                       c.with_bias ? &biasd : nullptr, &dd, &options, nullptr);
  EXPECT_EQ(status, A4W4_SUCCESS) << a4w4_last_error_message();
  if (status != A4W4_SUCCESS) return run;

  EXPECT_TRUE(bytes_unchanged(a_before, a.values)) << "a";
  EXPECT_TRUE(bytes_unchanged(as_before, a.scales)) << "a_scale";
  EXPECT_TRUE(bytes_unchanged(b_before, b.values)) << "b";
  EXPECT_TRUE(bytes_unchanged(bs_before, b.scales)) << "b_scale";
  if (c.with_c && !c.c_is_d) {
    EXPECT_TRUE(bytes_unchanged(c_before, c_tensor)) << "c";
  }
  if (c.with_bias) {
    EXPECT_TRUE(bytes_unchanged(bias_before, bias)) << "bias";
  }
  EXPECT_TRUE(gaps_unchanged(d_before, d)) << "d was written outside its [M, N] view";
  EXPECT_TRUE(check_gemm(ref, d, kDoubleAccumulation, &run.stats));
  // The exact-match claim: only elements next to a rounding midpoint may need the allowance.
  EXPECT_LE(run.stats.allowance, 1 + c.m * c.n / 100)
      << "too many elements differ from the correctly rounded reference";
  return run;
}

class Gemm : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(a4w4_context_create(&ctx_), A4W4_SUCCESS); }
  void TearDown() override { a4w4_context_destroy(ctx_); }
  a4w4_context ctx_ = nullptr;
};

// ---- Hand-computed results (no reference code involved) ---------------------------------------

TEST_F(Gemm, HandComputedSmallProducts) {
  // A: one row of 64 codes 0..15 repeated; B row 0: +1 (code 2) where A's code is positive,
  // -1 (code 0xA) where negative. Per block (codes 0..15 twice): sum of |values| = 4 * 18 = 72.
  HostTensor a = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 64);
  HostTensor b = HostTensor::matrix(A4W4_DTYPE_E2M1, 2, 64);
  for (int i = 0; i < 64; ++i) {
    a.set_code(0, i, static_cast<uint8_t>(i % 16));
    b.set_code(0, i, (i % 16) < 8 ? 2 : 0xA);
    b.set_code(1, i, 7);  // 6
  }
  HostTensor as = HostTensor::matrix(A4W4_DTYPE_E8M0, 1, 2);
  HostTensor bs = HostTensor::matrix(A4W4_DTYPE_E8M0, 2, 2);
  as.set_byte(0, 0, 127);  // block 0: 2^0
  as.set_byte(0, 1, 130);  // block 1: 2^3
  bs.set_byte(0, 0, 127);
  bs.set_byte(0, 1, 120);  // block 1 of row 0: 2^(130 + 120 - 254) = 2^-4
  bs.set_byte(1, 0, 128);  // row 1: 2^1 and 2^(130+126-254) = 2^2
  bs.set_byte(1, 1, 126);
  HostTensor d = HostTensor::matrix(A4W4_DTYPE_F32, 1, 2);
  HostTensor bias = HostTensor::vector(A4W4_DTYPE_BF16, 2);
  bias.set(0, 0, 0.5);
  bias.set(1, 0, -100.0);
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.alpha = 2.0f;
  const a4w4_tensor ad = a.desc(), asd = as.desc(), bd = b.desc(), bsd = bs.desc(), dd = d.desc(),
                    biasd = bias.desc();
  ASSERT_EQ(a4w4_gemm(ctx_, &ad, &asd, &bd, &bsd, nullptr, &biasd, &dd, &options, nullptr),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  // D[0,0] = 2 * (72 * 1 + 72 * 2^-4) + 0.5 = 2 * 76.5 + 0.5 = 153.5.
  EXPECT_EQ(d.get(0, 0), 153.5);
  // Row 1 of B is all 6: sum of A's values per block = 0 (codes 0..15 cancel) -> D = -100.
  EXPECT_EQ(d.get(0, 1), -100.0);

  // All 1.0 times all 6.0 over K = 32 with unit scales: 192; in bf16 and f16 too.
  for (a4w4_dtype dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
    HostTensor a1 = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 32, 0, 0x22);  // all code 2
    HostTensor b1 = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 32, 0, 0x77);  // all code 7
    HostTensor s1 = HostTensor::matrix(A4W4_DTYPE_E8M0, 1, 1, 0, 127);
    HostTensor d1 = HostTensor::matrix(dtype, 1, 1);
    const a4w4_tensor a1d = a1.desc(), b1d = b1.desc(), s1d = s1.desc(), d1d = d1.desc();
    ASSERT_EQ(a4w4_gemm(ctx_, &a1d, &s1d, &b1d, &s1d, nullptr, nullptr, &d1d, nullptr, nullptr),
              A4W4_SUCCESS);
    EXPECT_EQ(d1.get(0, 0), 192.0) << a4w4_dtype_name(dtype);
  }
}

TEST_F(Gemm, HandComputedRoundingOfTheOutput) {
  // One block: a = 1 (code 2) in every element; b: element 0 has `b_code`, the rest 0, so the
  // block sum is that value times 2^(127 + b_scale - 254). A bias puts D between two outputs.
  HostTensor a = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 32, 0, 0x22);
  HostTensor as = HostTensor::matrix(A4W4_DTYPE_E8M0, 1, 1, 0, 127);
  struct Case {
    a4w4_dtype dtype;
    uint8_t b_code, b_scale;
    double bias;
    double want;
  };
  const Case cases[] = {
      // bf16 spacing at 256 is 2. 256 + 1.5 = 257.5 -> 258.
      {A4W4_DTYPE_BF16, 3, 127, 256.0, 258.0},
      // 256 + 0.75 -> 256.
      {A4W4_DTYPE_BF16, 3, 126, 256.0, 256.0},
      // 256.25 + 0.75 = 257: a tie between 256 and 258 -> even significand: 256.
      {A4W4_DTYPE_BF16, 3, 126, 256.25, 256.0},
      // 258 + 1 = 259: a tie between 258 and 260 -> 260.
      {A4W4_DTYPE_BF16, 2, 127, 258.0, 260.0},
      // f16 spacing at 2048 is 2: 2048 + 1.5 -> 2050; 2048.25 + 0.75 = 2049 -> tie -> 2048.
      {A4W4_DTYPE_F16, 3, 127, 2048.0, 2050.0},
      {A4W4_DTYPE_F16, 3, 126, 2048.25, 2048.0},
      // f16 overflow: 65504 + 16 = 65520 is the tie with 65536 -> Inf; 65504 + 15 -> 65504.
      {A4W4_DTYPE_F16, 2, 131, 65504.0, std::numeric_limits<double>::infinity()},
      {A4W4_DTYPE_F16, 7, 128, 65504.0 + 3.0, 65504.0},
      // f32 spacing at 2^24 is 2: 2^24 + 1.5 -> 2^24 + 2; 2^24 + 1 -> tie -> 2^24.
      {A4W4_DTYPE_F32, 3, 127, 16777216.0, 16777218.0},
      {A4W4_DTYPE_F32, 2, 127, 16777216.0, 16777216.0},
      {A4W4_DTYPE_F32, 2, 127, 16777218.0, 16777220.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(a4w4_dtype_name(c.dtype)) + " bias " + std::to_string(c.bias) +
                 " b code " + std::to_string(c.b_code) + " scale " + std::to_string(c.b_scale));
    HostTensor b = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 32, 0, 0x00);
    b.set_code(0, 0, c.b_code);
    HostTensor bs = HostTensor::matrix(A4W4_DTYPE_E8M0, 1, 1, 0, c.b_scale);
    HostTensor d = HostTensor::matrix(c.dtype, 1, 1);
    HostTensor bias = HostTensor::vector(A4W4_DTYPE_F32, 1);
    bias.set(0, 0, c.bias);
    const a4w4_tensor ad = a.desc(), asd = as.desc(), bd = b.desc(), bsd = bs.desc(), dd = d.desc(),
                      biasd = bias.desc();
    ASSERT_EQ(a4w4_gemm(ctx_, &ad, &asd, &bd, &bsd, nullptr, &biasd, &dd, nullptr, nullptr),
              A4W4_SUCCESS);
    EXPECT_EQ(d.get(0, 0), c.want);
  }
}

// ---- Shapes ------------------------------------------------------------------------------------

TEST_F(Gemm, ManyShapes) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 32},    {1, 7, 64},    {1, 31, 32},   {1, 97, 256},  {2, 1, 96},
                          {33, 65, 128}, {65, 130, 96}, {7, 31, 1024}, {130, 33, 64}, {64, 64, 512},
                          {32, 64, 32},  {3, 5, 2048},  {97, 1, 160},  {31, 97, 64}};
  uint64_t seed = 100;
  for (const Shape& s : shapes) {
    GemmCase c;
    c.m = s.m;
    c.n = s.n;
    c.k = s.k;
    c.seed = seed++;
    run_case(ctx_, c);
  }
}

TEST_F(Gemm, EveryKFrom32To1024) {
  for (int64_t k = 32; k <= 1024; k += 32) {
    GemmCase c;
    c.m = 3;
    c.n = 5;
    c.k = k;
    c.seed = 200 + static_cast<uint64_t>(k);
    run_case(ctx_, c);
  }
}

TEST_F(Gemm, StridedOperands) {
  uint64_t seed = 300;
  for (a4w4_dtype d_dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
    for (int variant = 0; variant < 3; ++variant) {
      GemmCase c;
      c.m = 37;
      c.n = 45;
      c.k = 160;
      c.d_dtype = d_dtype;
      c.a_pad = variant == 1 ? 0 : 6;
      c.a_scale_pad = variant == 2 ? 0 : 3;
      c.b_pad = variant == 2 ? 0 : 10;
      c.b_scale_pad = 1;
      c.d_pad = variant == 0 ? 0 : 5;
      c.with_c = true;
      c.c_dtype = d_dtype;
      c.c_pad = variant == 1 ? 0 : 3;
      c.beta = 0.5f;
      c.with_bias = true;
      c.bias_dtype = A4W4_DTYPE_BF16;
      c.bias_stride = 1 + variant * 2;
      c.a_scales = c.b_scales = {118, 128, 0.0};
      c.seed = seed++;
      run_case(ctx_, c);
    }
  }
  // C in place with a padded stride: C and D are the same strided tensor.
  GemmCase c;
  c.m = 20;
  c.n = 70;
  c.k = 64;
  c.d_pad = 9;
  c.with_c = true;
  c.c_is_d = true;
  c.beta = -1.0f;
  c.seed = seed++;
  run_case(ctx_, c);
}

TEST_F(Gemm, RandomizedConfigurations) {
  // Every option drawn at random (fixed seed; each case prints its full configuration).
  std::mt19937_64 rng(0x5EED1200);
  const a4w4_dtype dtypes[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int i = 0; i < 60; ++i) {
    GemmCase c;
    c.m = pick(1, 80);
    c.n = pick(1, 140);
    c.k = 32 * pick(1, 12);
    c.d_dtype = dtypes[pick(0, 2)];
    c.a_pad = 2 * pick(0, 3);
    c.b_pad = 2 * pick(0, 3);
    c.a_scale_pad = pick(0, 2);
    c.b_scale_pad = pick(0, 2);
    c.d_pad = pick(0, 3);
    c.with_c = pick(0, 1) == 1;
    c.c_is_d = c.with_c && pick(0, 2) == 0;
    c.c_dtype = c.c_is_d ? c.d_dtype : dtypes[pick(0, 2)];
    c.c_pad = c.c_is_d ? 0 : pick(0, 3);
    c.with_bias = pick(0, 1) == 1;
    c.bias_dtype = dtypes[pick(0, 2)];
    c.bias_stride = pick(1, 3);
    c.alpha = static_cast<float>(pick(-8, 8)) / 4.0f;
    c.beta = static_cast<float>(pick(-8, 8)) / 4.0f;
    c.split_k = static_cast<int>(pick(0, c.k / 32));
    c.threads = static_cast<int>(pick(0, 3));
    c.prepared_b = pick(0, 3) == 0;
    c.prepared_layout = pick(0, 1) == 0 ? A4W4_LAYOUT_PREPARED_V1 : A4W4_LAYOUT_PREPARED_V2;
    const int lo = static_cast<int>(pick(100, 127));
    c.a_scales = {lo, lo + static_cast<int>(pick(0, 20)), pick(0, 4) == 0 ? 0.01 : 0.0};
    c.b_scales = {lo, lo + static_cast<int>(pick(0, 20)), 0.0};
    c.seed = 1300 + static_cast<uint64_t>(i);
    run_case(ctx_, c);
  }
}

TEST_F(Gemm, LargerProblem) {
  GemmCase c;
  c.m = 128;
  c.n = 160;
  c.k = 2048;
  c.d_dtype = A4W4_DTYPE_BF16;
  c.with_bias = true;
  c.a_scales = {100, 150, 0.0};
  c.b_scales = {100, 150, 0.0};
  c.seed = 1400;
  run_case(ctx_, c);
}

// ---- Epilogue ----------------------------------------------------------------------------------

TEST_F(Gemm, EveryEpilogueAndDtypeCombination) {
  const a4w4_dtype dtypes[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  const std::pair<float, float> alpha_beta[] = {{1.0f, 0.0f}, {-2.5f, 1.0f}, {0.1875f, -0.375f}};
  uint64_t seed = 400;
  for (a4w4_dtype d_dtype : dtypes) {
    // C: absent, each dtype, or D itself.
    for (int c_choice = 0; c_choice < 5; ++c_choice) {
      for (int bias_choice = 0; bias_choice < 4; ++bias_choice) {
        for (const auto& [alpha, beta] : alpha_beta) {
          GemmCase c;
          c.m = 9;
          c.n = 13;
          c.k = 64;
          c.d_dtype = d_dtype;
          c.with_c = c_choice > 0;
          c.c_is_d = c_choice == 4;
          c.c_dtype = c_choice == 4 ? d_dtype : dtypes[(c_choice + 2) % 3];
          c.with_bias = bias_choice > 0;
          c.bias_dtype = dtypes[(bias_choice + 2) % 3];
          c.alpha = alpha;
          c.beta = beta;
          c.a_scales = c.b_scales = {118, 128, 0.0};
          c.seed = seed++;
          run_case(ctx_, c);
        }
      }
    }
  }
}

TEST_F(Gemm, AlphaZeroAndBetaZeroWithNonFiniteC) {
  // alpha = 0: D = beta * C + bias.
  GemmCase c;
  c.m = 6;
  c.n = 10;
  c.k = 64;
  c.alpha = 0.0f;
  c.with_c = true;
  c.beta = 3.0f;
  c.with_bias = true;
  c.seed = 450;
  run_case(ctx_, c);

  // beta = 0 with a C holding NaN and Inf: per docs/semantics.md beta * C is added with IEEE
  // semantics also for beta = 0, so those elements are NaN (0 * Inf = NaN). A bias of +Inf meets
  // beta * C = -Inf: NaN; elsewhere the bias Inf propagates.
  std::mt19937_64 rng(451);
  const MxOperand a = random_mx(rng, 4, 64, {});
  const MxOperand b = random_mx(rng, 5, 64, {});
  HostTensor cm = HostTensor::matrix(A4W4_DTYPE_F32, 4, 5);
  fill_random_floats(rng, cm, -3, 3);
  cm.set(1, 2, std::numeric_limits<double>::quiet_NaN());
  cm.set(2, 3, std::numeric_limits<double>::infinity());
  cm.set(3, 4, -std::numeric_limits<double>::infinity());
  HostTensor bias = HostTensor::vector(A4W4_DTYPE_F16, 5);
  fill_random_floats(rng, bias, -3, 3);
  bias.set(4, 0, std::numeric_limits<double>::infinity());
  for (float beta : {0.0f, 1.0f}) {
    SCOPED_TRACE(beta);
    const GemmReference ref = reference_gemm(a, b, 1.0f, beta, &cm, &bias);
    HostTensor d = HostTensor::matrix(A4W4_DTYPE_F32, 4, 5);
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.beta = beta;
    const a4w4_tensor ad = a.values.desc(), asd = a.scales.desc(), bd = b.values.desc(),
                      bsd = b.scales.desc(), cd = cm.desc(), biasd = bias.desc(), dd = d.desc();
    ASSERT_EQ(a4w4_gemm(ctx_, &ad, &asd, &bd, &bsd, &cd, &biasd, &dd, &options, nullptr),
              A4W4_SUCCESS);
    EXPECT_TRUE(check_gemm(ref, d, kDoubleAccumulation));
    EXPECT_TRUE(std::isnan(d.get(1, 2)));
    EXPECT_TRUE(std::isnan(d.get(3, 4))) << "-Inf (C) + Inf (bias)";
    if (beta == 0.0f) {
      EXPECT_TRUE(std::isnan(d.get(2, 3))) << "0 * Inf";
    }
    if (beta == 1.0f) {
      EXPECT_EQ(d.get(2, 3), std::numeric_limits<double>::infinity());
    }
    EXPECT_EQ(d.get(0, 4), std::numeric_limits<double>::infinity());
  }
}

// ---- Scales --------------------------------------------------------------------------------

TEST_F(Gemm, WideScaleRangesOverflowAndUnderflow) {
  struct Range {
    ScaleRange a, b;
  };
  const Range ranges[] = {
      {{0, 254, 0.0}, {0, 254, 0.0}},      // everything
      {{250, 254, 0.0}, {250, 254, 0.0}},  // 2^250 and up: Inf in every dtype
      {{0, 4, 0.0}, {0, 4, 0.0}},          // 2^-250 and below: zero in every dtype
      {{0, 10, 0.0}, {100, 140, 0.0}},     // fp32 subnormal results
      {{120, 170, 0.0}, {110, 150, 0.0}},  // around the top of fp16/fp32
      {{60, 110, 0.0}, {60, 100, 0.0}},    // around the bottom of fp16/bf16/fp32
  };
  uint64_t seed = 500;
  CompareStats total;
  for (const Range& r : ranges) {
    for (a4w4_dtype d_dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
      GemmCase c;
      c.m = 17;
      c.n = 23;
      c.k = 256;
      c.d_dtype = d_dtype;
      c.a_scales = r.a;
      c.b_scales = r.b;
      c.with_bias = (seed % 2) == 0;
      c.seed = seed++;
      const GemmRun run = run_case(ctx_, c);
      total.inf += run.stats.inf;
      total.zero += run.stats.zero;
      total.finite_nonzero += run.stats.finite_nonzero;
    }
  }
  // The ranges must really have reached both ends.
  EXPECT_GT(total.inf, 100);
  EXPECT_GT(total.zero, 100);
  EXPECT_GT(total.finite_nonzero, 1000);
}

TEST_F(Gemm, NaNScalesPoisonOnlyTheirRowAndColumn) {
  std::mt19937_64 rng(600);
  const int64_t m = 11, n = 70, k = 128;
  // Scales low enough that no f16 output overflows: only the NaN scales make non-finite values.
  MxOperand a = random_mx(rng, m, k, {118, 128, 0.0});
  MxOperand b = random_mx(rng, n, k, {118, 128, 0.0});
  a.scales.set_byte(3, 1, 0xFF);   // row 3 of D
  b.scales.set_byte(65, 3, 0xFF);  // column 65 (in the second 64-wide tile)
  b.scales.set_byte(5, 0, 0xFF);   // column 5
  for (a4w4_dtype d_dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
    for (int split : {0, 1, 4}) {
      GemmCase c;
      c.m = m;
      c.n = n;
      c.k = k;
      c.d_dtype = d_dtype;
      c.split_k = split;
      c.with_c = true;
      c.beta = 1.0f;
      c.with_bias = true;
      c.seed = 601;
      const GemmRun run = run_case(ctx_, c, &a, &b);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const bool nan = i == 3 || j == 65 || j == 5;
          ASSERT_EQ(std::isnan(run.d.get(i, j)), nan)
              << "D[" << i << ", " << j << "] = " << run.d.get(i, j) << " split " << split;
          if (!nan) {
            ASSERT_TRUE(std::isfinite(run.d.get(i, j)));
          }
        }
      }
    }
  }
  // Random NaN scales on a larger problem.
  GemmCase c;
  c.m = 40;
  c.n = 50;
  c.k = 256;
  c.a_scales = {110, 140, 0.01};
  c.b_scales = {110, 140, 0.01};
  c.seed = 602;
  const GemmRun run = run_case(ctx_, c);
  EXPECT_GT(run.stats.nan, 0);
  EXPECT_GT(run.stats.finite_nonzero, 0);
}

// ---- Prepared weights -------------------------------------------------------------------------

TEST_F(Gemm, PreparedWeightsGiveThePlainResult) {
  struct Shape {
    int64_t m, n, k;
  };
  // N around the 16-row tiles, K around the 128-wide tiles.
  const Shape shapes[] = {{1, 1, 32},   {3, 15, 96},   {5, 16, 128}, {7, 17, 160},
                          {2, 45, 384}, {33, 70, 256}, {1, 33, 1024}};
  uint64_t seed = 1000;
  for (const Shape& sh : shapes) {
    for (a4w4_dtype d_dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16}) {
      GemmCase c;
      c.m = sh.m;
      c.n = sh.n;
      c.k = sh.k;
      c.d_dtype = d_dtype;
      c.prepared_b = true;
      // Both versions: bf16 D with version 1, f32 D with version 2.
      c.prepared_layout =
          d_dtype == A4W4_DTYPE_BF16 ? A4W4_LAYOUT_PREPARED_V1 : A4W4_LAYOUT_PREPARED_V2;
      c.b_pad = 4;  // the plain source is strided
      c.b_scale_pad = 2;
      c.with_bias = true;
      c.split_k = static_cast<int>(std::min<int64_t>(seed % 3, sh.k / 32));
      c.b_scales = {110, 140, 0.02};  // NaN scales must travel with their rows
      c.seed = seed++;
      run_case(ctx_, c);
    }
  }
}

TEST_F(Gemm, PreparedWeightIgnoresStridesAndMatchesAcrossThreads) {
  std::mt19937_64 rng(1100);
  const MxOperand a = random_mx(rng, 9, 256, {});
  const MxOperand b = random_mx(rng, 50, 256, {});
  PreparedWeight prepared = prepare(ctx_, b);
  // Strides of a prepared tensor are documented as ignored.
  prepared.values_desc.strides[0] = 0;
  prepared.values_desc.strides[1] = 7;
  prepared.scales_desc.strides[0] = -3;
  const GemmReference ref = reference_gemm(a, b, 1.0f, 0.0f, nullptr, nullptr);
  for (int threads : {1, 2, 3}) {
    ASSERT_EQ(a4w4_context_set_num_threads(ctx_, threads), A4W4_SUCCESS);
    HostTensor d = HostTensor::matrix(A4W4_DTYPE_F32, 9, 50);
    const a4w4_tensor ad = a.values.desc(), asd = a.scales.desc(), dd = d.desc();
    ASSERT_EQ(a4w4_gemm(ctx_, &ad, &asd, &prepared.values_desc, &prepared.scales_desc, nullptr,
                        nullptr, &dd, nullptr, nullptr),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
    EXPECT_TRUE(check_gemm(ref, d, kDoubleAccumulation)) << threads << " threads";
  }
}

TEST_F(Gemm, PreparedLayoutsHoldTheDocumentedBytes) {
  // docs/weight-layout.md, written out here independently of src/numerics/weight_layout.h:
  // tiles of 16 rows x 128 K, row-group major; version 1 puts element k of row n at lane
  // (n % 8) * 4 + (k % 32) / 8, half (n % 16) / 8, word (k / 32) % 4, byte (k % 8) / 2; version 2
  // at row (n % 16) * 64 + (k % 128) / 2. Scales: 64 bytes per tile, (n % 8) * 8 + (n % 16) / 8 * 4
  // + block % 4. Padding is zero.
  std::mt19937_64 rng(1200);
  const int64_t n = 37, k = 160;  // 3 row groups, 2 K tiles (the second half padding)
  const MxOperand b = random_mx(rng, n, k, {100, 150, 0.0});
  const int64_t k_tiles = 2, groups = 3;
  for (a4w4_layout layout : {A4W4_LAYOUT_PREPARED_V1, A4W4_LAYOUT_PREPARED_V2}) {
    SCOPED_TRACE("layout " + std::to_string(layout));
    const PreparedWeight p = prepare(ctx_, b, layout);
    std::vector<uint8_t> codes(static_cast<size_t>(groups * k_tiles * 2048), 0);
    std::vector<uint8_t> scales(static_cast<size_t>(groups * k_tiles * 64), 0);
    for (int64_t row = 0; row < n; ++row) {
      const int64_t g = row / 16, r = row % 16;
      for (int64_t e = 0; e < k; ++e) {
        const int64_t tile = g * k_tiles + e / 128;
        const int64_t byte = layout == A4W4_LAYOUT_PREPARED_V2
                                 ? tile * 1024 + r * 64 + (e % 128) / 2
                                 : tile * 1024 + ((r % 8) * 4 + (e % 32) / 8) * 32 + (r / 8) * 16 +
                                       ((e / 32) % 4) * 4 + (e % 8) / 2;
        codes[static_cast<size_t>(2 * byte + e % 2)] = b.values.code(row, e);
      }
      for (int64_t blk = 0; blk < k / 32; ++blk)
        scales[static_cast<size_t>((g * k_tiles + blk / 4) * 64 + (r % 8) * 8 + (r / 8) * 4 +
                                   blk % 4)] = b.scales.byte(row, blk);
    }
    for (size_t i = 0; i < codes.size(); ++i) {
      const uint8_t got = p.values[i / 2];
      ASSERT_EQ(i % 2 == 0 ? got & 0xF : got >> 4, codes[i]) << "element slot " << i;
    }
    for (size_t i = 0; i < scales.size(); ++i) ASSERT_EQ(p.scales[i], scales[i]) << "scale " << i;
  }
}

TEST_F(Gemm, Int8WeightFormHoldsTheDocumentedValues) {
  // docs/weight-layout.md's A4W4_LAYOUT_PREPARED_V2_INT8, made on the CPU and re-derived here
  // from the documentation alone: version 2's bytes, then (each part 256-byte aligned) the int8
  // values, factors, summaries, block summaries and chunk verdicts. 300 rows (three 128-row
  // blocks, the last partial, rows padded to 384), K = 1056 (9 K tiles: two chunks, the second of
  // one tile, whose block is the only one of its tile). Scales: row base 100..150 + 0..3 (folds),
  // rows r % 5 == 1 drifting 4 binades per tile (tiles fold, chunks do not), rows r % 7 == 3 with
  // one tile spread over 5 binades (does not fold), rows r % 11 == 4 with a NaN block.
  std::mt19937_64 rng(2912);
  const int64_t n = 300, k = 1056, blocks = k / 32, k_tiles = 9, chunks = 2, padded_rows = 384;
  const int64_t k128 = k_tiles * 128;
  MxOperand b = random_mx(rng, n, k, {120, 120, 0.0});
  std::uniform_int_distribution<int> base_of(100, 150), near(0, 3);
  for (int64_t r = 0; r < n; ++r) {
    const int base = base_of(rng);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      int s = base + near(rng) + (r % 5 == 1 ? 4 * static_cast<int>(blk / 4 % 2) : 0);
      if (r % 7 == 3 && blk == 9) s = base + 5;
      if (r % 11 == 4 && blk == 20) s = 0xFF;
      b.scales.set_byte(r, blk, static_cast<uint8_t>(s));
    }
  }
  const PreparedWeight v2 = prepare(ctx_, b, A4W4_LAYOUT_PREPARED_V2);
  const PreparedWeight w = prepare(ctx_, b, A4W4_LAYOUT_PREPARED_V2_INT8);
  const auto up = [](int64_t x) { return (x + 255) / 256 * 256; };
  const int64_t v2_bytes = tiles(n, k) * 1024;
  const int64_t values = up(v2_bytes), factors = values + up(n * k128),
                summaries = factors + up(k_tiles * padded_rows * 4),
                block_summaries = summaries + up(chunks * n * 4),
                verdicts = block_summaries + up(padded_rows / 128 * 4),
                end = verdicts + up(padded_rows / 128 * chunks * 4);
  ASSERT_EQ(w.values.size(), static_cast<size_t>(end + 64));  // + prepare()'s poison
  EXPECT_TRUE(std::equal(v2.values.begin(), v2.values.begin() + v2_bytes, w.values.begin()));
  EXPECT_EQ(w.scales, v2.scales);
  const auto word = [&](int64_t offset) {
    uint32_t x;
    std::memcpy(&x, &w.values[static_cast<size_t>(offset)], 4);
    return x;
  };
  const auto slot = [](int64_t r) {
    return (r & ~int64_t{15}) | ((r >> 1) & 3) << 2 | ((r >> 3) & 1) << 1 | (r & 1);
  };
  const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  int64_t folded_tiles = 0, unfolded_tiles = 0, mixed_chunks = 0;
  std::vector<uint32_t> row_words(static_cast<size_t>(chunks * n));
  for (int64_t r = 0; r < padded_rows; ++r) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t first = 8 * c, last = std::min(k_tiles, first + 8);
      // A tile's scales: its blocks, those past K repeating its first block.
      const auto scale = [&](int64_t t, int64_t j) {
        const int64_t blk = 4 * t + j < blocks ? 4 * t + j : 4 * t;
        return static_cast<int>(b.scales.byte(r, blk));
      };
      int chunk_lo = 255, chunk_hi = 0;
      std::vector<int> lo(9), hi(9);
      for (int64_t t = first; t < last && r < n; ++t) {
        lo[t] = 255, hi[t] = 0;
        for (int64_t j = 0; j < 4; ++j)
          lo[t] = std::min(lo[t], scale(t, j)), hi[t] = std::max(hi[t], scale(t, j));
        chunk_lo = std::min(chunk_lo, lo[t]), chunk_hi = std::max(chunk_hi, hi[t]);
      }
      const auto folds = [](int l, int h) { return h - l <= 3 && l <= 251; };
      const bool uniform = folds(chunk_lo, chunk_hi);
      int bad = 0, base_lo = 255, base_hi = 0;
      for (int64_t t = first; t < last; ++t) {
        float factor;
        std::memcpy(&factor,
                    &w.values[static_cast<size_t>(factors + 4 * (t * padded_rows + slot(r)))], 4);
        if (r >= n) {
          EXPECT_EQ(factor, 1.0f) << "padding row " << r;
          continue;
        }
        const int base = uniform ? chunk_lo : lo[t];
        const bool ok = uniform || folds(lo[t], hi[t]);
        bad |= ok ? 0 : 1, base_lo = std::min(base_lo, base), base_hi = std::max(base_hi, base);
        ASSERT_EQ(factor, std::ldexp(1.0f, base - 129)) << "row " << r << " tile " << t;
        (ok ? folded_tiles : unfolded_tiles) += 1;
        for (int64_t e = 128 * t; e < 128 * t + 128; ++e) {
          const auto v = static_cast<int8_t>(w.values[static_cast<size_t>(values + r * k128 + e)]);
          if (e >= k) {
            ASSERT_EQ(v, 0) << "past K";
            continue;
          }
          const uint8_t code = b.values.code(r, e);
          const double x = (code & 8 ? -1 : 1) * e2m1[code & 7];
          // Folded: value * factor * 2 is the element; otherwise the value is 2 * E2M1 unshifted.
          if (ok)
            ASSERT_EQ(v * static_cast<double>(factor) * 2,
                      x * std::ldexp(1.0, scale(t, (e % 128) / 32) - 127))
                << "row " << r << " element " << e;
          else
            ASSERT_EQ(v, 2 * x) << "row " << r << " element " << e;
        }
      }
      if (r >= n) continue;
      mixed_chunks += uniform ? 0 : 1;
      const uint32_t expected =
          static_cast<uint32_t>((uniform ? 0 : 1) << 17 | bad << 16 | base_hi << 8 | base_lo);
      row_words[static_cast<size_t>(c * n + r)] = expected;
      ASSERT_EQ(word(summaries + 4 * (c * n + r)), expected) << "row " << r << " chunk " << c;
    }
  }
  EXPECT_GT(folded_tiles, 0);
  EXPECT_GT(unfolded_tiles, 0);
  EXPECT_GT(mixed_chunks, 0);
  for (int64_t blk = 0; blk < padded_rows / 128; ++blk) {
    uint32_t bad = 0, lo = 255, hi = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      uint32_t mixed = 0;
      for (int64_t r = 128 * blk; r < std::min(n, 128 * blk + 128); ++r) {
        const uint32_t x = row_words[static_cast<size_t>(c * n + r)];
        bad |= x >> 16 & 1, mixed |= x >> 17 & 1;
        lo = std::min(lo, x & 0xFF), hi = std::max(hi, x >> 8 & 0xFF);
      }
      EXPECT_EQ(word(verdicts + 4 * (blk * chunks + c)), mixed ? 0u : 1u) << blk << " " << c;
    }
    EXPECT_EQ(word(block_summaries + 4 * blk), bad << 16 | hi << 8 | lo) << "block " << blk;
  }

  // A GEMM on it gives the version-2 weight's result, bit for bit, on every CPU kernel.
  const MxOperand a = random_mx(rng, 5, k, {118, 130, 0.0});
  for (const char* kernel : {"cpu.reference", "cpu.gemm_scalar"}) {
    SCOPED_TRACE(kernel);
    HostTensor d2 = HostTensor::matrix(A4W4_DTYPE_F32, 5, n),
               d8 = HostTensor::matrix(A4W4_DTYPE_F32, 5, n);
    a4w4_gemm_options options;
    a4w4_gemm_options_init(&options);
    options.kernel = kernel;
    const a4w4_tensor ad = a.values.desc(), asd = a.scales.desc();
    const a4w4_tensor dd2 = d2.desc(), dd8 = d8.desc();
    ASSERT_EQ(a4w4_gemm(ctx_, &ad, &asd, &v2.values_desc, &v2.scales_desc, nullptr, nullptr, &dd2,
                        &options, nullptr),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
    ASSERT_EQ(a4w4_gemm(ctx_, &ad, &asd, &w.values_desc, &w.scales_desc, nullptr, nullptr, &dd8,
                        &options, nullptr),
              A4W4_SUCCESS)
        << a4w4_last_error_message();
    EXPECT_EQ(d2.bytes(), d8.bytes());
  }
}

// ---- Split-K, threads, kernels -----------------------------------------------------------------

TEST_F(Gemm, SplitKValuesAgree) {
  for (int64_t k : {int64_t{64}, int64_t{1024}}) {
    std::optional<GemmRun> first;
    const int blocks = static_cast<int>(k / 32);
    for (int split : {0, 1, 2, 3, 7, blocks - 1, blocks}) {
      if (split > blocks) continue;
      GemmCase c;
      c.m = 21;
      c.n = 70;
      c.k = k;
      c.split_k = split;
      c.a_scales = {60, 190, 0.0};  // wide: the order of the double additions matters
      c.b_scales = {70, 180, 0.0};
      c.with_c = true;
      c.beta = 0.25f;
      c.seed = 700;  // the same data for every split
      const GemmRun run = run_case(ctx_, c);
      if (!first) {
        first = run;
      } else {
        // Only elements next to a rounding midpoint may differ between splits.
        int64_t differ = 0;
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = 0; j < c.n; ++j) differ += run.d.get(i, j) != first->d.get(i, j);
        EXPECT_LE(differ, run.stats.allowance + first->stats.allowance) << "split " << split;
      }
    }
  }
}

TEST_F(Gemm, ThreadCountsAgree) {
  std::optional<HostTensor> first;
  for (int threads : {1, 2, 3, 0}) {
    GemmCase c;
    c.m = 70;
    c.n = 130;
    c.k = 128;
    c.threads = threads;
    c.with_bias = true;
    c.seed = 800;
    const GemmRun run = run_case(ctx_, c);
    if (!first)
      first = run.d;
    else
      EXPECT_EQ(run.d.bytes(), first->bytes()) << threads << " threads";
  }
}

TEST_F(Gemm, KernelNamesAndMathModes) {
  for (const char* kernel : {static_cast<const char*>(nullptr), "", "cpu.reference"}) {
    for (a4w4_math_mode mode : {A4W4_MATH_EXACT, A4W4_MATH_FAST_ACCUM}) {
      GemmCase c;
      c.m = 33;
      c.n = 65;
      c.k = 96;
      c.kernel = kernel;
      c.math_mode = mode;  // the CPU has no fast path: exact either way
      c.seed = 900;
      run_case(ctx_, c);
    }
  }
}

TEST_F(Gemm, NullOptionsMeanDefaults) {
  std::mt19937_64 rng(950);
  const MxOperand a = random_mx(rng, 5, 96, {});
  const MxOperand b = random_mx(rng, 6, 96, {});
  HostTensor d = HostTensor::matrix(A4W4_DTYPE_BF16, 5, 6);
  const a4w4_tensor ad = a.values.desc(), asd = a.scales.desc(), bd = b.values.desc(),
                    bsd = b.scales.desc(), dd = d.desc();
  ASSERT_EQ(a4w4_gemm(ctx_, &ad, &asd, &bd, &bsd, nullptr, nullptr, &dd, nullptr, nullptr),
            A4W4_SUCCESS);
  EXPECT_TRUE(
      check_gemm(reference_gemm(a, b, 1.0f, 0.0f, nullptr, nullptr), d, kDoubleAccumulation));
}

}  // namespace
}  // namespace a4w4_test
