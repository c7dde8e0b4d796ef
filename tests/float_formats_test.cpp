// White-box: the rounding and decoding helpers of src/numerics (float_formats.h, mx.h, and
// int8_fold_rules.h's padding of a last partial K tile) against
// exhaustive, independently written checks. Also validates the test suite's own rounding oracle
// (test_support round_to_dtype) against the same exhaustive neighbour search.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "numerics/float_formats.h"
#include "numerics/int8_fold_rules.h"
#include "numerics/mx.h"
#include "test_support.h"

namespace a4w4_test {
namespace {

namespace nx = a4w4::numerics;

// The finite non-negative values of a 16-bit format, indexed by bit pattern (0 .. max pattern).
struct Format16 {
  const char* name;
  a4w4_dtype dtype;
  uint16_t max_finite_bits;  // 0x7BFF (fp16), 0x7F7F (bf16)
  uint16_t inf_bits;         // 0x7C00, 0x7F80
  double (*decode)(uint16_t);
  std::vector<double> values;

  Format16(const char* n, a4w4_dtype d, uint16_t max_bits, uint16_t inf, double (*dec)(uint16_t))
      : name(n), dtype(d), max_finite_bits(max_bits), inf_bits(inf), decode(dec) {
    for (uint32_t b = 0; b <= max_finite_bits; ++b)
      values.push_back(decode(static_cast<uint16_t>(b)));
    // Patterns of non-negative finite values are ordered like their values.
    for (size_t i = 1; i < values.size(); ++i)
      if (!(values[i - 1] < values[i])) throw std::logic_error("Format16: not monotone");
  }

  // The expected bit pattern of x rounded to nearest, ties to the even pattern, by comparing the
  // two representable neighbours of |x|. Beyond the largest finite value the next "neighbour" is
  // max + ulp (pattern inf_bits, even), which rounds to Inf.
  uint16_t nearest(double x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const double a = std::fabs(x);
    if (std::isinf(a)) return static_cast<uint16_t>(sign | inf_bits);
    const auto it = std::upper_bound(values.begin(), values.end(), a);
    const size_t below = static_cast<size_t>(it - values.begin()) - 1;  // values[below] <= a
    const double low = values[below];
    if (low == a) return static_cast<uint16_t>(sign | below);
    const double high = below + 1 < values.size()
                            ? values[below + 1]
                            : 2 * values.back() - values[values.size() - 2];  // max + ulp
    const uint16_t low_bits = static_cast<uint16_t>(below);
    const uint16_t high_bits = static_cast<uint16_t>(below + 1);
    const double dl = a - low, dh = high - a;  // exact: both are close to a
    uint16_t pick;
    if (dl < dh)
      pick = low_bits;
    else if (dh < dl)
      pick = high_bits;
    else
      pick = (low_bits % 2 == 0) ? low_bits : high_bits;
    return static_cast<uint16_t>(sign | pick);
  }

  // Inputs worth testing: every representable value, every midpoint and its double neighbours,
  // values beyond the range, double subnormals, random doubles across the range.
  std::vector<double> probes(std::mt19937_64& rng) const {
    std::vector<double> out;
    for (size_t i = 0; i < values.size(); ++i) {
      out.push_back(values[i]);
      const double next =
          i + 1 < values.size() ? values[i + 1] : 2 * values.back() - values[values.size() - 2];
      const double mid = (values[i] + next) / 2;  // exact in double
      out.push_back(mid);
      out.push_back(std::nextafter(mid, 0.0));
      out.push_back(std::nextafter(mid, INFINITY));
    }
    for (double extra : {1e-320, 5e-324, 1e300, std::numeric_limits<double>::max(), 0x1p-200, 1e10,
                         70000.0, 65520.0, 65519.99, 0x1.FFp127, 0x1.FEFFFFFFFFFFFp127, 0x1p128,
                         0x1p-134, 0x1p-133, 0x1.8p-134, 0x1p-25, 0x1.0000000000001p-25})
      out.push_back(extra);
    for (int i = 0; i < 20000; ++i) {
      const double m = 1.0 + std::ldexp(static_cast<double>(rng() >> 11), -53);
      out.push_back(std::ldexp(m, std::uniform_int_distribution<int>(-150, 130)(rng)));
    }
    const size_t n = out.size();
    for (size_t i = 0; i < n; ++i) out.push_back(-out[i]);
    return out;
  }
};

const Format16& fp16() {
  static const Format16 f("fp16", A4W4_DTYPE_F16, 0x7BFF, 0x7C00, fp16_to_double);
  return f;
}
const Format16& bf16() {
  static const Format16 f("bf16", A4W4_DTYPE_BF16, 0x7F7F, 0x7F80, bf16_to_double);
  return f;
}

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(FloatFormats, Fp16BitsToFloatAll65536Patterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float got = nx::fp16_bits_to_float(bits);
    const double want = fp16_to_double(bits);
    ASSERT_TRUE(same_double(got, want)) << "pattern " << b << ": got " << got << " want " << want;
    if (std::isnan(want)) {  // the sign survives widening
      ASSERT_EQ(std::signbit(got), (bits & 0x8000u) != 0) << "pattern " << b;
    }
  }
}

TEST(FloatFormats, Bf16BitsToFloatAll65536Patterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    ASSERT_TRUE(same_double(nx::bf16_bits_to_float(bits), bf16_to_double(bits))) << "pattern " << b;
  }
}

void check_rounding(const Format16& format, uint16_t (*round)(double), uint64_t seed) {
  std::mt19937_64 rng(seed);
  int failures = 0;
  for (double x : format.probes(rng)) {
    const uint16_t want = format.nearest(x);
    const uint16_t got = round(x);
    if (got != want && failures++ < 10)
      ADD_FAILURE() << format.name << ": x = " << std::hexfloat << x << std::defaultfloat << " ("
                    << x << "): got 0x" << std::hex << got << ", expected 0x" << want;
    // The test suite's own oracle must agree too.
    const double oracle = round_to_dtype(format.dtype, x);
    const double want_value = format.decode(want);
    if (!same_double(oracle, want_value) && failures++ < 10)
      ADD_FAILURE() << "test oracle round_to_dtype(" << format.name << ", " << std::hexfloat << x
                    << ") = " << oracle << ", expected " << want_value;
  }
  EXPECT_EQ(failures, 0);
}

TEST(FloatFormats, RoundToFp16BitsIsNearestEvenWithOverflowAndSubnormals) {
  check_rounding(
      fp16(), [](double x) { return nx::round_to_fp16_bits(x); }, 0x5EED0201);
}

TEST(FloatFormats, RoundToBf16BitsIsNearestEvenWithOverflowAndSubnormals) {
  check_rounding(
      bf16(), [](double x) { return nx::round_to_bf16_bits(x); }, 0x5EED0202);
}

TEST(FloatFormats, FloatOverloadsRoundLikeTheDoubleOnes) {
  // Every 4099th float bit pattern (all exponents, both signs).
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(nx::round_to_fp16_bits(f), fp16().nearest(f)) << std::hexfloat << f;
    ASSERT_EQ(nx::round_to_bf16_bits(f), bf16().nearest(f)) << std::hexfloat << f;
  }
}

// docs/semantics.md: every NaN a4w4 writes is the positive quiet NaN of its dtype, whatever the
// sign or payload of the NaN computed, so backends agree bit for bit.
TEST(FloatFormats, NaNBecomesTheCanonicalQuietNaN) {
  for (double nan :
       {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::quiet_NaN(),
        std::bit_cast<double>(uint64_t{0xFFF0000000000123u})}) {
    EXPECT_EQ(nx::round_to_fp16_bits(nan), 0x7E00u);
    EXPECT_EQ(nx::round_to_bf16_bits(nan), 0x7FC0u);
    float f32 = 0;
    nx::store_rounded(A4W4_DTYPE_F32, &f32, 0, nan);
    EXPECT_EQ(std::bit_cast<uint32_t>(f32), 0x7FC00000u);
  }
}

TEST(FloatFormats, StoreRoundedF32RoundsOnceToNearestEven) {
  struct Case {
    double x;
    float want;
  };
  const Case cases[] = {
      {1.0 + 0x1p-24, 1.0f},                                     // tie -> even
      {1.0 + 0x1p-24 + 0x1p-50, 1.0f + 0x1p-23f},                // above the tie
      {1.0 + 3 * 0x1p-24, 1.0f + 0x1p-22f},                      // tie -> even (up)
      {0x1.FFFFFFp127, std::numeric_limits<float>::infinity()},  // FLT_MAX + half ulp
      {0x1.FFFFFEFFFFFFFp127, 0x1.FFFFFEp127f},                  // just below that
      {0x1p-150, 0.0f},                     // half the smallest subnormal: tie -> 0
      {0x1.0000000000001p-150, 0x1p-149f},  // just above
      {-0x1.8p-149, -0x1p-148f},            // 1.5 subnormal ulps: tie -> even
  };
  for (const Case& c : cases) {
    float out = 0;
    nx::store_rounded(A4W4_DTYPE_F32, &out, 0, c.x);
    EXPECT_EQ(out, c.want) << std::hexfloat << c.x;
  }
}

TEST(MxHelpers, E2M1EncodeDecodeTiesAndSaturation) {
  for (int code = 0; code < 16; ++code)
    EXPECT_TRUE(same_double(nx::e2m1_to_float(static_cast<uint8_t>(code)), kE2M1Table[code]))
        << code;
  struct Case {
    double x;
    uint8_t code;
  };
  const Case cases[] = {{0.25, 0}, {0.75, 2}, {1.25, 2}, {1.75, 4}, {2.5, 4},   {3.5, 6},
                        {5, 6},    {-0.1, 8}, {-0.0, 8}, {6.01, 7}, {1e300, 7}, {-1e300, 15},
                        {0.26, 1}, {0.74, 1}, {4.99, 6}, {5.01, 7}, {3.49, 5},  {-2.51, 13}};
  for (const Case& c : cases) EXPECT_EQ(nx::float_to_e2m1(c.x), c.code) << c.x;
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(static_cast<double>(i) - 100000.0, -14);  // [-6.1, 6.1]
    ASSERT_EQ(nx::float_to_e2m1(x), reference_e2m1_code(x)) << x;
  }
}

TEST(MxHelpers, PackUnpackNibbleOrder) {
  EXPECT_EQ(nx::pack_e2m1(0x1, 0xE), 0xE1);
  const uint8_t row[2] = {0x71, 0xA2};
  EXPECT_EQ(nx::unpack_e2m1(row, 0), 0x1);
  EXPECT_EQ(nx::unpack_e2m1(row, 1), 0x7);
  EXPECT_EQ(nx::unpack_e2m1(row, 2), 0x2);
  EXPECT_EQ(nx::unpack_e2m1(row, 3), 0xA);
}

TEST(MxHelpers, E8M0AllBytes) {
  for (int b = 0; b < 256; ++b)
    EXPECT_TRUE(same_double(nx::e8m0_to_double(static_cast<uint8_t>(b)),
                            e8m0_value(static_cast<uint8_t>(b))))
        << b;
}

// A last partial K tile's missing blocks take its first block's scale, read block by block
// (padded_block: the CPU's int8 form) or as one word with zeros past K (padded_scale_word: the
// CUDA kernels' prepared scale words) alike.
TEST(FoldRules, PaddedScaleWordRepeatsTheTilesFirstBlock) {
  namespace fr = a4w4::fold_rules;
  const uint8_t scales[] = {10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 33};
  for (int64_t blocks = 5; blocks <= 12; ++blocks)
    for (int64_t tile = 0; 4 * tile < blocks; ++tile) {
      uint32_t by_block = 0, zero_padded = 0;
      for (int j = 0; j < 4; ++j) {
        by_block |= uint32_t{scales[fr::padded_block(tile, j, blocks)]} << (8 * j);
        if (4 * tile + j < blocks) zero_padded |= uint32_t{scales[4 * tile + j]} << (8 * j);
      }
      EXPECT_EQ(fr::padded_scale_word(zero_padded, blocks - 4 * tile), by_block)
          << "blocks " << blocks << ", tile " << tile;
    }
  EXPECT_EQ(fr::padded_scale_word(0x0000'0B0Au, 2), 0x0A0A'0B0Au);
  EXPECT_EQ(fr::padded_scale_word(0x000C'0B0Au, 3), 0x0A0C'0B0Au);
  EXPECT_EQ(fr::padded_scale_word(0x0000'00FFu, 1), 0xFFFF'FFFFu);
  EXPECT_EQ(fr::padded_scale_word(0x0D0C'0B0Au, 4), 0x0D0C'0B0Au);
  EXPECT_EQ(fr::padded_block(2, 3, 11), 8);  // tile 2 holds blocks 8..10
  EXPECT_EQ(fr::padded_block(2, 2, 11), 10);
}

}  // namespace
}  // namespace a4w4_test
