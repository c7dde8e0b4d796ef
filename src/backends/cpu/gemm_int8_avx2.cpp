// AVX2 micro-kernel (no VNNI): vpmaddubsw multiplies the biased unsigned B bytes by the signed A
// bytes and adds adjacent pairs into int16 (|pair| <= 2 * 24 * 12 = 576, no saturation); the
// int16 lanes of one block are summed in int16 (8 quads: |sum| <= 4608) and widened once per block
// by vpmaddwd with ones. Then the same exact double scale-and-accumulate as every kernel.
#include "backends/cpu/x86_intrinsics.h"

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/gemm_driver.h"

namespace a4w4::cpu {

#define A4W4_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace {

// Rows row0, row0+1 and columns 16*half .. 16*half+15 of the tile, over all its blocks: 8 double
// accumulators, 4 int16 accumulators and 2 B vectors fit the 16 ymm registers.
A4W4_TARGET_AVX2 void two_rows_sixteen_cols(const MicroTile& t, int row0, int half) {
  __m256d acc[2][4];  // [row][4 columns]
  for (int i = 0; i < 2; ++i)
    for (int v = 0; v < 4; ++v)
      acc[i][v] = t.zero ? _mm256_setzero_pd()
                         : _mm256_loadu_pd(t.acc + (row0 + i) * 32 + half * 16 + v * 4);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t blk = 0; blk < t.blocks; ++blk) {
    const int8_t* a = t.a + blk * kGroupBlockBytes + row0 * 4;
    const uint8_t* b = t.b + blk * kPanelBlockBytes + half * 64;
    __m256i pairs[2][2] = {};  // [row][8 columns]: int16 pair sums
    for (int q = 0; q < kQuads; ++q) {
      const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + q * 128));
      const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + q * 128 + 32));
      for (int i = 0; i < 2; ++i) {
        int32_t quad;
        __builtin_memcpy(&quad, a + q * 16 + i * 4, 4);
        const __m256i av = _mm256_set1_epi32(quad);
        pairs[i][0] = _mm256_add_epi16(pairs[i][0], _mm256_maddubs_epi16(b0, av));
        pairs[i][1] = _mm256_add_epi16(pairs[i][1], _mm256_maddubs_epi16(b1, av));
      }
    }
    const double* sb = t.b_scale + blk * kPanelCols + half * 16;
    for (int i = 0; i < 2; ++i) {
      const __m256i corr = _mm256_set1_epi32(t.a_corr[blk * kGroupRows + row0 + i]);
      const __m256d ra = _mm256_set1_pd(t.a_scale[blk * kGroupRows + row0 + i]);
      for (int h = 0; h < 2; ++h) {
        const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(pairs[i][h], ones), corr);
        const __m256d lo = _mm256_cvtepi32_pd(_mm256_castsi256_si128(isum));
        const __m256d hi = _mm256_cvtepi32_pd(_mm256_extracti128_si256(isum, 1));
        acc[i][2 * h] =
            _mm256_fmadd_pd(_mm256_mul_pd(lo, ra), _mm256_loadu_pd(sb + h * 8), acc[i][2 * h]);
        acc[i][2 * h + 1] = _mm256_fmadd_pd(_mm256_mul_pd(hi, ra), _mm256_loadu_pd(sb + h * 8 + 4),
                                            acc[i][2 * h + 1]);
      }
    }
  }
  for (int i = 0; i < 2; ++i)
    for (int v = 0; v < 4; ++v)
      _mm256_storeu_pd(t.acc + (row0 + i) * 32 + half * 16 + v * 4, acc[i][v]);
}

}  // namespace

A4W4_TARGET_AVX2 void micro_kernel_avx2(const MicroTile& t) {
  for (int row0 = 0; row0 < kGroupRows; row0 += 2)
    for (int half = 0; half < 2; ++half) two_rows_sixteen_cols(t, row0, half);
}

}  // namespace a4w4::cpu

namespace a4w4::cpu {

std::string gemm_avx2_why_not(const GemmProblem&) {
  return isa_supported(Isa::kAvx2) ? std::string() : "the CPU lacks AVX2/FMA";
}

void gemm_avx2(const GemmProblem& problem, const ExecConfig& exec) {
  run_blocked_gemm(problem, exec, micro_kernel_avx2);
}

}  // namespace a4w4::cpu
