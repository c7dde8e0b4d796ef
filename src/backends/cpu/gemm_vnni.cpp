// AVX-512 VNNI micro-kernel: a 4 x 32 tile of D per call. Per block and quad, two zmm loads of B
// (32 columns x 4 biased bytes) and one broadcast of 4 signed A bytes per row feed vpdpbusd, which
// adds 4 exact products into each column's int32 lane; after 8 quads each lane holds the block's
// exact dot product isum (|isum| <= 4608 < 2^13).
//
// Scale-and-accumulate, exactly: converting every block's isum to double costs about as much as
// the dot product itself, so blocks are taken in chunks of up to kChunk = 16. When the chunk's
// scale bytes vary little (spread of A's 4 rows + spread of the panel's 32 columns <= 14, and no
// NaN byte), each isum is shifted left by (sa - min sa) + (sb - min sb) and summed in int32: at
// most 16 * 4608 * 2^14 < 2^31, so the chunk's sum is exact, and it reaches the double accumulator
// as one exact product double(sum) * 2^(min sa - 128) * 2^(min sb - 128) added with one rounding.
// Otherwise (wide scale spreads, NaN scales) the chunk goes block by block in double, each exact
// partial added with one rounding, as the reference does. Either way every addition to the double
// accumulator adds an exact value, so the result is within the reference's error bound, and equal
// to it bit for bit whenever the reference's double sum is exact (docs/cpu-backend.md).
#include "backends/cpu/x86_intrinsics.h"

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/decode_tables.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/gemm_driver.h"

namespace a4w4::cpu {
namespace {

#define A4W4_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma")))
#define A4W4_TARGET_AVX512_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma")))

constexpr int kChunk = 16;
constexpr int kMaxShift = 14;  // kChunk * 4608 * 2^14 < 2^31

// The block's 8 vectors of int32 sums (row i, columns 16h .. 16h+15), bias correction included.
A4W4_TARGET_AVX512_VNNI inline void block_sums(const int8_t* a, const uint8_t* b,
                                               const int32_t* corr, __m512i isum[4][2]) {
  for (int i = 0; i < 4; ++i) isum[i][0] = isum[i][1] = _mm512_set1_epi32(corr[i]);
  for (int q = 0; q < kQuads; ++q) {
    const __m512i b0 = _mm512_loadu_si512(b + q * 128);
    const __m512i b1 = _mm512_loadu_si512(b + q * 128 + 64);
    for (int i = 0; i < 4; ++i) {
      int32_t quad;
      __builtin_memcpy(&quad, a + q * 16 + i * 4, 4);
      const __m512i av = _mm512_set1_epi32(quad);
      isum[i][0] = _mm512_dpbusd_epi32(isum[i][0], b0, av);
      isum[i][1] = _mm512_dpbusd_epi32(isum[i][1], b1, av);
    }
  }
}

// acc[i][16h .. 16h+15] += double(v) * ra * rb[16h ..], with one rounding (the product is exact).
A4W4_TARGET_AVX512_VNNI inline void accumulate(double* acc, __m512i v, __m512d ra,
                                               const double* rb) {
  const __m512d lo = _mm512_cvtepi32_pd(_mm512_castsi512_si256(v));
  const __m512d hi = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(v, 1));
  _mm512_storeu_pd(
      acc, _mm512_fmadd_pd(_mm512_mul_pd(lo, ra), _mm512_loadu_pd(rb), _mm512_loadu_pd(acc)));
  _mm512_storeu_pd(acc + 8, _mm512_fmadd_pd(_mm512_mul_pd(hi, ra), _mm512_loadu_pd(rb + 8),
                                            _mm512_loadu_pd(acc + 8)));
}

// Largest byte of v.
A4W4_TARGET_AVX512_VNNI inline int max_byte(__m256i v) {
  __m128i m = _mm_max_epu8(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 8));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 4));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 2));
  m = _mm_max_epu8(m, _mm_srli_si128(m, 1));
  return _mm_cvtsi128_si32(m) & 0xFF;
}

}  // namespace

A4W4_TARGET_AVX512_VNNI void micro_kernel_avx512_vnni(const MicroTile& t) {
  static_assert(kGroupRows == 4 && kPanelCols == 32, "the register tile is 4 x 32");
  if (t.zero) {
    for (int i = 0; i < kGroupRows * kPanelCols; i += 8)
      _mm512_storeu_pd(t.acc + i, _mm512_setzero_pd());
  }
  for (int64_t c0 = 0; c0 < t.blocks; c0 += kChunk) {
    const int blocks = static_cast<int>(t.blocks - c0 < kChunk ? t.blocks - c0 : kChunk);
    const uint8_t* sab = t.a_scale_bytes + c0 * kGroupRows;  // [blocks][4]
    const uint8_t* sbb = t.b_scale_bytes + c0 * kPanelCols;  // [blocks][32]

    // Scale spreads of the chunk: per row / column min and max over its blocks.
    __m256i b_min = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sbb)), b_max = b_min;
    __m128i a_min = _mm_cvtsi32_si128(*reinterpret_cast<const int32_t*>(sab)), a_max = a_min;
    for (int c = 1; c < blocks; ++c) {
      const __m256i sb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sbb + c * kPanelCols));
      b_min = _mm256_min_epu8(b_min, sb);
      b_max = _mm256_max_epu8(b_max, sb);
      const __m128i sa = _mm_cvtsi32_si128(*reinterpret_cast<const int32_t*>(sab + c * kGroupRows));
      a_min = _mm_min_epu8(a_min, sa);
      a_max = _mm_max_epu8(a_max, sa);
    }
    const int spread = max_byte(_mm256_sub_epi8(b_max, b_min)) +
                       max_byte(_mm256_castsi128_si256(_mm_sub_epi8(a_max, a_min)));
    const bool nan = max_byte(_mm256_max_epu8(b_max, _mm256_castsi128_si256(a_max))) == 0xFF;

    if (spread <= kMaxShift && !nan) {
      // Integer chunk: isum << ((sa - min sa) + (sb - min sb)), summed exactly in int32.
      alignas(16) uint8_t a_min_bytes[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(a_min_bytes), a_min);
      // sa - min sa for the chunk's [block][row], as int32 (broadcast from memory below).
      static_assert(kChunk * kGroupRows == 64, "one zmm of A scale bytes per chunk");
      alignas(64) int32_t da[kChunk * kGroupRows];
      const __mmask64 chunk_bytes =
          blocks == kChunk ? ~__mmask64{0} : (__mmask64{1} << (blocks * kGroupRows)) - 1;
      const __m512i a_bytes = _mm512_sub_epi8(_mm512_maskz_loadu_epi8(chunk_bytes, sab),
                                              _mm512_broadcastd_epi32(a_min));
      // (extract immediates must be literal, also in unoptimised builds)
      _mm512_store_si512(da, _mm512_cvtepu8_epi32(_mm512_castsi512_si128(a_bytes)));
      _mm512_store_si512(da + 16, _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(a_bytes, 1)));
      _mm512_store_si512(da + 32, _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(a_bytes, 2)));
      _mm512_store_si512(da + 48, _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(a_bytes, 3)));
      __m512i chunk[4][2];
      for (auto& row : chunk) row[0] = row[1] = _mm512_setzero_si512();
      for (int c = 0; c < blocks; ++c) {
        const int64_t blk = c0 + c;
        __m512i isum[4][2];
        block_sums(t.a + blk * kGroupBlockBytes, t.b + blk * kPanelBlockBytes,
                   t.a_corr + blk * kGroupRows, isum);
        const __m256i db = _mm256_sub_epi8(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sbb + c * kPanelCols)), b_min);
        const __m512i db_lo = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(db));
        const __m512i db_hi = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(db, 1));
        for (int i = 0; i < 4; ++i) {
          const __m512i shift_a = _mm512_set1_epi32(da[c * kGroupRows + i]);
          chunk[i][0] = _mm512_add_epi32(
              chunk[i][0], _mm512_sllv_epi32(isum[i][0], _mm512_add_epi32(db_lo, shift_a)));
          chunk[i][1] = _mm512_add_epi32(
              chunk[i][1], _mm512_sllv_epi32(isum[i][1], _mm512_add_epi32(db_hi, shift_a)));
        }
      }
      // 2^(min sb - 128) per column, built in the exponent field (min sb < 255 here).
      alignas(64) double rb[kPanelCols];
      const __m512i bias = _mm512_set1_epi64(1023 - 128);
      for (int v = 0; v < 4; ++v) {
        const __m512i e = _mm512_cvtepu8_epi64(_mm_loadl_epi64(
            reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(&b_min) + 8 * v)));
        _mm512_store_pd(rb + 8 * v,
                        _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(e, bias), 52)));
      }
      for (int i = 0; i < 4; ++i) {
        const __m512d ra = _mm512_set1_pd(kHalfScale[a_min_bytes[i]]);
        accumulate(t.acc + i * kPanelCols, chunk[i][0], ra, rb);
        accumulate(t.acc + i * kPanelCols + 16, chunk[i][1], ra, rb + 16);
      }
    } else {
      // Block by block in double, as the reference.
      for (int c = 0; c < blocks; ++c) {
        const int64_t blk = c0 + c;
        __m512i isum[4][2];
        block_sums(t.a + blk * kGroupBlockBytes, t.b + blk * kPanelBlockBytes,
                   t.a_corr + blk * kGroupRows, isum);
        const double* rb = t.b_scale + blk * kPanelCols;
        for (int i = 0; i < 4; ++i) {
          const __m512d ra = _mm512_set1_pd(t.a_scale[blk * kGroupRows + i]);
          accumulate(t.acc + i * kPanelCols, isum[i][0], ra, rb);
          accumulate(t.acc + i * kPanelCols + 16, isum[i][1], ra, rb + 16);
        }
      }
    }
  }
}

// B packing: four columns (rows of B) per zmm, one 128-bit lane each. vpermb decodes both nibbles
// (16-entry table repeated, so the high index bits need no masking), byte unpacks restore element
// order (quads 0-3 in the low unpack, 4-7 in the high one), and one vpermd per half transposes
// [column][quad] to [quad][column]: 16 contiguous bytes per quad, stored at their panel offsets.
A4W4_TARGET_AVX512_VBMI void pack_four_columns_avx512(const uint8_t* const rows[4], int64_t blocks,
                                                      uint8_t* values) {
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1Biased.data())));
  const __m512i to_quad_major =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    __m512i x = _mm512_castsi128_si512(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[0] + blk * 16)));
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[1] + blk * 16)),
                           1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[2] + blk * 16)),
                           2);
    x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[3] + blk * 16)),
                           3);
    const __m512i lo = _mm512_permutexvar_epi8(x, table);
    const __m512i hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(x, 4), table);
    const __m512i quads_0_3 = _mm512_permutexvar_epi32(to_quad_major, _mm512_unpacklo_epi8(lo, hi));
    const __m512i quads_4_7 = _mm512_permutexvar_epi32(to_quad_major, _mm512_unpackhi_epi8(lo, hi));
    uint8_t* out = values + blk * kPanelBlockBytes;
    constexpr int kQuadStride = kPanelCols * 4;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 0 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_0_3, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 1 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_0_3, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_0_3, 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_0_3, 3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_4_7, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 5 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_4_7, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 6 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_4_7, 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 7 * kQuadStride),
                     _mm512_extracti32x4_epi32(quads_4_7, 3));
  }
}

std::string gemm_avx512_vnni_why_not(const GemmProblem&) {
  return isa_supported(Isa::kAvx512Vnni) ? std::string() : "the CPU lacks AVX-512 VNNI";
}

void gemm_avx512_vnni(const GemmProblem& problem, const ExecConfig& exec) {
  run_blocked_gemm(problem, exec, micro_kernel_avx512_vnni, pack_four_columns_avx512);
}

}  // namespace a4w4::cpu
