// MX numerics through the public API (a4w4_quantize / a4w4_dequantize), against hand-computed
// tables and an independent implementation of the contract (test_support.h).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "a4w4/a4w4.h"
#include "test_support.h"

namespace a4w4_test {
namespace {

constexpr a4w4_scale_mode kModes[] = {A4W4_SCALE_FLOOR, A4W4_SCALE_RCEIL, A4W4_SCALE_EVEN};
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

double p2(int e) {
  return std::ldexp(1.0, e);
}

struct Quantized {
  HostTensor q, scale;
};

class Numerics : public ::testing::Test {
 protected:
  // One CPU thread: these calls are tiny (ThreadCountsGiveIdenticalQuantization varies it).
  void SetUp() override {
    ASSERT_EQ(a4w4_context_create(&ctx_), A4W4_SUCCESS);
    ASSERT_EQ(a4w4_context_set_num_threads(ctx_, 1), A4W4_SUCCESS);
  }
  void TearDown() override { a4w4_context_destroy(ctx_); }

  Quantized quantize(const HostTensor& x, a4w4_scale_mode mode) {
    Quantized out{HostTensor::matrix(A4W4_DTYPE_E2M1, x.rows(), x.cols()),
                  HostTensor::matrix(A4W4_DTYPE_E8M0, x.rows(), x.cols() / 32)};
    const a4w4_tensor xd = x.desc(), qd = out.q.desc(), sd = out.scale.desc();
    EXPECT_EQ(a4w4_quantize(ctx_, &xd, &qd, &sd, mode, nullptr), A4W4_SUCCESS)
        << a4w4_last_error_message();
    return out;
  }

  HostTensor dequantize(const HostTensor& q, const HostTensor& scale, a4w4_dtype dtype) {
    HostTensor y = HostTensor::matrix(dtype, q.rows(), q.cols());
    const a4w4_tensor qd = q.desc(), sd = scale.desc(), yd = y.desc();
    EXPECT_EQ(a4w4_dequantize(ctx_, &qd, &sd, &yd, nullptr), A4W4_SUCCESS)
        << a4w4_last_error_message();
    return y;
  }

  a4w4_context ctx_ = nullptr;
};

// A [1, 32 * blocks] tensor of `dtype` holding `values` (rounded to the dtype), rest zero.
HostTensor row_of(a4w4_dtype dtype, const std::vector<double>& values, int blocks = 1) {
  HostTensor x = HostTensor::matrix(dtype, 1, 32 * blocks);
  for (int64_t i = 0; i < x.cols(); ++i) {
    const double v = i < static_cast<int64_t>(values.size()) ? values[static_cast<size_t>(i)] : 0.0;
    x.set(0, i, round_to_dtype(dtype, v));
  }
  return x;
}

std::string codes_of(const HostTensor& q, int64_t row, int64_t block) {
  std::ostringstream s;
  for (int i = 0; i < 32; ++i) s << (i ? " " : "") << std::hex << int{q.code(row, block * 32 + i)};
  return s.str();
}

// Expects block `block` of row `row` to have scale byte `scale` and codes `codes` (rest 0).
void expect_block(const Quantized& out, int64_t row, int64_t block, uint8_t scale,
                  const std::vector<uint8_t>& codes) {
  EXPECT_EQ(hex_byte(out.scale.byte(row, block)), hex_byte(scale))
      << "scale byte of row " << row << " block " << block;
  for (int i = 0; i < 32; ++i) {
    const uint8_t want = i < static_cast<int>(codes.size()) ? codes[static_cast<size_t>(i)] : 0;
    EXPECT_EQ(hex_byte(out.q.code(row, block * 32 + i)), hex_byte(want))
        << "element " << i << " of row " << row << " block " << block
        << "; codes: " << codes_of(out.q, row, block);
  }
}

// ---- E2M1 decode / encode --------------------------------------------------------------------

TEST_F(Numerics, AllSixteenE2M1CodesDecodeToTheTable) {
  // Hand-written table of the contract (independent of kE2M1Table on purpose).
  const double expected[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  HostTensor q = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 32);
  for (int i = 0; i < 32; ++i) q.set_code(0, i, static_cast<uint8_t>(i % 16));
  for (uint8_t scale_byte : {uint8_t{127}, uint8_t{130}, uint8_t{120}}) {
    HostTensor s = HostTensor::matrix(A4W4_DTYPE_E8M0, 1, 1);
    s.set_byte(0, 0, scale_byte);
    for (a4w4_dtype dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
      SCOPED_TRACE(std::string(a4w4_dtype_name(dtype)) + " scale " + hex_byte(scale_byte));
      const HostTensor y = dequantize(q, s, dtype);
      for (int i = 0; i < 32; ++i) {
        const double want = std::ldexp(expected[i % 16], scale_byte - 127);
        EXPECT_EQ(y.get(0, i), want) << "code " << i % 16;
        EXPECT_EQ(std::signbit(y.get(0, i)), std::signbit(want)) << "sign of code " << i % 16;
      }
    }
  }
}

TEST_F(Numerics, EncodesGridValuesAndTiesToEvenCode) {
  // amax 6 = 1.5 * 2^2 gives e = 0 in every mode, so these values are encoded as they stand.
  const std::vector<double> values = {0,     0.5,   1,     1.5,   2,    3,    4,  6,  // the grid
                                      -0.5,  -1,    -1.5,  -2,    -3,   -4,   -6,  // negative grid
                                      0.25,  0.75,  1.25,  1.75,  2.5,  3.5,  5,   // ties
                                      -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5,  // negative ties
                                      -0.1,  -0.0,  0.1};
  const std::vector<uint8_t> codes = {0,   1,   2,   3,   4,   5,   6,   7,   0x9, 0xA, 0xB,
                                      0xC, 0xD, 0xE, 0xF, 0,   2,   2,   4,   4,   6,   6,
                                      0x8, 0xA, 0xA, 0xC, 0xC, 0xE, 0xE, 0x8, 0x8, 0};
  ASSERT_EQ(values.size(), 32u);
  for (a4w4_scale_mode mode : kModes) {
    SCOPED_TRACE(a4w4_scale_mode_name(mode));
    expect_block(quantize(row_of(A4W4_DTYPE_F32, values), mode), 0, 0, 127, codes);
  }
}

TEST_F(Numerics, EncodesJustAboveAndBelowEachMidpoint) {
  // Midpoints between neighbouring magnitudes (codes c, c+1), +-2^-20.
  const double midpoints[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5};
  std::vector<double> values = {6};
  std::vector<uint8_t> codes = {7};
  for (int c = 0; c < 7; ++c) {
    values.push_back(midpoints[c] - p2(-20));
    codes.push_back(static_cast<uint8_t>(c));
    values.push_back(-(midpoints[c] + p2(-20)));
    codes.push_back(static_cast<uint8_t>(0x8 | (c + 1)));
  }
  values.push_back(6 + p2(-20));  // above 6: saturates
  codes.push_back(7);
  for (a4w4_scale_mode mode : {A4W4_SCALE_FLOOR, A4W4_SCALE_EVEN}) {  // RCEIL: amax > 6 moves e
    SCOPED_TRACE(a4w4_scale_mode_name(mode));
    expect_block(quantize(row_of(A4W4_DTYPE_F32, values), mode), 0, 0, 127, codes);
  }
}

TEST_F(Numerics, SaturatesAboveSix) {
  // FLOOR: amax 7 = 1.75 * 2^2 -> e = 0, so 7 and 6.5 saturate to 6 (code 7), never Inf.
  expect_block(quantize(row_of(A4W4_DTYPE_F32, {7, -7, 6.5, -6.25, 4.5}), A4W4_SCALE_FLOOR), 0, 0,
               127, {7, 0xF, 7, 0xF, 6});
  // 1e30 = 1.5777 * 2^99: FLOOR e = 97 (byte 224); 1e30 / 2^97 = 6.31 -> 6; 1e29 / 2^97 = 0.631
  // -> 0.5; -3e29 / 2^97 = -1.89 -> -2.
  expect_block(quantize(row_of(A4W4_DTYPE_F32, {1e30, -1e30, 1e29, -3e29}), A4W4_SCALE_FLOOR), 0, 0,
               224, {7, 0xF, 1, 0xC});
  // RCEIL picks e = 98 (byte 225): 3.155 -> 3, 0.3155 -> 0.5, -0.946 -> -1.
  expect_block(quantize(row_of(A4W4_DTYPE_F32, {1e30, -1e30, 1e29, -3e29}), A4W4_SCALE_RCEIL), 0, 0,
               225, {5, 0xD, 1, 0xA});
}

TEST_F(Numerics, PackingPutsElement2iInTheLowNibble) {
  const Quantized out = quantize(row_of(A4W4_DTYPE_F32, {0.5, -4, 6, 0, 0, 1.5}), A4W4_SCALE_RCEIL);
  ASSERT_EQ(out.scale.byte(0, 0), 127);
  EXPECT_EQ(hex_byte(out.q.bytes()[0]), "0xE1");  // element 0: code 1, element 1: code 0xE
  EXPECT_EQ(hex_byte(out.q.bytes()[1]), "0x07");
  EXPECT_EQ(hex_byte(out.q.bytes()[2]), "0x30");

  HostTensor q = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 32, 0, 0);
  q.bytes()[0] = 0x71;
  q.bytes()[1] = 0xA2;
  HostTensor s = HostTensor::matrix(A4W4_DTYPE_E8M0, 1, 1);
  s.set_byte(0, 0, 127);
  const HostTensor y = dequantize(q, s, A4W4_DTYPE_F32);
  EXPECT_EQ(y.get(0, 0), 0.5);
  EXPECT_EQ(y.get(0, 1), 6.0);
  EXPECT_EQ(y.get(0, 2), 1.0);
  EXPECT_EQ(y.get(0, 3), -1.0);
}

// ---- E8M0 ------------------------------------------------------------------------------------

TEST_F(Numerics, DequantizesAll256ScaleBytes) {
  // Block b has scale byte b; its first elements are the codes below, the rest code 0.
  const uint8_t block_codes[] = {2, 1, 7, 0xF, 3, 0xD, 0x8, 5};
  const double block_values[] = {1, 0.5, 6, -6, 1.5, -3, -0.0, 3};
  HostTensor q = HostTensor::matrix(A4W4_DTYPE_E2M1, 1, 32 * 256, 0, 0);
  HostTensor s = HostTensor::matrix(A4W4_DTYPE_E8M0, 1, 256);
  for (int b = 0; b < 256; ++b) {
    s.set_byte(0, b, static_cast<uint8_t>(b));
    for (int i = 0; i < 8; ++i) q.set_code(0, b * 32 + i, block_codes[i]);
  }
  for (a4w4_dtype dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
    SCOPED_TRACE(a4w4_dtype_name(dtype));
    const HostTensor y = dequantize(q, s, dtype);
    for (int b = 0; b < 256; ++b) {
      for (int i = 0; i < 32; ++i) {
        const double got = y.get(0, b * 32 + i);
        if (b == 255) {
          EXPECT_TRUE(std::isnan(got)) << "scale 0xFF must make element " << i << " NaN";
          continue;
        }
        const double exact = std::ldexp(i < 8 ? block_values[i] : 0.0, b - 127);
        const double want = round_to_dtype(dtype, exact);
        EXPECT_EQ(got, want) << "scale byte " << b << " element " << i << " exact " << exact;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << "scale byte " << b << " element " << i;
      }
    }
  }
  // Spot checks written out: byte 0 is 2^-127, byte 254 is 2^127, 6 * 2^127 overflows f32.
  const HostTensor y = dequantize(q, s, A4W4_DTYPE_F32);
  EXPECT_EQ(y.get(0, 0), p2(-127));
  EXPECT_EQ(y.get(0, 1), p2(-128));
  EXPECT_EQ(y.get(0, 254 * 32), p2(127));
  EXPECT_EQ(y.get(0, 254 * 32 + 2), kInf);
  EXPECT_EQ(y.get(0, 254 * 32 + 3), -kInf);
  EXPECT_EQ(y.get(0, 127 * 32 + 2), 6.0);
}

// ---- Scale modes, hand-computed --------------------------------------------------------------

// Block: [amax, -amax, 0.125, -0.0625, 0.375, 1.0, 0...] * 2^shift, amax = mantissa * 2^shift.
// With e = shift - 2 the small values become 0.5, -0.25, 1.5, 4 -> codes 1, 0x8, 3, 6;
// with e = shift - 1 they become 0.25, -0.125, 0.75, 2 -> codes 0, 0x8, 2, 4.
struct ModeCase {
  const char* label;
  float mantissa;
  int e_offset[3];       // e - shift (+2) for FLOOR, RCEIL, EVEN: 0 means e = shift - 2
  uint8_t amax_code[3];  // code of +amax for FLOOR, RCEIL, EVEN
};

TEST_F(Numerics, ScaleModesAgainstHandComputedBlocks) {
  const float above_1_5 = std::bit_cast<float>(std::bit_cast<uint32_t>(1.5f) + 1);
  const float below_1_75 = std::bit_cast<float>(std::bit_cast<uint32_t>(1.75f) - 1);
  const ModeCase cases[] = {
      // m = 1: x = 4 everywhere.
      {"m=1.0", 1.0f, {0, 0, 0}, {6, 6, 6}},
      // m = 1.25: x = 5, a tie between 4 and 6 -> 4.
      {"m=1.25", 1.25f, {0, 0, 0}, {6, 6, 6}},
      // m = 1.5: x = 6 exactly, no mode moves e.
      {"m=1.5", 1.5f, {0, 0, 0}, {7, 7, 7}},
      // just above 1.5: FLOOR/EVEN saturate (6.0000005 -> 6); RCEIL e+1: 3.0000002 -> 3.
      {"m=1.5+ulp", above_1_5, {0, 1, 0}, {7, 5, 7}},
      // 1.7: FLOOR/EVEN 6.8 -> 6 (saturated); RCEIL 3.4 -> 3.
      {"m=1.7", 1.7f, {0, 1, 0}, {7, 5, 7}},
      // just below 1.75: RCEIL 3.4999998 -> 3; EVEN keeps e: 6.9999995 -> 6.
      {"m=1.75-ulp", below_1_75, {0, 1, 0}, {7, 5, 7}},
      // 1.75: FLOOR 7 -> 6; RCEIL and EVEN e+1: 3.5 is a tie between 3 and 4 -> 4.
      {"m=1.75", 1.75f, {0, 1, 1}, {7, 6, 6}},
      // 1.999: FLOOR 7.996 -> 6; RCEIL, EVEN 3.998 -> 4.
      {"m=1.999", 1.999f, {0, 1, 1}, {7, 6, 6}},
  };
  for (const ModeCase& c : cases) {
    for (int shift : {0, 10, -20, 100, -100}) {
      const double amax = std::ldexp(static_cast<double>(c.mantissa), shift);
      const std::vector<double> values = {
          amax, -amax, p2(shift - 3), -p2(shift - 4), 0.375 * p2(shift), p2(shift)};
      for (int mi = 0; mi < 3; ++mi) {
        SCOPED_TRACE(std::string(c.label) + " shift " + std::to_string(shift) + " mode " +
                     a4w4_scale_mode_name(kModes[mi]));
        const Quantized out = quantize(row_of(A4W4_DTYPE_F32, values), kModes[mi]);
        const int e = shift - 2 + c.e_offset[mi];
        const uint8_t amax_code = c.amax_code[mi];
        // m = 1.0: the last value equals amax.
        const uint8_t one_code = c.mantissa == 1.0f ? amax_code : (c.e_offset[mi] ? 4 : 6);
        const bool up = c.e_offset[mi] != 0;
        const std::vector<uint8_t> codes = {
            amax_code, static_cast<uint8_t>(amax_code | 0x8), static_cast<uint8_t>(up ? 0 : 1),
            0x8,       static_cast<uint8_t>(up ? 2 : 3),      one_code};
        expect_block(out, 0, 0, static_cast<uint8_t>(e + 127), codes);
      }
    }
  }
}

TEST_F(Numerics, NonFiniteBlocksGetNaNScaleAndZeroCodes) {
  for (double bad : {kNaN, kInf, -kInf}) {
    for (a4w4_scale_mode mode : kModes) {
      SCOPED_TRACE(std::to_string(bad) + " " + a4w4_scale_mode_name(mode));
      // Block 0 holds the non-finite value among ordinary ones; block 1 is ordinary.
      std::vector<double> values(64, 0.0);
      for (int i = 0; i < 64; ++i) values[static_cast<size_t>(i)] = (i % 7) - 3.0;
      values[5] = bad;
      const Quantized out = quantize(row_of(A4W4_DTYPE_F32, values, 2), mode);
      expect_block(out, 0, 0, 0xFF, {});
      // Block 1: amax 3 = 1.5 * 2^1 -> e = -1 in every mode: x = (i%7 - 3) * 2.
      std::vector<uint8_t> codes;
      const uint8_t by_value[7] = {0xF, 0xE, 0xC, 0, 4, 6, 7};  // -6, -4, -2, 0, 2, 4, 6
      for (int i = 32; i < 64; ++i) codes.push_back(by_value[i % 7]);
      expect_block(out, 0, 1, 126, codes);
    }
  }
}

TEST_F(Numerics, ZeroBlocksGetScaleZeroAndKeepSigns) {
  std::vector<double> values(32, 0.0);
  values[3] = -0.0;
  values[30] = -0.0;
  for (a4w4_scale_mode mode : kModes) {
    SCOPED_TRACE(a4w4_scale_mode_name(mode));
    std::vector<uint8_t> codes(32, 0);
    codes[3] = 0x8;
    codes[30] = 0x8;
    expect_block(quantize(row_of(A4W4_DTYPE_F32, values), mode), 0, 0, 0, codes);
  }
}

TEST_F(Numerics, TinyAndSubnormalBlocksClampTheScaleAtByteZero) {
  for (a4w4_scale_mode mode : kModes) {
    SCOPED_TRACE(a4w4_scale_mode_name(mode));
    // amax = 2^-127 (an fp32 subnormal): E = -127, e = -129 -> clamped to -127 (byte 0); the
    // elements are then v * 2^127: 1 -> 1, 0.75 -> tie -> 1, 2^-22 -> 0, -2^-3 -> -0.
    expect_block(
        quantize(row_of(A4W4_DTYPE_F32, {p2(-127), 1.5 * p2(-128), p2(-149), -p2(-130)}), mode), 0,
        0, 0, {2, 2, 0, 0x8});
    // amax = 1.5 * 2^-126 (normal): e = -128 -> -127: 3 -> 3.
    expect_block(quantize(row_of(A4W4_DTYPE_F32, {1.5 * p2(-126), p2(-127)}), mode), 0, 0, 0,
                 {5, 2});
    // amax = 0x1.8p-140 (subnormal, true E = -140): byte 0; 1.5 * 2^-13 -> 0.
    expect_block(quantize(row_of(A4W4_DTYPE_F32, {1.5 * p2(-140)}), mode), 0, 0, 0, {0});
  }
  // The boundary of the clamp: amax = 1.75 * 2^-125. FLOOR e = -127 (byte 0): 7 -> 6.
  // RCEIL and EVEN e = -126 (byte 1): 3.5 -> 4.
  const std::vector<double> values = {1.75 * p2(-125), p2(-127)};
  expect_block(quantize(row_of(A4W4_DTYPE_F32, values), A4W4_SCALE_FLOOR), 0, 0, 0, {7, 2});
  expect_block(quantize(row_of(A4W4_DTYPE_F32, values), A4W4_SCALE_RCEIL), 0, 0, 1, {6, 1});
  expect_block(quantize(row_of(A4W4_DTYPE_F32, values), A4W4_SCALE_EVEN), 0, 0, 1, {6, 1});
}

TEST_F(Numerics, HugeBlocksNeedNoClamp) {
  // amax = FLT_MAX = (2 - 2^-23) * 2^127: e = E - 2 = 125 at most (+1 = 126), never clamped.
  const double flt_max = std::ldexp(16777215.0, 104);
  const std::vector<double> values = {flt_max, -flt_max, p2(125), 1.5 * p2(126)};
  // FLOOR e = 125: 7.9999995 -> 6, 1 -> 1, 3 -> 3.
  expect_block(quantize(row_of(A4W4_DTYPE_F32, values), A4W4_SCALE_FLOOR), 0, 0, 252,
               {7, 0xF, 2, 5});
  // RCEIL, EVEN e = 126: 3.9999998 -> 4, 0.5 -> 0.5, 1.5 -> 1.5.
  expect_block(quantize(row_of(A4W4_DTYPE_F32, values), A4W4_SCALE_RCEIL), 0, 0, 253,
               {6, 0xE, 1, 3});
  expect_block(quantize(row_of(A4W4_DTYPE_F32, values), A4W4_SCALE_EVEN), 0, 0, 253,
               {6, 0xE, 1, 3});
  // amax = 2^127 exactly: e = 125 in every mode, 4 -> code 6.
  for (a4w4_scale_mode mode : kModes)
    expect_block(quantize(row_of(A4W4_DTYPE_F32, {p2(127)}), mode), 0, 0, 252, {6});
}

// ---- fp16 and bf16 inputs --------------------------------------------------------------------

HostTensor row_of_bits(a4w4_dtype dtype, const std::vector<uint16_t>& bits) {
  HostTensor x = HostTensor::matrix(dtype, 1, 32);
  for (int64_t i = 0; i < 32; ++i)
    x.set_bits(0, i, i < static_cast<int64_t>(bits.size()) ? bits[static_cast<size_t>(i)] : 0);
  return x;
}

TEST_F(Numerics, Fp16InputsAreWidenedExactly) {
  // Only fp16 subnormals: 2^-24 (0x0001), 2^-15 (0x0200), -2^-15 (0x8200), 0x0180 = 1.5 * 2^-16.
  // amax = 2^-15 -> e = -17 (byte 110): 2^-7 -> 0, 4, -4, 3 -> codes 0, 6, 0xE, 5.
  for (a4w4_scale_mode mode : kModes)
    expect_block(quantize(row_of_bits(A4W4_DTYPE_F16, {0x0001, 0x0200, 0x8200, 0x0180}), mode), 0,
                 0, 110, {0, 6, 0xE, 5});
  // Largest subnormal 0x03FF = 1023 * 2^-24 = 1.998 * 2^-15: FLOOR e = -17: 7.99 -> 6;
  // RCEIL e = -16: 3.996 -> 4.
  expect_block(quantize(row_of_bits(A4W4_DTYPE_F16, {0x03FF}), A4W4_SCALE_FLOOR), 0, 0, 110, {7});
  expect_block(quantize(row_of_bits(A4W4_DTYPE_F16, {0x03FF}), A4W4_SCALE_RCEIL), 0, 0, 111, {6});
  // 65504 (0x7BFF) = 1.999 * 2^15: FLOOR e = 13 -> 7.996 -> 6; RCEIL e = 14 -> 3.998 -> 4.
  // 0x3C00 = 1: FLOOR 1/8192 -> 0; -0.0 (0x8000) -> 0x8.
  expect_block(quantize(row_of_bits(A4W4_DTYPE_F16, {0x7BFF, 0x3C00, 0x8000}), A4W4_SCALE_FLOOR), 0,
               0, 140, {7, 0, 0x8});
  expect_block(quantize(row_of_bits(A4W4_DTYPE_F16, {0x7BFF, 0xF800}), A4W4_SCALE_RCEIL), 0, 0, 141,
               {6, 0xC});  // 0xF800 = -32768 -> -2
  // NaN, +Inf, -Inf fp16 patterns.
  for (uint16_t bad : {uint16_t{0x7E00}, uint16_t{0x7C01}, uint16_t{0x7C00}, uint16_t{0xFC00}}) {
    SCOPED_TRACE(bad);
    expect_block(quantize(row_of_bits(A4W4_DTYPE_F16, {0x3C00, bad}), A4W4_SCALE_RCEIL), 0, 0, 0xFF,
                 {});
  }
}

TEST_F(Numerics, Bf16InputsAreWidenedExactly) {
  // 0x40C0 = 6, 0x3FC0 = 1.5, 0xBF40 = -0.75, 0x0001 = 2^-133 (subnormal): e = 0.
  for (a4w4_scale_mode mode : kModes)
    expect_block(quantize(row_of_bits(A4W4_DTYPE_BF16, {0x40C0, 0x3FC0, 0xBF40, 0x0001}), mode), 0,
                 0, 127, {7, 3, 0xA, 0});
  // Only subnormals: 0x0040 = 2^-127, 0x0001 = 2^-133: byte 0, 1 and 2^-6 -> codes 2, 0.
  expect_block(quantize(row_of_bits(A4W4_DTYPE_BF16, {0x0040, 0x0001}), A4W4_SCALE_EVEN), 0, 0, 0,
               {2, 0});
  // 0x7F7F = 0x1.FEp127 (bf16 max): FLOOR e = 125 -> 7.97 -> 6; EVEN e = 126 -> 3.98 -> 4.
  expect_block(quantize(row_of_bits(A4W4_DTYPE_BF16, {0x7F7F}), A4W4_SCALE_FLOOR), 0, 0, 252, {7});
  expect_block(quantize(row_of_bits(A4W4_DTYPE_BF16, {0x7F7F}), A4W4_SCALE_EVEN), 0, 0, 253, {6});
  // NaN (quiet, signalling, negative) and infinities.
  for (uint16_t bad :
       {uint16_t{0x7FC0}, uint16_t{0x7F81}, uint16_t{0xFFC1}, uint16_t{0x7F80}, uint16_t{0xFF80}}) {
    SCOPED_TRACE(bad);
    expect_block(quantize(row_of_bits(A4W4_DTYPE_BF16, {bad, 0x3F80}), A4W4_SCALE_FLOOR), 0, 0,
                 0xFF, {});
  }
}

// ---- Round trips -----------------------------------------------------------------------------

TEST_F(Numerics, GridValuesTimesPowersOfTwoRoundTripExactly) {
  std::mt19937_64 rng(0x5EED0001);
  const int64_t rows = 16, blocks = 24;
  for (a4w4_dtype in_dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16}) {
    HostTensor x = HostTensor::matrix(in_dtype, rows, 32 * blocks);
    std::uniform_int_distribution<int> code(0, 15), exponent(-100, 100);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int e = exponent(rng);
        for (int i = 0; i < 32; ++i) x.set(r, b * 32 + i, std::ldexp(kE2M1Table[code(rng)], e));
        x.set(r, b * 32 + code(rng) % 32, std::ldexp(code(rng) % 2 ? 4.0 : -6.0, e));
      }
    }
    for (a4w4_scale_mode mode : kModes) {
      SCOPED_TRACE(std::string(a4w4_dtype_name(in_dtype)) + " " + a4w4_scale_mode_name(mode));
      const Quantized out = quantize(x, mode);
      const HostTensor y = dequantize(out.q, out.scale, A4W4_DTYPE_F32);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < x.cols(); ++i)
          ASSERT_EQ(y.get(r, i), x.get(r, i)) << "row " << r << " element " << i;
    }
  }
}

TEST_F(Numerics, RandomDataRoundTripsWithinTheE2M1Bound) {
  std::mt19937_64 rng(0x5EED0002);
  const int64_t rows = 32, blocks = 16;
  HostTensor x = HostTensor::matrix(A4W4_DTYPE_F32, rows, 32 * blocks);
  fill_random_floats(rng, x, -20, 20);
  for (a4w4_scale_mode mode : kModes) {
    SCOPED_TRACE(a4w4_scale_mode_name(mode));
    const Quantized out = quantize(x, mode);
    const HostTensor y = dequantize(out.q, out.scale, A4W4_DTYPE_F32);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < x.cols(); ++i) {
        const double v = x.get(r, i), scale = e8m0_value(out.scale.byte(r, i / 32));
        // Half an E2M1 spacing is at most a quarter of |x| (|x| >= 1) or 0.25 (|x| < 1), also
        // for FLOOR's saturation (|x| < 8 -> error < 2).
        ASSERT_LE(std::fabs(y.get(r, i) - v), 0.25 * std::max(std::fabs(v), scale))
            << "row " << r << " element " << i << " value " << v;
      }
    }
  }
}

// ---- Brute force against the independent quantizer -------------------------------------------

// Fills one block of `x` (row r, block b) with values of a randomly chosen kind.
void fill_block(std::mt19937_64& rng, HostTensor& x, int64_t r, int64_t b) {
  const bool wide = x.dtype() != A4W4_DTYPE_F16;  // f32 and bf16 share the exponent range
  const FloatFormat format = format_of(x.dtype());
  std::uniform_int_distribution<int> kind_dist(0, 9);
  const int kind = kind_dist(rng);
  const double midpoints[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5};
  auto put = [&](int i, double v) { x.set(r, b * 32 + i, round_to_format(format, v)); };
  if (kind <= 3) {
    // Random values, exponents within a window somewhere in the range (subnormals included).
    const int top = std::uniform_int_distribution<int>(wide ? -150 : -26, wide ? 127 : 15)(rng);
    std::uniform_int_distribution<int> exponent(top - 8, top);
    for (int i = 0; i < 32; ++i) {
      const double m = 1.0 + std::ldexp(static_cast<double>(rng() >> 11), -53);
      put(i, (rng() & 1 ? -1 : 1) * std::ldexp(m, exponent(rng)));
    }
  } else if (kind <= 6) {
    // Exact ties, grid values and their neighbours at a known scale: amax = 4 * 2^e.
    const int e = std::uniform_int_distribution<int>(wide ? -120 : -14, wide ? 120 : 12)(rng);
    const double ulp = std::ldexp(1.0, -format.precision + 1);
    for (int i = 0; i < 32; ++i) {
      const uint64_t pick = rng();
      double v = (pick & 1) ? midpoints[(pick >> 1) % 7] : kE2M1Table[(pick >> 1) % 8];
      if ((pick >> 8) % 3 == 1) v *= 1.0 + ulp;
      if ((pick >> 8) % 3 == 2) v *= 1.0 - ulp / 2;
      put(i, ((pick >> 16) & 1 ? -1 : 1) * std::ldexp(v, e));
    }
    put(static_cast<int>(rng() % 32), std::ldexp(4.0, e));
  } else if (kind == 7) {
    // amax near the mode boundaries m = 1.5 and 1.75.
    const int e = std::uniform_int_distribution<int>(wide ? -130 : -14, wide ? 126 : 14)(rng);
    const double ulp = std::ldexp(1.0, -format.precision + 1);
    const double ms[] = {1.5, 1.5 + ulp, 1.5 - ulp, 1.75, 1.75 + ulp, 1.75 - ulp, 2 - ulp, 1};
    for (int i = 0; i < 32; ++i)
      put(i, std::ldexp(ms[rng() % 8], e - static_cast<int>(rng() % 4)) * (rng() & 1 ? -1 : 1));
  } else if (kind == 8) {
    // Raw bit patterns: anything, NaN and Inf included.
    for (int i = 0; i < 32; ++i) x.set_bits(r, b * 32 + i, static_cast<uint32_t>(rng()));
  } else {
    // Zeros of both signs, sometimes one tiny value.
    for (int i = 0; i < 32; ++i) put(i, rng() & 1 ? -0.0 : 0.0);
    if (rng() & 1) x.set_bits(r, b * 32 + static_cast<int64_t>(rng() % 32), 1);
  }
}

TEST_F(Numerics, QuantizeMatchesIndependentImplementationOnRandomBlocks) {
  for (a4w4_dtype dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_F16, A4W4_DTYPE_BF16}) {
    const uint64_t seed = 0x5EED0100 + static_cast<uint64_t>(dtype);
    std::mt19937_64 rng(seed);
    const int64_t rows = 64, blocks = 64;
    HostTensor x = HostTensor::matrix(dtype, rows, 32 * blocks);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < blocks; ++b) fill_block(rng, x, r, b);
    for (a4w4_scale_mode mode : kModes) {
      SCOPED_TRACE(std::string(a4w4_dtype_name(dtype)) + " " + a4w4_scale_mode_name(mode) +
                   " seed " + std::to_string(seed));
      const Quantized out = quantize(x, mode);
      int failures = 0;
      for (int64_t r = 0; r < rows && failures < 5; ++r) {
        for (int64_t b = 0; b < blocks && failures < 5; ++b) {
          double values[32];
          for (int i = 0; i < 32; ++i) values[i] = x.get(r, b * 32 + i);
          const QuantizedBlock want = reference_quantize_block(values, mode);
          bool same = out.scale.byte(r, b) == want.scale;
          for (int i = 0; i < 32; ++i) same &= out.q.code(r, b * 32 + i) == want.codes[i];
          if (!same) {
            ++failures;
            std::ostringstream s;
            s.precision(9);
            for (int i = 0; i < 32; ++i) s << values[i] << " ";
            std::ostringstream w;
            for (int i = 0; i < 32; ++i) w << std::hex << int{want.codes[i]} << " ";
            ADD_FAILURE() << "row " << r << " block " << b << ": scale "
                          << hex_byte(out.scale.byte(r, b)) << " codes " << codes_of(out.q, r, b)
                          << "\n  expected scale " << hex_byte(want.scale) << " codes " << w.str()
                          << "\n  values " << s.str();
          }
        }
      }
    }
  }
}

TEST_F(Numerics, ElementRoundingMatchesExhaustiveNearestOnRandomFloats) {
  // Every float in a block whose amax is 6 * 2^e is encoded at scale 2^e: compare each element's
  // code with the exhaustive nearest-magnitude search on x = v / 2^e.
  std::mt19937_64 rng(0x5EED0003);
  const int64_t rows = 64, blocks = 32;
  HostTensor x = HostTensor::matrix(A4W4_DTYPE_F32, rows, 32 * blocks);
  std::vector<int> exps(static_cast<size_t>(rows * blocks));
  std::uniform_real_distribution<double> uniform(-6.0, 6.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int e = std::uniform_int_distribution<int>(-100, 100)(rng);
      exps[static_cast<size_t>(r * blocks + b)] = e;
      for (int i = 0; i < 32; ++i)
        x.set(r, b * 32 + i, std::ldexp(static_cast<double>(static_cast<float>(uniform(rng))), e));
      x.set(r, b * 32 + static_cast<int64_t>(rng() % 32), std::ldexp(-6.0, e));
    }
  }
  for (a4w4_scale_mode mode : kModes) {
    SCOPED_TRACE(a4w4_scale_mode_name(mode));
    const Quantized out = quantize(x, mode);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int e = exps[static_cast<size_t>(r * blocks + b)];
        ASSERT_EQ(out.scale.byte(r, b), e + 127) << "row " << r << " block " << b;
        for (int i = 0; i < 32; ++i) {
          const double v = x.get(r, b * 32 + i);
          ASSERT_EQ(hex_byte(out.q.code(r, b * 32 + i)),
                    hex_byte(reference_e2m1_code(std::ldexp(v, -e))))
              << "value " << v << " = " << std::ldexp(v, -e) << " * 2^" << e;
        }
      }
    }
  }
}

TEST_F(Numerics, StridedQuantizeAndDequantizeHonourRowStrides) {
  std::mt19937_64 rng(0x5EED0004);
  const int64_t rows = 5, k = 96;
  HostTensor x = HostTensor::matrix(A4W4_DTYPE_F32, rows, k, k + 7);
  x.fill_random_bytes(rng);  // the gaps hold garbage (NaN patterns included)
  fill_random_floats(rng, x, -4, 4);
  HostTensor q = HostTensor::matrix(A4W4_DTYPE_E2M1, rows, k, k + 10);
  HostTensor s = HostTensor::matrix(A4W4_DTYPE_E8M0, rows, k / 32, k / 32 + 3);
  const auto q_before = q.bytes(), s_before = s.bytes();
  const a4w4_tensor xd = x.desc(), qd = q.desc(), sd = s.desc();
  ASSERT_EQ(a4w4_quantize(ctx_, &xd, &qd, &sd, A4W4_SCALE_EVEN, nullptr), A4W4_SUCCESS)
      << a4w4_last_error_message();
  EXPECT_TRUE(gaps_unchanged(q_before, q));
  EXPECT_TRUE(gaps_unchanged(s_before, s));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 32; ++b) {
      double values[32];
      for (int i = 0; i < 32; ++i) values[i] = x.get(r, b * 32 + i);
      const QuantizedBlock want = reference_quantize_block(values, A4W4_SCALE_EVEN);
      ASSERT_EQ(s.byte(r, b), want.scale) << "row " << r << " block " << b;
      for (int i = 0; i < 32; ++i) ASSERT_EQ(q.code(r, b * 32 + i), want.codes[i]);
    }
  }
  for (a4w4_dtype dtype : {A4W4_DTYPE_F32, A4W4_DTYPE_BF16, A4W4_DTYPE_F16}) {
    HostTensor y = HostTensor::matrix(dtype, rows, k, k + 5);
    const auto y_before = y.bytes();
    const a4w4_tensor yd = y.desc();
    ASSERT_EQ(a4w4_dequantize(ctx_, &qd, &sd, &yd, nullptr), A4W4_SUCCESS)
        << a4w4_last_error_message();
    EXPECT_TRUE(gaps_unchanged(y_before, y));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < k; ++i)
        ASSERT_EQ(y.get(r, i),
                  round_to_dtype(dtype, kE2M1Table[q.code(r, i)] * e8m0_value(s.byte(r, i / 32))))
            << a4w4_dtype_name(dtype) << " row " << r << " element " << i;
  }
}

TEST_F(Numerics, ThreadCountsGiveIdenticalQuantization) {
  std::mt19937_64 rng(0x5EED0005);
  HostTensor x = HostTensor::matrix(A4W4_DTYPE_F32, 37, 320);
  fill_random_floats(rng, x, -30, 30);
  ASSERT_EQ(a4w4_context_set_num_threads(ctx_, 1), A4W4_SUCCESS);
  const Quantized one = quantize(x, A4W4_SCALE_RCEIL);
  for (int threads : {2, 3, 0}) {
    ASSERT_EQ(a4w4_context_set_num_threads(ctx_, threads), A4W4_SUCCESS);
    const Quantized many = quantize(x, A4W4_SCALE_RCEIL);
    EXPECT_EQ(one.q.bytes(), many.q.bytes()) << threads << " threads";
    EXPECT_EQ(one.scale.bytes(), many.scale.bytes()) << threads << " threads";
  }
}

}  // namespace
}  // namespace a4w4_test
