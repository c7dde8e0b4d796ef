// OCP MX element and scale formats: E2M1 (FP4) codes, E8M0 scales, nibble packing, and the block
// quantizer's rules. The contract is docs/semantics.md. The rules below are compiled both for the
// host and, through numerics/host_device.h, into the CUDA kernels, so every quantizer in a4w4 is
// bit-identical by construction.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "a4w4/a4w4.h"
#include "numerics/host_device.h"

#include <bit>

namespace a4w4::numerics {

inline constexpr int kBlockSize = 32;
inline constexpr uint8_t kScaleNaN = 0xFF;
inline constexpr int kScaleBias = 127;

// Value of each E2M1 code; codes 8..15 are the negatives (0x8 is -0).
inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
// Twice each value: an integer in [-12, 12], so in-block dot products are exact integer sums.
inline constexpr int8_t kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

A4W4_HOST_DEVICE uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

A4W4_HOST_DEVICE float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

A4W4_HOST_DEVICE int leading_zeros(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __clz(static_cast<int>(x));
#else
  return std::countl_zero(x);
#endif
}

// Rounds |x| (already divided by the block scale) to the nearest E2M1 magnitude code, ties to the
// even code, saturating above 6. Doubled, the grid is {0, 1, 2, 3, 4, 6, 8, 12}: integers spaced
// 2^s apart with s = 0 up to 4, 1 up to 8 and 2 beyond, and code = y / 2^s + 2s on it. So the
// rounding is one round-to-integer (ties to even, which is the even code) of y / 2^s, done by
// adding 1.5 * 2^23; every step before it is exact. Branch-free, for the quantizer kernels.
A4W4_HOST_DEVICE uint8_t e2m1_magnitude_code(float magnitude) {
  const float y = magnitude * 2.0f;
  const int s = (y > 4.0f ? 1 : 0) + (y > 8.0f ? 1 : 0);
  const float scaled = y * (s == 0 ? 1.0f : (s == 1 ? 0.5f : 0.25f));
  const uint32_t rounded = float_bits(scaled + 12582912.0f) - 0x4B400000u;  // exact integer
  const uint32_t code = rounded + 2u * static_cast<uint32_t>(s);
  return static_cast<uint8_t>(code > 7u ? 7u : code);
}

// Round-to-nearest-even encoding of a finite value; the sign is kept (so -0.1 gives 0x8).
A4W4_HOST_DEVICE uint8_t float_to_e2m1(float x) {
  const uint8_t sign = (float_bits(x) >> 31) ? 0x8 : 0x0;
  return static_cast<uint8_t>(sign | e2m1_magnitude_code(std::fabs(x)));
}

// The scale exponent e (before clamping) that `mode` picks for a block whose absolute maximum has
// the bit pattern amax_bits (finite, non-zero): amax = m * 2^E, m in [1, 2), E from the true value
// (fp32 subnormals are normalised first). Integer arithmetic only, so host and device agree.
A4W4_HOST_DEVICE int scale_exponent(uint32_t amax_bits, a4w4_scale_mode mode) {
  int exponent = static_cast<int>(amax_bits >> 23);
  uint32_t mantissa = amax_bits & 0x7FFFFFu;  // m = 1 + mantissa / 2^23
  if (exponent == 0) {                        // subnormal: shift the leading one to bit 23
    const int shift = leading_zeros(mantissa) - 8;
    mantissa = (mantissa << shift) & 0x7FFFFFu;
    exponent = 1 - shift;
  }
  const int e = exponent - 127 - 2;  // E - emax_elem
  switch (mode) {
    case A4W4_SCALE_RCEIL:
      return e + (mantissa > 0x400000u ? 1 : 0);  // m > 1.5
    case A4W4_SCALE_EVEN:
      return e + (mantissa >= 0x600000u ? 1 : 0);  // m >= 1.75
    default:
      return e;  // FLOOR
  }
}

// The E8M0 byte of a block from its absolute maximum's bits (NaN/Inf blocks: 0xFF; zero: 0).
A4W4_HOST_DEVICE uint8_t block_scale_byte(uint32_t amax_bits, a4w4_scale_mode mode) {
  if (amax_bits >= 0x7F800000u) return kScaleNaN;
  if (amax_bits == 0) return 0;
  int e = scale_exponent(amax_bits, mode);
  e = e < -kScaleBias ? -kScaleBias : (e > kScaleBias ? kScaleBias : e);
  return static_cast<uint8_t>(e + kScaleBias);
}

// 2^-e for the scale byte (e = byte - 127 in [-127, 126] for finite blocks): always a normal
// float, and v * 2^-e is exact for every element of the block except where it underflows below
// 2^-126, far under the first rounding threshold, so the code (and the sign) are unaffected.
A4W4_HOST_DEVICE float inverse_scale(uint8_t scale_byte) {
  return bits_to_float(static_cast<uint32_t>(254 - scale_byte) << 23);
}

// The E2M1 code of value v in a block with the given scale byte (0xFF: code 0).
A4W4_HOST_DEVICE uint8_t encode_element(float v, uint8_t scale_byte) {
  if (scale_byte == kScaleNaN) return 0;
  return float_to_e2m1(v * inverse_scale(scale_byte));
}

A4W4_HOST_DEVICE uint8_t pack_e2m1(uint8_t even_code, uint8_t odd_code) {
  return static_cast<uint8_t>((even_code & 0xF) | ((odd_code & 0xF) << 4));
}

inline float e2m1_to_float(uint8_t code) { return kE2M1Values[code & 0xF]; }

// 2^(byte - 127) as a double; NaN for 0xFF.
inline double e8m0_to_double(uint8_t byte) {
  return byte == kScaleNaN ? NAN : std::ldexp(1.0, static_cast<int>(byte) - kScaleBias);
}

// Element i of a packed E2M1 row: element 2j in the low nibble of byte j, 2j+1 in the high nibble.
inline uint8_t unpack_e2m1(const uint8_t* row, int64_t i) {
  const uint8_t byte = row[i >> 1];
  return (i & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xF);
}

// Quantizes one block of 32 values (fp32, or fp16/bf16 widened exactly): writes 16 packed bytes
// and returns the E8M0 scale byte.
uint8_t quantize_block(std::span<const float, kBlockSize> values, a4w4_scale_mode mode,
                       uint8_t* packed_out);

}  // namespace a4w4::numerics
