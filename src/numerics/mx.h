// OCP MX element and scale formats: E2M1 (FP4) codes, E8M0 scales, nibble packing, and the
// reference block quantizer. The contract is docs/semantics.md; every other quantizer in a4w4
// (SIMD, CUDA) must be bit-identical to quantize_block() here.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "a4w4/a4w4.h"

namespace a4w4::numerics {

inline constexpr int kBlockSize = 32;
inline constexpr uint8_t kScaleNaN = 0xFF;
inline constexpr int kScaleBias = 127;

// Value of each E2M1 code; codes 8..15 are the negatives (0x8 is -0).
inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
// Twice each value: an integer in [-12, 12], so in-block dot products are exact integer sums.
inline constexpr int8_t kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline float e2m1_to_float(uint8_t code) { return kE2M1Values[code & 0xF]; }

// Rounds |x| (finite, already divided by the block scale) to the nearest E2M1 magnitude code, ties
// to the even code, saturating above 6. The comparisons are the midpoints between grid values.
inline uint8_t e2m1_magnitude_code(double magnitude) {
  if (magnitude <= 0.25) return 0;
  if (magnitude < 0.75) return 1;
  if (magnitude <= 1.25) return 2;
  if (magnitude < 1.75) return 3;
  if (magnitude <= 2.5) return 4;
  if (magnitude < 3.5) return 5;
  if (magnitude <= 5.0) return 6;
  return 7;
}

// Round-to-nearest-even encoding of a finite value; the sign is kept (so -0.1 gives 0x8).
inline uint8_t float_to_e2m1(double x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  return static_cast<uint8_t>(sign | e2m1_magnitude_code(std::fabs(x)));
}

// 2^(byte - 127) as a double; NaN for 0xFF.
inline double e8m0_to_double(uint8_t byte) {
  return byte == kScaleNaN ? NAN : std::ldexp(1.0, static_cast<int>(byte) - kScaleBias);
}

// Element i of a packed E2M1 row: element 2j in the low nibble of byte j, 2j+1 in the high nibble.
inline uint8_t unpack_e2m1(const uint8_t* row, int64_t i) {
  const uint8_t byte = row[i >> 1];
  return (i & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xF);
}

inline uint8_t pack_e2m1(uint8_t even_code, uint8_t odd_code) {
  return static_cast<uint8_t>((even_code & 0xF) | ((odd_code & 0xF) << 4));
}

// The scale exponent e (unclamped) that `mode` picks for a block whose finite, non-zero absolute
// maximum is amax: amax = m * 2^E with m in [1, 2), E from the true value (fp32 subnormals too).
int scale_exponent(float amax, a4w4_scale_mode mode);

// Quantizes one block of 32 values (fp32, or fp16/bf16 widened exactly): writes 16 packed bytes
// and returns the E8M0 scale byte. NaN/Inf blocks give scale 0xFF and zero codes; all-zero blocks
// give scale 0 and zero codes with their signs.
uint8_t quantize_block(std::span<const float, kBlockSize> values, a4w4_scale_mode mode,
                       uint8_t* packed_out);

}  // namespace a4w4::numerics
