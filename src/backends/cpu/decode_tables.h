// Tables shared by the fast CPU kernels: E2M1 codes as small integers and E8M0 bytes as doubles.
//
// The int8 dot products need one unsigned operand (vpdpbusd, vpmaddubsw). Instead of moving signs
// at run time, B is decoded *biased*: 2*E2M1 + 12, in [0, 24], unsigned; A is decoded as 2*E2M1 in
// [-12, 12], signed. Then sum(a' * b') = sum(2a * 2b) + 12 * sum(2a), and the kernels subtract
// the second term (a per-row, per-block constant of A) by starting each block's integer
// accumulator at -12 * sum(2a).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "numerics/mx.h"

namespace a4w4::cpu {

inline constexpr int kBBias = 12;

// 2*E2M1 + 12 for each code (the biased, unsigned decoding of B).
inline constexpr std::array<uint8_t, 16> kE2M1Biased = [] {
  std::array<uint8_t, 16> t{};
  for (int c = 0; c < 16; ++c) t[c] = static_cast<uint8_t>(numerics::kE2M1Doubled[c] + kBBias);
  return t;
}();

// One packed byte (element 2i low nibble, 2i+1 high nibble) decoded to two bytes, low byte first:
// biased for B, signed 2*E2M1 (as raw bytes) for A.
inline constexpr std::array<uint16_t, 256> kBiasedPair = [] {
  std::array<uint16_t, 256> t{};
  for (int b = 0; b < 256; ++b)
    t[b] = static_cast<uint16_t>(kE2M1Biased[b & 15] | kE2M1Biased[b >> 4] << 8);
  return t;
}();
inline constexpr std::array<uint16_t, 256> kDoubledPair = [] {
  std::array<uint16_t, 256> t{};
  for (int b = 0; b < 256; ++b)
    t[b] = static_cast<uint16_t>(static_cast<uint8_t>(numerics::kE2M1Doubled[b & 15]) |
                                 static_cast<uint8_t>(numerics::kE2M1Doubled[b >> 4]) << 8);
  return t;
}();
// Sum of the two doubled elements of a packed byte (for the -12 * sum(2a) correction).
inline constexpr std::array<int8_t, 256> kDoubledPairSum = [] {
  std::array<int8_t, 256> t{};
  for (int b = 0; b < 256; ++b)
    t[b] = static_cast<int8_t>(numerics::kE2M1Doubled[b & 15] + numerics::kE2M1Doubled[b >> 4]);
  return t;
}();

// 2^(x - 128) for an E8M0 byte x, NaN for 0xFF. The product of an A and a B entry is
// 2^(sa + sb - 256): the contract's 2^(sa + sb - 254) with the 1/4 of the doubled integers folded
// in. Every entry and every product is a normal double, so isum * ra * rb is exact.
inline constexpr std::array<double, 256> kHalfScale = [] {
  std::array<double, 256> t{};
  for (uint64_t x = 0; x < 255; ++x) t[x] = std::bit_cast<double>((x - 128 + 1023) << 52);
  t[255] = std::bit_cast<double>(uint64_t{0x7FF8000000000000});  // the quiet NaN of NAN
  return t;
}();

}  // namespace a4w4::cpu
