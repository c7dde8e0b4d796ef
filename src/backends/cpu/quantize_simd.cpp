// SIMD quantizers, bit-identical to reference_quantize (numerics::quantize_block): the block's
// |max| is a max over the |v| bit patterns (NaN/Inf patterns are the largest, so one max also flags
// non-finite blocks), the scale byte comes from the shared scalar rule numerics::block_scale_byte,
// and every element is scaled by numerics::inverse_scale (exact) and rounded by counting the E2M1
// midpoints it passes, with the reference's </<= choice at each one (ties to the even code).
#include "backends/cpu/x86_intrinsics.h"

#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/reference.h"
#include "numerics/mx.h"

namespace a4w4::cpu {
namespace {

// The E2M1 magnitude code is the number of these midpoints |x| passes; `inclusive` midpoints are
// passed on equality too (a tie there rounds up to the even code).
struct Midpoint {
  float value;
  bool inclusive;
};
constexpr Midpoint kMidpoints[7] = {{0.25f, false}, {0.75f, true}, {1.25f, false}, {1.75f, true},
                                    {2.5f, false},  {3.5f, true},  {5.0f, false}};

#define A4W4_TARGET_Q512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define A4W4_TARGET_Q256 __attribute__((target("avx2,fma,f16c")))

// ---- AVX-512: a block is two vectors of 16 ----

template <a4w4_dtype kDtype>
A4W4_TARGET_Q512 inline __m512 load16(const void* base, int64_t index) {
  if constexpr (kDtype == A4W4_DTYPE_F32) {
    return _mm512_loadu_ps(static_cast<const float*>(base) + index);
  } else {
    const __m256i half = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + index));
    if constexpr (kDtype == A4W4_DTYPE_F16) return _mm512_cvtph_ps(half);            // exact
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));  // bf16
  }
}

A4W4_TARGET_Q512 inline __m512i encode16(__m512 v, __m512 inverse_scale) {
  const __m512 x = _mm512_mul_ps(v, inverse_scale);
  const __m512 magnitude = _mm512_abs_ps(x);
  const __m512i one = _mm512_set1_epi32(1);
  __m512i code = _mm512_srli_epi32(_mm512_castps_si512(x), 31);  // sign bit ...
  code = _mm512_slli_epi32(code, 3);                             // ... to 0x8
  for (const Midpoint& mid : kMidpoints) {
    const __mmask16 passed =
        mid.inclusive ? _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(mid.value), _CMP_GE_OQ)
                      : _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(mid.value), _CMP_GT_OQ);
    code = _mm512_mask_add_epi32(code, passed, code, one);
  }
  return code;
}

template <a4w4_dtype kDtype>
A4W4_TARGET_Q512 void quantize_rows_avx512(const QuantizeProblem& p, int64_t row) {
  const int64_t blocks = p.cols / numerics::kBlockSize;
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t index = row * p.x.stride + blk * numerics::kBlockSize;
    const __m512 v0 = load16<kDtype>(p.x.data, index), v1 = load16<kDtype>(p.x.data, index + 16);
    const __m512i bits = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v0), abs_mask),
                                          _mm512_and_si512(_mm512_castps_si512(v1), abs_mask));
    const uint8_t scale = numerics::block_scale_byte(_mm512_reduce_max_epu32(bits), p.mode);
    p.scale[row * p.scale_stride + blk] = scale;
    uint8_t* out = p.q + row * p.q_stride_bytes + blk * numerics::kBlockSize / 2;
    if (scale == numerics::kScaleNaN) {
      std::memset(out, 0, numerics::kBlockSize / 2);
      continue;
    }
    const __m512 inverse = _mm512_set1_ps(numerics::inverse_scale(scale));
    const __m256i codes = _mm256_set_m128i(_mm512_cvtepi32_epi8(encode16(v1, inverse)),
                                           _mm512_cvtepi32_epi8(encode16(v0, inverse)));
    // 16-bit word i holds elements 2i (low byte) and 2i+1: fold them into one nibble pair.
    const __m256i pairs =
        _mm256_or_si256(_mm256_and_si256(codes, _mm256_set1_epi16(0x000F)),
                        _mm256_and_si256(_mm256_srli_epi16(codes, 4), _mm256_set1_epi16(0x00F0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtepi16_epi8(pairs));
  }
}

// ---- AVX2: a block is four vectors of 8 ----

template <a4w4_dtype kDtype>
A4W4_TARGET_Q256 inline __m256 load8(const void* base, int64_t index) {
  if constexpr (kDtype == A4W4_DTYPE_F32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + index);
  } else {
    const __m128i half = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + index));
    if constexpr (kDtype == A4W4_DTYPE_F16) return _mm256_cvtph_ps(half);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
  }
}

A4W4_TARGET_Q256 inline __m256i encode8(__m256 v, __m256 inverse_scale) {
  const __m256 x = _mm256_mul_ps(v, inverse_scale);
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256i code = _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(x), 31), 3);
  for (const Midpoint& mid : kMidpoints) {
    const __m256 passed = mid.inclusive
                              ? _mm256_cmp_ps(magnitude, _mm256_set1_ps(mid.value), _CMP_GE_OQ)
                              : _mm256_cmp_ps(magnitude, _mm256_set1_ps(mid.value), _CMP_GT_OQ);
    code = _mm256_sub_epi32(code, _mm256_castps_si256(passed));  // passed = -1
  }
  return code;
}

template <a4w4_dtype kDtype>
A4W4_TARGET_Q256 void quantize_rows_avx2(const QuantizeProblem& p, int64_t row) {
  const int64_t blocks = p.cols / numerics::kBlockSize;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t index = row * p.x.stride + blk * numerics::kBlockSize;
    __m256 v[4];
    __m256i bits = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      v[i] = load8<kDtype>(p.x.data, index + 8 * i);
      bits = _mm256_max_epu32(bits, _mm256_and_si256(_mm256_castps_si256(v[i]), abs_mask));
    }
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
    const uint8_t scale =
        numerics::block_scale_byte(static_cast<uint32_t>(_mm_cvtsi128_si32(m)), p.mode);
    p.scale[row * p.scale_stride + blk] = scale;
    uint8_t* out = p.q + row * p.q_stride_bytes + blk * numerics::kBlockSize / 2;
    if (scale == numerics::kScaleNaN) {
      std::memset(out, 0, numerics::kBlockSize / 2);
      continue;
    }
    const __m256 inverse = _mm256_set1_ps(numerics::inverse_scale(scale));
    // Codes 0..15 narrowed to bytes; the packs interleave 128-bit lanes, the permute undoes it.
    const __m256i c01 = _mm256_packs_epi32(encode8(v[0], inverse), encode8(v[1], inverse));
    const __m256i c23 = _mm256_packs_epi32(encode8(v[2], inverse), encode8(v[3], inverse));
    const __m256i codes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(c01, c23),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    const __m256i pairs =
        _mm256_or_si256(_mm256_and_si256(codes, _mm256_set1_epi16(0x000F)),
                        _mm256_and_si256(_mm256_srli_epi16(codes, 4), _mm256_set1_epi16(0x00F0)));
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out),
        _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1)));
  }
}

using RowQuantizer = void (*)(const QuantizeProblem&, int64_t);

void run_rows(const QuantizeProblem& p, const ExecConfig& exec, RowQuantizer quantize_row) {
#pragma omp parallel for num_threads(exec.num_threads) schedule(static)
  for (int64_t r = 0; r < p.rows; ++r) quantize_row(p, r);
}

}  // namespace

void quantize_avx512(const QuantizeProblem& p, const ExecConfig& exec) {
  run_rows(p, exec,
           p.x.dtype == A4W4_DTYPE_F32   ? quantize_rows_avx512<A4W4_DTYPE_F32>
           : p.x.dtype == A4W4_DTYPE_F16 ? quantize_rows_avx512<A4W4_DTYPE_F16>
                                         : quantize_rows_avx512<A4W4_DTYPE_BF16>);
}

void quantize_avx2(const QuantizeProblem& p, const ExecConfig& exec) {
  run_rows(p, exec,
           p.x.dtype == A4W4_DTYPE_F32   ? quantize_rows_avx2<A4W4_DTYPE_F32>
           : p.x.dtype == A4W4_DTYPE_F16 ? quantize_rows_avx2<A4W4_DTYPE_F16>
                                         : quantize_rows_avx2<A4W4_DTYPE_BF16>);
}

void quantize(const QuantizeProblem& p, const ExecConfig& exec) {
  // Read on every call (cheap next to quantizing) so a process can switch between the two.
  const char* force = std::getenv("A4W4_CPU_QUANTIZE");
  if (force != nullptr && std::strcmp(force, "reference") == 0) return reference_quantize(p, exec);
  switch (best_isa()) {
    case Isa::kAvx512Vnni:
      return quantize_avx512(p, exec);
    case Isa::kAvx2:
      return quantize_avx2(p, exec);
    default:
      return reference_quantize(p, exec);
  }
}

}  // namespace a4w4::cpu
