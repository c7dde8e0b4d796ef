// The fast CPU kernels (issue 7) against the reference: every GEMM kernel must write exactly the
// bytes cpu.reference writes wherever the reference's double sums are exact (all cases here but
// one; docs/cpu-backend.md), and stay within the reference's error bound where they are not; every
// SIMD quantizer must write exactly the bytes of reference_quantize. White-box: reaches the ISA
// variants and the dispatcher directly. Self-contained (its own operand generators), label cpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "a4w4/a4w4.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/reference.h"
#include "dispatch/chooser.h"
#include "dispatch/registry.h"
#include "numerics/float_formats.h"
#include "test_support.h"

namespace {

using a4w4::cpu::Isa;

constexpr uint8_t kPoison = 0xA5;

// ---- Operands ---------------------------------------------------------------------------------

struct ScaleRange {
  int lo = 120, hi = 134;
  double nan_fraction = 0.0;
};

// A packed E2M1 operand [rows, k] with scales [rows, k/32], rows padded by `pad` bytes / scales.
struct Mx {
  int64_t rows = 0, k = 0, stride = 0, scale_stride = 0;  // strides in bytes
  std::vector<uint8_t> values, scales;
  a4w4_tensor values_desc() const {
    return a4w4_tensor_2d(const_cast<uint8_t*>(values.data()), A4W4_DTYPE_E2M1, rows, k, stride * 2,
                          a4w4_cpu());
  }
  a4w4_tensor scales_desc() const {
    return a4w4_tensor_2d(const_cast<uint8_t*>(scales.data()), A4W4_DTYPE_E8M0, rows, k / 32,
                          scale_stride, a4w4_cpu());
  }
};

Mx random_mx(std::mt19937_64& rng, int64_t rows, int64_t k, const ScaleRange& range,
             int64_t pad = 0) {
  Mx mx;
  mx.rows = rows;
  mx.k = k;
  mx.stride = k / 2 + pad;
  mx.scale_stride = k / 32 + pad;
  mx.values.resize(static_cast<size_t>(rows * mx.stride));
  mx.scales.resize(static_cast<size_t>(rows * mx.scale_stride));
  for (uint8_t& v : mx.values) v = static_cast<uint8_t>(rng());  // all 16 codes, and random padding
  std::uniform_int_distribution<int> scale(range.lo, range.hi);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (uint8_t& s : mx.scales)
    s = unit(rng) < range.nan_fraction ? uint8_t{0xFF} : static_cast<uint8_t>(scale(rng));
  return mx;
}

// A float matrix (or vector) of `dtype` with a row stride in elements, stored as bytes.
struct FloatBuf {
  a4w4_dtype dtype = A4W4_DTYPE_F32;
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<uint8_t> bytes;
  int width() const { return dtype == A4W4_DTYPE_F32 ? 4 : 2; }
  a4w4_tensor matrix() const {
    return a4w4_tensor_2d(const_cast<uint8_t*>(bytes.data()), dtype, rows, cols, stride,
                          a4w4_cpu());
  }
  a4w4_tensor vector() const {  // [rows] with element stride `stride`
    a4w4_tensor t = a4w4_tensor_1d(const_cast<uint8_t*>(bytes.data()), dtype, rows, a4w4_cpu());
    t.strides[0] = stride;
    return t;
  }
  void set(int64_t index, double value) {
    if (dtype == A4W4_DTYPE_F32) {
      const float f = static_cast<float>(value);
      std::memcpy(bytes.data() + index * 4, &f, 4);
    } else {
      const uint16_t h = dtype == A4W4_DTYPE_BF16 ? a4w4::numerics::round_to_bf16_bits(value)
                                                  : a4w4::numerics::round_to_fp16_bits(value);
      std::memcpy(bytes.data() + index * 2, &h, 2);
    }
  }
};

FloatBuf float_buf(a4w4_dtype dtype, int64_t rows, int64_t cols, int64_t stride) {
  FloatBuf b;
  b.dtype = dtype;
  b.rows = rows;
  b.cols = cols;
  b.stride = stride;
  b.bytes.assign(static_cast<size_t>(((rows - 1) * stride + cols) * b.width()), kPoison);
  return b;
}

// Random values of magnitude 2^[-6, 6], an occasional NaN/Inf when `specials`.
void fill_random(std::mt19937_64& rng, FloatBuf& b, bool specials) {
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::uniform_int_distribution<int> pick(0, 199);
  for (int64_t r = 0; r < b.rows; ++r) {
    for (int64_t c = 0; c < b.cols; ++c) {
      double v = std::ldexp(mantissa(rng), exponent(rng)) * ((rng() & 1) ? -1.0 : 1.0);
      if (specials) {
        const int p = pick(rng);
        if (p == 0) v = std::numeric_limits<double>::quiet_NaN();
        if (p == 1) v = -std::numeric_limits<double>::infinity();
      }
      b.set(r * b.stride + c, v);
    }
  }
}

// ---- GEMM cases -------------------------------------------------------------------------------

struct GemmCase {
  int64_t m = 1, n = 1, k = 32;
  ScaleRange a_scales, b_scales;
  int64_t a_pad = 0, b_pad = 0, d_pad = 0, c_pad = 0, bias_stride = 1;
  a4w4_dtype d_dtype = A4W4_DTYPE_F32;
  bool with_c = false, c_is_d = false, with_bias = false, c_specials = false;
  a4w4_dtype c_dtype = A4W4_DTYPE_F32, bias_dtype = A4W4_DTYPE_F32;
  float alpha = 1.0f, beta = 0.0f;
  int split_k = 0, threads = 0;
  bool prepared_b = false;
  a4w4_layout prepared_layout = A4W4_LAYOUT_PREPARED_V2;
  uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream s;
    s << "M=" << m << " N=" << n << " K=" << k << " d=" << a4w4_dtype_name(d_dtype) << " scales a["
      << a_scales.lo << "," << a_scales.hi << "," << a_scales.nan_fraction << "] b[" << b_scales.lo
      << "," << b_scales.hi << "," << b_scales.nan_fraction << "] pads a" << a_pad << " b" << b_pad
      << " d" << d_pad << " c" << c_pad << " bias_stride " << bias_stride
      << (with_c ? (c_is_d ? " C=D" : " C") : "") << " c_dtype " << a4w4_dtype_name(c_dtype)
      << (with_bias ? " bias " : "") << (with_bias ? a4w4_dtype_name(bias_dtype) : "") << " alpha "
      << alpha << " beta " << beta << " split_k " << split_k << " threads " << threads
      << (prepared_b ? " prepared B, layout " + std::to_string(prepared_layout) : "") << " seed "
      << seed;
    return s.str();
  }
};

struct Prepared {
  std::vector<uint8_t> values, scales;
  a4w4_tensor values_desc{}, scales_desc{};
};

Prepared prepare(a4w4_context ctx, const Mx& b, a4w4_layout layout = A4W4_LAYOUT_PREPARED_V2) {
  Prepared p;
  size_t wb = 0, sb = 0;
  EXPECT_EQ(a4w4_prepared_weight_size(b.rows, b.k, layout, &wb, &sb), A4W4_SUCCESS);
  p.values.assign(wb, kPoison);
  p.scales.assign(sb, kPoison);
  p.values_desc = a4w4_tensor_2d(p.values.data(), A4W4_DTYPE_E2M1, b.rows, b.k, 0, a4w4_cpu());
  p.scales_desc = a4w4_tensor_2d(p.scales.data(), A4W4_DTYPE_E8M0, b.rows, b.k / 32, 0, a4w4_cpu());
  p.values_desc.layout = p.scales_desc.layout = layout;
  const a4w4_tensor bd = b.values_desc(), bsd = b.scales_desc();
  EXPECT_EQ(a4w4_prepare_weight(ctx, &bd, &bsd, &p.values_desc, &p.scales_desc, nullptr),
            A4W4_SUCCESS)
      << a4w4_last_error_message();
  return p;
}

// Runs the case with `kernel` (nullptr = dispatch) and returns D's bytes (row gaps included).
struct GemmOperands {
  Mx a, b;
  FloatBuf c, bias, d_init;
  Prepared prepared;
};

GemmOperands make_operands(a4w4_context ctx, const GemmCase& c) {
  std::mt19937_64 rng(c.seed);
  GemmOperands o;
  o.a = random_mx(rng, c.m, c.k, c.a_scales, c.a_pad);
  o.b = random_mx(rng, c.n, c.k, c.b_scales, c.b_pad);
  o.d_init = float_buf(c.d_dtype, c.m, c.n, c.n + c.d_pad);
  if (c.with_c) {
    if (c.c_is_d) {
      fill_random(rng, o.d_init, c.c_specials);
    } else {
      o.c = float_buf(c.c_dtype, c.m, c.n, c.n + c.c_pad);
      fill_random(rng, o.c, c.c_specials);
    }
  }
  if (c.with_bias) {
    o.bias = float_buf(c.bias_dtype, c.n, 1, c.bias_stride);
    fill_random(rng, o.bias, false);
  }
  if (c.prepared_b) o.prepared = prepare(ctx, o.b, c.prepared_layout);
  return o;
}

std::vector<uint8_t> run_gemm(a4w4_context ctx, const GemmCase& c, const GemmOperands& o,
                              const char* kernel, a4w4_status expect = A4W4_SUCCESS) {
  EXPECT_EQ(a4w4_context_set_num_threads(ctx, c.threads), A4W4_SUCCESS);
  FloatBuf d = o.d_init;
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.alpha = c.alpha;
  options.beta = c.beta;
  options.split_k = c.split_k;
  options.kernel = kernel;
  const a4w4_tensor ad = o.a.values_desc(), asd = o.a.scales_desc();
  const a4w4_tensor bd = c.prepared_b ? o.prepared.values_desc : o.b.values_desc();
  const a4w4_tensor bsd = c.prepared_b ? o.prepared.scales_desc : o.b.scales_desc();
  const a4w4_tensor dd = d.matrix();
  const a4w4_tensor cd = c.c_is_d ? d.matrix() : o.c.matrix();
  const a4w4_tensor biasd = o.bias.vector();
  const a4w4_status status = a4w4_gemm(ctx, &ad, &asd, &bd, &bsd, c.with_c ? &cd : nullptr,
                                       c.with_bias ? &biasd : nullptr, &dd, &options, nullptr);
  EXPECT_EQ(status, expect) << (kernel ? kernel : "(dispatch)") << ": "
                            << a4w4_last_error_message();
  return d.bytes;
}

// The fast kernels this CPU can run that take the case, by name (the GEMV path reads plain or
// version-2 rows).
std::vector<const char*> fast_gemm_kernels(int64_t m, bool prepared,
                                           a4w4_layout layout = A4W4_LAYOUT_PREPARED_V2) {
  std::vector<const char*> out;
  if (a4w4::cpu::isa_supported(Isa::kAvx512Vnni)) {
    if (m <= 4 && (!prepared || layout == A4W4_LAYOUT_PREPARED_V2))
      out.push_back("cpu.gemv_avx512vnni");
    out.push_back("cpu.gemm_avx512vnni");
  }
  if (a4w4::cpu::isa_supported(Isa::kAvx2)) out.push_back("cpu.gemm_avx2");
  out.push_back("cpu.gemm_scalar");
  out.push_back(nullptr);  // whatever dispatch picks
  return out;
}

// Index of the first element where two D buffers (row gaps included) differ, or -1. Bit for bit:
// every NaN a4w4 writes is the canonical quiet NaN (docs/semantics.md).
int64_t first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                         a4w4_dtype dtype) {
  if (got.size() != want.size()) return 0;
  const size_t width = dtype == A4W4_DTYPE_F32 ? 4 : 2;
  for (size_t i = 0; i + width <= got.size(); i += width)
    if (std::memcmp(got.data() + i, want.data() + i, width) != 0)
      return static_cast<int64_t>(i / width);
  return -1;
}

// Every applicable fast kernel writes exactly what the reference writes.
void expect_identical(a4w4_context ctx, const GemmCase& c) {
  SCOPED_TRACE(c.describe());
  const GemmOperands o = make_operands(ctx, c);
  GemmCase ref_case = c;
  ref_case.threads = 1;
  const std::vector<uint8_t> want = run_gemm(ctx, ref_case, o, "cpu.reference");
  for (const char* kernel : fast_gemm_kernels(c.m, c.prepared_b, c.prepared_layout)) {
    const std::vector<uint8_t> got = run_gemm(ctx, c, o, kernel);
    EXPECT_EQ(first_difference(got, want, c.d_dtype), -1)
        << (kernel ? kernel : "(dispatch)") << " differs from cpu.reference at that element of D";
  }
}

class CpuFast : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(a4w4_context_create(&ctx_), A4W4_SUCCESS); }
  void TearDown() override { a4w4_context_destroy(ctx_); }
  a4w4_context ctx_ = nullptr;
};

// ---- Registry and dispatch ------------------------------------------------------------------

a4w4::GemmProblem problem_of(int64_t m, int64_t n, int64_t k, a4w4_layout b_layout) {
  a4w4::GemmProblem p{};
  p.m = m;
  p.n = n;
  p.k = k;
  p.a.layout = A4W4_LAYOUT_PLAIN;
  p.b.layout = b_layout;
  p.d_dtype = A4W4_DTYPE_F32;
  p.alpha = 1.0f;
  p.device = a4w4_cpu();
  return p;
}

TEST_F(CpuFast, FastKernelsComeBeforeTheReference) {
  std::vector<std::string> names;
  for (int i = 0; i < a4w4_kernel_count(); ++i) {
    const char* name = nullptr;
    a4w4_backend backend{};
    ASSERT_EQ(a4w4_kernel_info(i, &name, &backend), A4W4_SUCCESS);
    if (backend == A4W4_BACKEND_CPU) names.push_back(name);
  }
  const std::vector<std::string> want = {"cpu.gemv_avx512vnni", "cpu.gemm_avx512vnni",
                                         "cpu.gemm_avx2", "cpu.gemm_scalar", "cpu.reference"};
  EXPECT_EQ(names, want);
}

TEST_F(CpuFast, DispatchPicksTheFastestApplicableKernel) {
  const bool vnni = a4w4::cpu::isa_supported(Isa::kAvx512Vnni);
  const bool avx2 = a4w4::cpu::isa_supported(Isa::kAvx2);
  const std::string gemm = vnni   ? "cpu.gemm_avx512vnni"
                           : avx2 ? "cpu.gemm_avx2"
                                  : "cpu.gemm_scalar";
  auto pick = [](const a4w4::GemmProblem& p) {
    return std::string(a4w4::choose_gemm_kernel(p, A4W4_BACKEND_CPU, "", nullptr).kernel->name);
  };
  for (int64_t m : {1, 2, 3, 4})
    EXPECT_EQ(pick(problem_of(m, 64, 256, A4W4_LAYOUT_PLAIN)), vnni ? "cpu.gemv_avx512vnni" : gemm)
        << m;
  EXPECT_EQ(pick(problem_of(5, 64, 256, A4W4_LAYOUT_PLAIN)), gemm);
  // The GEMV path streams plain B only: a prepared B falls back to the blocked GEMM.
  EXPECT_EQ(pick(problem_of(1, 64, 256, A4W4_LAYOUT_PREPARED_V1)), gemm);
}

TEST_F(CpuFast, NamedKernelsThatCannotRunAreRefused) {
  std::mt19937_64 rng(1);
  const Mx a = random_mx(rng, 5, 64, {});
  const Mx b = random_mx(rng, 8, 64, {});
  FloatBuf d = float_buf(A4W4_DTYPE_F32, 5, 8, 8);
  const a4w4_tensor ad = a.values_desc(), asd = a.scales_desc(), bd = b.values_desc(),
                    bsd = b.scales_desc(), dd = d.matrix();
  a4w4_gemm_options options;
  a4w4_gemm_options_init(&options);
  options.kernel = "cpu.gemv_avx512vnni";  // M = 5 > 4, or no AVX-512 VNNI here
  const std::vector<uint8_t> before = d.bytes;
  EXPECT_EQ(a4w4_gemm(ctx_, &ad, &asd, &bd, &bsd, nullptr, nullptr, &dd, &options, nullptr),
            A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  EXPECT_EQ(d.bytes, before) << "a refused call wrote D";
  if (!a4w4::cpu::isa_supported(Isa::kAvx512Vnni)) {
    options.kernel = "cpu.gemm_avx512vnni";
    EXPECT_EQ(a4w4_gemm(ctx_, &ad, &asd, &bd, &bsd, nullptr, nullptr, &dd, &options, nullptr),
              A4W4_ERROR_KERNEL_NOT_APPLICABLE);
  }
  // A prepared B of version 1 named for the GEMV path.
  const Prepared prepared = prepare(ctx_, b, A4W4_LAYOUT_PREPARED_V1);
  const Mx a1 = random_mx(rng, 1, 64, {});
  const a4w4_tensor a1d = a1.values_desc(), a1sd = a1.scales_desc();
  FloatBuf d1 = float_buf(A4W4_DTYPE_F32, 1, 8, 8);
  const a4w4_tensor d1d = d1.matrix();
  options.kernel = "cpu.gemv_avx512vnni";
  EXPECT_EQ(a4w4_gemm(ctx_, &a1d, &a1sd, &prepared.values_desc, &prepared.scales_desc, nullptr,
                      nullptr, &d1d, &options, nullptr),
            A4W4_ERROR_KERNEL_NOT_APPLICABLE);
}

// ---- GEMM: bit-identical to the reference -----------------------------------------------------

TEST_F(CpuFast, RaggedShapes) {
  uint64_t seed = 10;
  for (int64_t m : {1, 2, 3, 4, 5, 7, 9, 31, 33, 66})
    for (int64_t n : {1, 3, 17, 32, 33, 100, 129})
      for (int64_t k : {32, 96, 544}) {
        GemmCase c;
        c.m = m;
        c.n = n;
        c.k = k;
        c.seed = seed++;
        expect_identical(ctx_, c);
      }
}

TEST_F(CpuFast, LongKAndLargerTiles) {
  GemmCase c;
  c.m = 70;
  c.n = 300;
  c.k = 2080;  // 65 blocks: several K chunks and a ragged last one
  c.seed = 20;
  expect_identical(ctx_, c);
  c.m = 3;
  c.n = 257;
  c.k = 4128;
  c.seed = 21;
  expect_identical(ctx_, c);
}

// Narrow scale spreads and long K: whole integer chunks in every kernel (GEMV chunks are 64
// blocks), with split-K partitions cutting chunks short.
TEST_F(CpuFast, NarrowScalesLongK) {
  uint64_t seed = 25;
  for (int64_t m : {1, 2, 4, 5})
    for (int64_t k : {2048, 4256})
      for (int split : {0, 3}) {
        GemmCase c;
        c.m = m;
        c.n = 37;
        c.k = k;
        c.split_k = split;
        c.a_scales = {124, 129, 0.0};
        c.b_scales = {123, 129, 0.0};
        c.with_bias = true;
        c.seed = seed++;
        expect_identical(ctx_, c);
      }
}

TEST_F(CpuFast, WideAndExtremeScales) {
  const ScaleRange ranges[] = {{0, 254, 0.0},   {250, 254, 0.0}, {0, 4, 0.0},    {0, 10, 0.0},
                               {120, 170, 0.0}, {60, 110, 0.0},  {0, 254, 0.05}, {127, 127, 0.0}};
  uint64_t seed = 30;
  for (const ScaleRange& r : ranges)
    for (a4w4_dtype d : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16})
      for (int64_t m : {2, 13}) {
        GemmCase c;
        c.m = m;
        c.n = 45;
        c.k = 512;
        c.a_scales = r;
        c.b_scales = r;
        if (r.lo == 0 && r.hi == 10) c.b_scales = {100, 140, 0.0};  // fp32 subnormal results
        c.d_dtype = d;
        c.seed = seed++;
        expect_identical(ctx_, c);
      }
}

TEST_F(CpuFast, NaNScalesAndNonFiniteC) {
  uint64_t seed = 40;
  for (int64_t m : {1, 4, 11}) {
    for (float beta : {0.0f, 1.0f}) {
      GemmCase c;
      c.m = m;
      c.n = 70;
      c.k = 256;
      c.a_scales = {110, 140, 0.03};
      c.b_scales = {110, 140, 0.03};
      c.with_c = true;
      c.c_specials = true;  // NaN and -Inf in C: with beta = 0 they still reach D (IEEE)
      c.beta = beta;
      c.with_bias = true;
      c.split_k = static_cast<int>(seed % 3);
      c.seed = seed++;
      expect_identical(ctx_, c);
    }
  }
}

TEST_F(CpuFast, ExtremeCodes) {
  // All elements +-6 (the largest |block sum|, 32 * 144 / 4) and all -0 / +0: checks the biased
  // decoding and its correction at their ends.
  for (uint8_t byte : {uint8_t{0x77}, uint8_t{0xFF}, uint8_t{0x7F}, uint8_t{0x88}, uint8_t{0x00}}) {
    GemmCase c;
    c.m = 6;
    c.n = 40;
    c.k = 128;
    GemmOperands o = make_operands(ctx_, c);
    std::fill(o.a.values.begin(), o.a.values.end(), byte);
    std::fill(o.b.values.begin(), o.b.values.end(), uint8_t(byte ^ 0x08));
    GemmCase ref = c;
    ref.threads = 1;
    const std::vector<uint8_t> want = run_gemm(ctx_, ref, o, "cpu.reference");
    for (const char* kernel : fast_gemm_kernels(c.m, false))
      EXPECT_EQ(first_difference(run_gemm(ctx_, c, o, kernel), want, c.d_dtype), -1)
          << (kernel ? kernel : "dispatch") << " byte " << int(byte);
    c.m = 2;  // and the GEMV path
    GemmOperands o2 = make_operands(ctx_, c);
    std::fill(o2.a.values.begin(), o2.a.values.end(), byte);
    std::fill(o2.b.values.begin(), o2.b.values.end(), byte);
    ref.m = 2;
    const std::vector<uint8_t> want2 = run_gemm(ctx_, ref, o2, "cpu.reference");
    for (const char* kernel : fast_gemm_kernels(c.m, false))
      EXPECT_EQ(first_difference(run_gemm(ctx_, c, o2, kernel), want2, c.d_dtype), -1)
          << (kernel ? kernel : "dispatch") << " byte " << int(byte);
  }
}

TEST_F(CpuFast, StridedOperands) {
  uint64_t seed = 50;
  for (int64_t m : {1, 3, 9}) {
    GemmCase c;
    c.m = m;
    c.n = 37;
    c.k = 192;
    c.a_pad = 5;
    c.b_pad = 3;
    c.d_pad = 4;
    c.c_pad = 2;
    c.bias_stride = 3;
    c.with_c = true;
    c.beta = 0.5f;
    c.with_bias = true;
    c.seed = seed++;
    expect_identical(ctx_, c);
  }
}

TEST_F(CpuFast, EveryEpilogueAndOutputDtype) {
  const a4w4_dtype dtypes[] = {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16};
  uint64_t seed = 60;
  for (a4w4_dtype d : dtypes)
    for (int c_mode = 0; c_mode < 3; ++c_mode)  // none, separate C, C = D
      for (a4w4_dtype c_dtype : dtypes)
        for (int bias_mode = 0; bias_mode < 4; ++bias_mode) {  // none, f32, bf16, f16
          if (c_mode != 1 && c_dtype != A4W4_DTYPE_F32) continue;
          for (int64_t m : {3, 10}) {
            GemmCase c;
            c.m = m;
            c.n = 35;
            c.k = 96;
            c.d_dtype = d;
            c.with_c = c_mode > 0;
            c.c_is_d = c_mode == 2;
            c.c_dtype = c_mode == 2 ? d : c_dtype;
            c.with_bias = bias_mode > 0;
            if (bias_mode > 0) c.bias_dtype = dtypes[bias_mode - 1];
            c.alpha = (seed % 3 == 0) ? -0.75f : (seed % 3 == 1 ? 0.0f : 3.0f);
            c.beta = (seed % 2 == 0) ? 1.0f : -2.5f;
            c.a_scales = {100, 150, 0.0};
            c.seed = seed++;
            expect_identical(ctx_, c);
          }
        }
}

TEST_F(CpuFast, SplitKValues) {
  uint64_t seed = 70;
  for (int64_t m : {2, 21})
    for (int64_t k : {64, 1024}) {
      const int blocks = static_cast<int>(k / 32);
      for (int split : {0, 1, 2, 3, 5, 7, blocks - 1, blocks}) {
        if (split > blocks || split < 0) continue;
        GemmCase c;
        c.m = m;
        c.n = 70;
        c.k = k;
        c.split_k = split;
        c.a_scales = {40, 210, 0.0};  // wide: the order of the double additions matters
        c.b_scales = {50, 200, 0.0};
        c.with_c = true;
        c.beta = 0.25f;
        c.seed = seed++;
        expect_identical(ctx_, c);
      }
    }
}

TEST_F(CpuFast, ThreadCounts) {
  uint64_t seed = 80;
  for (int threads : {1, 2, 3, 4})
    for (int64_t m : {1, 4, 70}) {
      GemmCase c;
      c.m = m;
      c.n = 133;
      c.k = 320;
      c.threads = threads;
      c.with_bias = true;
      c.split_k = threads == 3 ? 4 : 0;
      c.seed = seed++;
      expect_identical(ctx_, c);
    }
}

TEST_F(CpuFast, PreparedB) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 32},   {3, 15, 96},   {4, 17, 160},
                          {5, 16, 128}, {33, 70, 256}, {2, 45, 384}};
  uint64_t seed = 90;
  for (const Shape& s : shapes) {
    GemmCase c;
    c.m = s.m;
    c.n = s.n;
    c.k = s.k;
    c.prepared_b = true;
    c.b_pad = 4;
    c.b_scales = {110, 140, 0.02};
    c.with_bias = true;
    c.split_k = static_cast<int>(std::min<int64_t>(seed % 3, s.k / 32));
    c.seed = seed++;
    for (a4w4_layout layout : {A4W4_LAYOUT_PREPARED_V1, A4W4_LAYOUT_PREPARED_V2}) {
      c.prepared_layout = layout;
      expect_identical(ctx_, c);
    }
  }
}

// The GEMV path reads a version-2 B in place, a K tile's 64-byte run at a time, when every chunk of
// blocks starts on a K tile, and gathers plain rows when a split-K partition starts inside one:
// whole 64-block integer chunks (K = 4096) and a partial one (K = 2304), both ways.
TEST_F(CpuFast, PreparedBOnTheGemvPathInPlaceAndGathered) {
  uint64_t seed = 97;
  for (int64_t m : {1, 4})
    for (int64_t k : {2304, 4096})
      for (int split : {0, 2, 3}) {
        GemmCase c;
        c.m = m;
        c.n = 35;
        c.k = k;
        c.prepared_b = true;
        c.a_scales = {122, 127, 0.0};  // spreads that the GEMV sums in integer chunks
        c.b_scales = {122, 127, 0.0};
        c.with_bias = true;
        c.split_k = split;
        c.seed = seed++;
        expect_identical(ctx_, c);
      }
}

// Scale bytes that vary slowly along K (a random walk of +-`step` per block around `center`, with
// a few outliers): the VNNI kernel then sums most 8-block chunks in integers and falls back to
// doubles around the outliers.
void drift_scales(std::mt19937_64& rng, Mx& mx, int center, int step, double outliers) {
  std::uniform_int_distribution<int> walk(-step, step);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t r = 0; r < mx.rows; ++r) {
    int s = center + walk(rng);
    for (int64_t b = 0; b < mx.k / 32; ++b) {
      s = std::clamp(s + walk(rng), 1, 253);
      const double u = unit(rng);
      mx.scales[static_cast<size_t>(r * mx.scale_stride + b)] =
          static_cast<uint8_t>(u < outliers       ? 255
                               : u < 2 * outliers ? 200
                                                  : s);
    }
  }
}

TEST_F(CpuFast, SlowlyVaryingScalesMixIntegerAndDoubleChunks) {
  uint64_t seed = 110;
  for (int step : {0, 1, 2})
    for (double outliers : {0.0, 0.02})
      for (int64_t m : {5, 12}) {
        GemmCase c;
        c.m = m;
        c.n = 67;
        c.k = 1024;
        c.split_k = static_cast<int>(seed % 4);
        c.with_bias = true;
        c.seed = seed++;
        SCOPED_TRACE(c.describe() + " drift step " + std::to_string(step) + " outliers " +
                     std::to_string(outliers));
        GemmOperands o = make_operands(ctx_, c);
        std::mt19937_64 rng(c.seed);
        drift_scales(rng, o.a, 127, step, outliers);
        drift_scales(rng, o.b, 127, step, outliers);
        // Exponents stay within ~2 * 32 * step of 254 across K, so the reference's double sums
        // are exact and every kernel must match it bit for bit.
        GemmCase ref = c;
        ref.threads = 1;
        const std::vector<uint8_t> want = run_gemm(ctx_, ref, o, "cpu.reference");
        for (const char* kernel : fast_gemm_kernels(c.m, false))
          EXPECT_EQ(first_difference(run_gemm(ctx_, c, o, kernel), want, c.d_dtype), -1)
              << (kernel ? kernel : "(dispatch)");
      }
}

// The largest block sums (every element +-6) with scale spreads around the integer-chunk limits
// (VNNI GEMM: 16 blocks, spread 14; GEMV: 64 blocks, spread 12): chunk sums shifted up to the
// limit must not overflow int32, larger spreads must not be summed in integers at all.
TEST_F(CpuFast, LargestSumsAtTheIntegerChunkLimit) {
  for (int a_spread : {0, 7, 8, 11, 12, 13, 14, 15, 16, 24})
    for (int b_spread : {0, 1, 8})
      for (uint8_t b_code : {uint8_t{0x77}, uint8_t{0xFF}}) {
        GemmCase c;
        c.m = 4;
        c.n = 32;
        c.k = 2048;
        c.seed = 130;
        SCOPED_TRACE("spreads " + std::to_string(a_spread) + " + " + std::to_string(b_spread));
        GemmOperands o = make_operands(ctx_, c);
        std::fill(o.a.values.begin(), o.a.values.end(), uint8_t{0x77});
        std::fill(o.b.values.begin(), o.b.values.end(), b_code);
        for (int64_t r = 0; r < c.m; ++r)
          for (int64_t blk = 0; blk < c.k / 32; ++blk)
            o.a.scales[static_cast<size_t>(r * o.a.scale_stride + blk)] =
                static_cast<uint8_t>(100 + ((blk % 16 == 0) ? 0 : a_spread));
        for (int64_t r = 0; r < c.n; ++r)
          for (int64_t blk = 0; blk < c.k / 32; ++blk)
            o.b.scales[static_cast<size_t>(r * o.b.scale_stride + blk)] =
                static_cast<uint8_t>(120 + ((blk % 16 == 15) ? 0 : b_spread));
        GemmCase ref = c;
        ref.threads = 1;
        const std::vector<uint8_t> want = run_gemm(ctx_, ref, o, "cpu.reference");
        for (const char* kernel : fast_gemm_kernels(8, false))
          EXPECT_EQ(first_difference(run_gemm(ctx_, c, o, kernel), want, c.d_dtype), -1)
              << (kernel ? kernel : "(dispatch)");
      }
}

// Scales that drift across the whole E8M0 range along K while staying narrow inside each chunk:
// the reference's double sums round, the integer chunks sum exactly, so results may differ from
// the reference in the last bits of the double accumulator. Both must stay within the contract's
// bound of the exact value (test_support's float64 evaluation with the double-accumulation slack).
TEST_F(CpuFast, WideDriftAcrossKStaysWithinTheDoubleAccumulationBound) {
  std::mt19937_64 rng(120);
  const int64_t m = 9, n = 40, k = 8192;
  Mx a = random_mx(rng, m, k, {});
  Mx b = random_mx(rng, n, k, {});
  // A's scales climb from 2^-67 to 2^63 along K (+-1 noise), B's stay near 1: partials span 130
  // binary orders of magnitude, D stays finite.
  for (int64_t r = 0; r < m; ++r)
    for (int64_t blk = 0; blk < k / 32; ++blk)
      a.scales[static_cast<size_t>(r * a.scale_stride + blk)] =
          static_cast<uint8_t>(61 + blk * 129 / (k / 32 - 1) + static_cast<int>(rng() % 3) - 1);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t blk = 0; blk < k / 32; ++blk)
      b.scales[static_cast<size_t>(r * b.scale_stride + blk)] =
          static_cast<uint8_t>(126 + rng() % 3);
  // The same operands in test_support's types, for its float64 evaluation.
  auto to_support = [](const Mx& mx) {
    a4w4_test::MxOperand out{a4w4_test::HostTensor::matrix(A4W4_DTYPE_E2M1, mx.rows, mx.k),
                             a4w4_test::HostTensor::matrix(A4W4_DTYPE_E8M0, mx.rows, mx.k / 32)};
    for (int64_t r = 0; r < mx.rows; ++r) {
      for (int64_t i = 0; i < mx.k; ++i) {
        const uint8_t byte = mx.values[static_cast<size_t>(r * mx.stride + i / 2)];
        out.values.set_code(r, i, (i & 1) ? byte >> 4 : byte & 15);
      }
      for (int64_t blk = 0; blk < mx.k / 32; ++blk)
        out.scales.set_byte(r, blk, mx.scales[static_cast<size_t>(r * mx.scale_stride + blk)]);
    }
    return out;
  };
  const a4w4_test::GemmReference exact =
      a4w4_test::reference_gemm(to_support(a), to_support(b), 1.0f, 0.0f, nullptr, nullptr);
  GemmCase c;
  c.m = m;
  c.n = n;
  c.k = k;
  GemmOperands o;
  o.a = a;
  o.b = b;
  o.d_init = float_buf(A4W4_DTYPE_F32, m, n, n);
  for (const char* kernel : {"cpu.reference", "cpu.gemm_avx512vnni", "cpu.gemm_avx2",
                             "cpu.gemm_scalar", "cpu.gemv_avx512vnni"}) {
    const bool vnni = std::string(kernel).find("avx512") != std::string::npos;
    if ((vnni && !a4w4::cpu::isa_supported(Isa::kAvx512Vnni)) ||
        (std::string(kernel) == "cpu.gemm_avx2" && !a4w4::cpu::isa_supported(Isa::kAvx2)))
      continue;
    GemmCase run = c;
    if (std::string(kernel) == "cpu.gemv_avx512vnni") {  // the GEMV path on the first 4 rows
      run.m = 4;
      GemmOperands o4 = o;
      o4.a.rows = 4;
      o4.d_init = float_buf(A4W4_DTYPE_F32, 4, n, n);
      const std::vector<uint8_t> d4 = run_gemm(ctx_, run, o4, kernel);
      a4w4_test::HostTensor d = a4w4_test::HostTensor::matrix(A4W4_DTYPE_F32, m, n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          uint32_t bits = 0;
          if (i < 4)
            std::memcpy(&bits, d4.data() + (i * n + j) * 4, 4);
          else
            bits = std::bit_cast<uint32_t>(
                static_cast<float>(exact.hi[static_cast<size_t>(i * n + j)]));
          d.set_bits(i, j, bits);
        }
      EXPECT_TRUE(a4w4_test::check_gemm(exact, d, 0x1p-53)) << kernel;
      continue;
    }
    const std::vector<uint8_t> bytes = run_gemm(ctx_, run, o, kernel);
    a4w4_test::HostTensor d = a4w4_test::HostTensor::matrix(A4W4_DTYPE_F32, m, n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        uint32_t bits = 0;
        std::memcpy(&bits, bytes.data() + (i * n + j) * 4, 4);
        d.set_bits(i, j, bits);
      }
    a4w4_test::CompareStats stats;
    EXPECT_TRUE(a4w4_test::check_gemm(exact, d, 0x1p-53, &stats)) << kernel;
    EXPECT_GT(stats.finite_nonzero, m * n / 2)
        << kernel << ": the data should give ordinary results";
  }
}

// ---- Quantizer: bit-identical to the reference ------------------------------------------------

struct QuantizeBufs {
  int64_t rows, cols, x_stride, q_stride, s_stride;  // q_stride in bytes
  a4w4_dtype dtype;
  std::vector<uint8_t> x;  // raw elements (4 or 2 bytes)
  std::vector<uint8_t> q, s;
};

int dtype_width(a4w4_dtype dtype) {
  return dtype == A4W4_DTYPE_F32 ? 4 : 2;
}

// Special values as fp32 bit patterns (converted to the dtype by truncation for 16-bit types,
// which keeps NaN/Inf/zero/sign and gives valid, possibly subnormal, 16-bit patterns).
uint32_t special_bits(std::mt19937_64& rng) {
  static const uint32_t specials[] = {0x7FC00000u, 0xFFC00001u, 0x7F800000u, 0xFF800000u,
                                      0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu,
                                      0x00400000u, 0x7F7FFFFFu};
  return specials[rng() % (sizeof(specials) / sizeof(specials[0]))];
}

void write_element(QuantizeBufs& b, int64_t index, uint32_t f32_bits, uint16_t bits16) {
  if (b.dtype == A4W4_DTYPE_F32)
    std::memcpy(b.x.data() + index * 4, &f32_bits, 4);
  else
    std::memcpy(b.x.data() + index * 2, &bits16, 2);
}

// Fills the input with blocks of different kinds: random magnitudes across the dtype's range,
// blocks of one exponent with ties at the E2M1 midpoints, blocks with NaN/Inf, zero blocks,
// subnormal blocks.
QuantizeBufs make_quantize_input(std::mt19937_64& rng, a4w4_dtype dtype, int64_t rows, int64_t cols,
                                 int64_t pad) {
  QuantizeBufs b{rows, cols, cols + pad, cols / 2 + pad, cols / 32 + pad, dtype, {}, {}, {}};
  b.x.assign(static_cast<size_t>(((rows - 1) * b.x_stride + cols) * dtype_width(dtype)), kPoison);
  b.q.assign(static_cast<size_t>(rows * b.q_stride), kPoison);
  b.s.assign(static_cast<size_t>(rows * b.s_stride), kPoison);
  static const float kTies[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f,
                                5.0f,  6.0f,  7.0f,  0.5f,  3.0f, 4.0f};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t blk = 0; blk < cols / 32; ++blk) {
      const int kind = static_cast<int>(rng() % 6);
      const int shift = static_cast<int>(rng() % 40) - 20;  // ties scaled by a power of two
      for (int i = 0; i < 32; ++i) {
        const int64_t index = r * b.x_stride + blk * 32 + i;
        uint32_t bits = static_cast<uint32_t>(rng());
        if (dtype != A4W4_DTYPE_F32) bits &= 0xFFFF7FFFu;  // keep 16-bit patterns mostly finite
        uint16_t h = static_cast<uint16_t>(bits >> 16);
        if (kind == 0 && dtype == A4W4_DTYPE_F32 && (bits & 0x7F800000u) == 0x7F800000u)
          bits ^= 0x40000000u;
        if (kind == 1) {  // ties: exact multiples of midpoints, in one block exponent
          const float v = std::ldexp(kTies[rng() % 12], shift) * ((rng() & 1) ? -1.0f : 1.0f);
          bits = std::bit_cast<uint32_t>(v);
          h = dtype == A4W4_DTYPE_BF16 ? static_cast<uint16_t>(bits >> 16)
                                       : a4w4::numerics::round_to_fp16_bits(static_cast<double>(v));
        }
        if (kind == 2 && i == static_cast<int>(rng() % 32)) {  // one NaN/Inf/zero/subnormal
          bits = special_bits(rng);
          h = static_cast<uint16_t>(bits >> 16);
          if (dtype == A4W4_DTYPE_F16)
            h = static_cast<uint16_t>((bits >> 16 & 0x8000u) | (rng() % 0x7E00u));
        }
        if (kind == 3) {  // all zero, mixed signs
          bits = (rng() & 1) ? 0x80000000u : 0u;
          h = static_cast<uint16_t>(bits >> 16);
        }
        if (kind == 4) {  // subnormal fp32 / fp16 / bf16
          bits = static_cast<uint32_t>(rng() % 0x800000u) | ((rng() & 1) ? 0x80000000u : 0u);
          h = static_cast<uint16_t>((rng() % 0x400u) | ((rng() & 1) ? 0x8000u : 0u));
          if (dtype == A4W4_DTYPE_BF16)
            h = static_cast<uint16_t>((rng() % 0x80u) | ((rng() & 1) ? 0x8000u : 0u));
        }
        write_element(b, index, bits, h);
      }
    }
  }
  return b;
}

a4w4::QuantizeProblem quantize_problem(QuantizeBufs& b, a4w4_scale_mode mode) {
  return a4w4::QuantizeProblem{
      b.rows,     b.cols,     a4w4::FloatOperand{b.x.data(), b.dtype, b.x_stride},
      b.q.data(), b.q_stride, b.s.data(),
      b.s_stride, mode,       a4w4_cpu(),
      nullptr};
}

using QuantizeFn = void (*)(const a4w4::QuantizeProblem&, const a4w4::ExecConfig&);

TEST(CpuFastQuantize, SimdVariantsAreBitIdenticalToTheReference) {
  struct Variant {
    const char* name;
    QuantizeFn fn;
    bool supported;
  };
  const Variant variants[] = {
      {"avx512", a4w4::cpu::quantize_avx512, a4w4::cpu::isa_supported(Isa::kAvx512Vnni)},
      {"avx2", a4w4::cpu::quantize_avx2, a4w4::cpu::isa_supported(Isa::kAvx2)},
      {"dispatch", a4w4::cpu::quantize, true},
  };
  std::mt19937_64 rng(100);
  for (a4w4_dtype dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16})
    for (a4w4_scale_mode mode : {A4W4_SCALE_FLOOR, A4W4_SCALE_RCEIL, A4W4_SCALE_EVEN})
      for (int64_t pad : {0, 3}) {
        QuantizeBufs want = make_quantize_input(rng, dtype, 37, 320, pad);
        a4w4::cpu::reference_quantize(quantize_problem(want, mode), a4w4::ExecConfig{1});
        for (const Variant& v : variants) {
          if (!v.supported) continue;
          for (int threads : {1, 3}) {
            QuantizeBufs got = want;
            std::fill(got.q.begin(), got.q.end(), kPoison);
            std::fill(got.s.begin(), got.s.end(), kPoison);
            v.fn(quantize_problem(got, mode), a4w4::ExecConfig{threads});
            EXPECT_EQ(got.q, want.q)
                << v.name << " codes, " << a4w4_dtype_name(dtype) << " "
                << a4w4_scale_mode_name(mode) << " pad " << pad << " threads " << threads;
            EXPECT_EQ(got.s, want.s)
                << v.name << " scales, " << a4w4_dtype_name(dtype) << " "
                << a4w4_scale_mode_name(mode) << " pad " << pad << " threads " << threads;
          }
        }
      }
}

// Every fp32 exponent, and every bf16 / fp16 bit pattern, reaches every scale choice and code.
TEST(CpuFastQuantize, ExhaustiveSixteenBitPatternsAndAllFp32Exponents) {
  for (a4w4_dtype dtype : {A4W4_DTYPE_BF16, A4W4_DTYPE_F16, A4W4_DTYPE_F32}) {
    const int64_t cols = 32 * 64;
    const int64_t rows = dtype == A4W4_DTYPE_F32 ? 64 : 65536 / cols;
    QuantizeBufs b{rows, cols, cols, cols / 2, cols / 32, dtype, {}, {}, {}};
    b.x.assign(static_cast<size_t>(rows * cols * dtype_width(dtype)), 0);
    std::mt19937_64 rng(200);
    for (int64_t i = 0; i < rows * cols; ++i) {
      // 16-bit: each pattern once (blocks of consecutive patterns share exponents). fp32: blocks
      // whose elements walk through exponents around one random exponent.
      const uint32_t f32 = (static_cast<uint32_t>(rng()) & 0x807FFFFFu) |
                           (static_cast<uint32_t>((i / 32 * 4 + i % 7) % 256) << 23);
      write_element(b, i, f32, static_cast<uint16_t>(i));
    }
    for (a4w4_scale_mode mode : {A4W4_SCALE_FLOOR, A4W4_SCALE_RCEIL, A4W4_SCALE_EVEN}) {
      QuantizeBufs want = b, got = b;
      want.q.assign(static_cast<size_t>(rows * cols / 2), kPoison);
      want.s.assign(static_cast<size_t>(rows * cols / 32), kPoison);
      got.q = want.q;
      got.s = want.s;
      a4w4::cpu::reference_quantize(quantize_problem(want, mode), a4w4::ExecConfig{2});
      a4w4::cpu::quantize(quantize_problem(got, mode), a4w4::ExecConfig{2});
      EXPECT_EQ(got.q, want.q) << a4w4_dtype_name(dtype) << " " << a4w4_scale_mode_name(mode);
      EXPECT_EQ(got.s, want.s) << a4w4_dtype_name(dtype) << " " << a4w4_scale_mode_name(mode);
    }
  }
}

// The public entry point uses the fast quantizer by default and gives the reference's bytes.
TEST(CpuFastQuantize, PublicQuantizeMatchesTheReference) {
  a4w4_context ctx = nullptr;
  ASSERT_EQ(a4w4_context_create(&ctx), A4W4_SUCCESS);
  std::mt19937_64 rng(300);
  QuantizeBufs b = make_quantize_input(rng, A4W4_DTYPE_F32, 19, 256, 2);
  QuantizeBufs want = b;
  a4w4::cpu::reference_quantize(quantize_problem(want, A4W4_SCALE_RCEIL), a4w4::ExecConfig{1});
  const a4w4_tensor xd =
      a4w4_tensor_2d(b.x.data(), A4W4_DTYPE_F32, b.rows, b.cols, b.x_stride, a4w4_cpu());
  const a4w4_tensor qd =
      a4w4_tensor_2d(b.q.data(), A4W4_DTYPE_E2M1, b.rows, b.cols, b.q_stride * 2, a4w4_cpu());
  const a4w4_tensor sd =
      a4w4_tensor_2d(b.s.data(), A4W4_DTYPE_E8M0, b.rows, b.cols / 32, b.s_stride, a4w4_cpu());
  ASSERT_EQ(a4w4_quantize(ctx, &xd, &qd, &sd, A4W4_SCALE_RCEIL, nullptr), A4W4_SUCCESS)
      << a4w4_last_error_message();
  EXPECT_EQ(b.q, want.q);
  EXPECT_EQ(b.s, want.s);
  a4w4_context_destroy(ctx);
}

}  // namespace
