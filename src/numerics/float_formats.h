// Conversions between fp32/fp64 and the 16-bit float formats, each rounding exactly once to
// nearest even. Used by quantizers (widening inputs), dequantizers and GEMM epilogues (narrowing).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace a4w4::numerics {

// Every NaN a4w4 writes is the positive quiet NaN of its dtype, on every backend, so outputs are
// bit-comparable across backends (NaN payloads and signs are not part of the contract).
inline constexpr uint32_t kCanonicalNanF32 = 0x7FC00000u;
inline constexpr uint16_t kCanonicalNanBf16 = 0x7FC0u;
inline constexpr uint16_t kCanonicalNanFp16 = 0x7E00u;

inline float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline float fp16_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

// Rounds x to a binary format with `precision` significand bits (implicit bit included), minimum
// normal exponent `min_exponent` and largest finite value `max_finite`, ties to even, overflow to
// infinity. The result is exactly representable in that format and returned as a double.
inline double round_to_format(double x, int precision, int min_exponent, double max_finite) {
  if (!std::isfinite(x) || x == 0.0) return x;
  const int exponent = std::max(std::ilogb(x), min_exponent);
  const int quantum = exponent - (precision - 1);  // exponent of one unit in the last place
  // Scaling by a power of two is exact; nearbyint rounds ties to even in the default mode.
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  if (std::fabs(rounded) > max_finite) return std::copysign(INFINITY, x);
  return rounded;
}

inline float round_to_float(double x) { return static_cast<float>(x); }  // RNE by IEEE

inline uint16_t float_to_bf16_bits(float exact) {
  // `exact` must already be representable in bf16 (or NaN/Inf): keep the top half.
  const uint32_t bits = std::bit_cast<uint32_t>(exact);
  if (std::isnan(exact)) return kCanonicalNanBf16;
  return static_cast<uint16_t>(bits >> 16);
}

inline uint16_t round_to_bf16_bits(double x) {
  return float_to_bf16_bits(static_cast<float>(round_to_format(x, 8, -126, 0x1.FEp127)));
}

inline uint16_t round_to_fp16_bits(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  if (std::isnan(x)) return kCanonicalNanFp16;
  const double r = std::fabs(round_to_format(x, 11, -14, 65504.0));
  if (std::isinf(r)) return static_cast<uint16_t>(sign | 0x7C00u);
  if (r == 0.0) return sign;
  if (r < 0x1p-14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r * 0x1p24));
  const int exponent = std::ilogb(r);
  const auto mantissa = static_cast<uint16_t>(std::ldexp(r, 10 - exponent) - 1024.0);
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | mantissa);
}

inline uint16_t round_to_bf16_bits(float x) { return round_to_bf16_bits(static_cast<double>(x)); }
inline uint16_t round_to_fp16_bits(float x) { return round_to_fp16_bits(static_cast<double>(x)); }

}  // namespace a4w4::numerics

#include "a4w4/a4w4.h"

namespace a4w4::numerics {

// Reads element `index` of an F32/BF16/F16 array, widened exactly.
inline float load_float(a4w4_dtype dtype, const void* base, int64_t index) {
  switch (dtype) {
    case A4W4_DTYPE_BF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case A4W4_DTYPE_F16:
      return fp16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    default:
      return static_cast<const float*>(base)[index];
  }
}

// Writes `value` rounded once, to nearest even, into element `index` of an F32/BF16/F16 array.
inline void store_rounded(a4w4_dtype dtype, void* base, int64_t index, double value) {
  switch (dtype) {
    case A4W4_DTYPE_BF16:
      static_cast<uint16_t*>(base)[index] = round_to_bf16_bits(value);
      break;
    case A4W4_DTYPE_F16:
      static_cast<uint16_t*>(base)[index] = round_to_fp16_bits(value);
      break;
    default:
      static_cast<float*>(base)[index] =
          std::isnan(value) ? std::bit_cast<float>(kCanonicalNanF32) : static_cast<float>(value);
      break;
  }
}

}  // namespace a4w4::numerics
