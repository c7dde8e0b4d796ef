// GEMV path for M <= 4 (decode-time matrix-vector products): memory-bound, so B is streamed once
// in its packed FP4 form and decoded in registers, with no packing pass. AVX-512 VNNI + VBMI.
//
// Four rows of B are processed together, four blocks (64 bytes of each row) at a time. vpermb
// decodes both nibbles of 64 bytes to biased int8 through a 16-entry table repeated 4 times (so
// the high bits of the index need no masking), vpdpbusd multiplies them by the matching even and
// odd elements of A (pre-split per block), and a 4x4 transpose-and-add turns the 16 int32 lanes
// (4 partial sums per block) into the 16 block sums [block][row]. Those become exact doubles
// isum * 2^(sa + sb - 256) (the scale built directly in the exponent field; NaN scales are
// handled once per row, below) and are added to each row's accumulator one block after the
// other, in K order. So, like every CPU kernel, the result is bit-identical to cpu.reference.
#include <omp.h>
#include "backends/cpu/x86_intrinsics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/decode_tables.h"
#include "backends/cpu/epilogue.h"
#include "backends/cpu/fast.h"
#include "numerics/mx.h"

namespace a4w4::cpu {
namespace {

constexpr int64_t kMaxRows = 4;  // M <= 4

// A split into what the kernel loads: per row, for each block, the 16 even and the 16 odd elements
// (signed 2*E2M1), the correction -12 * sum(2a) in lane 0 of 4, and sa + 1023 - 256 four times
// (added to sb and shifted into a double's exponent field it gives 2^(sa + sb - 256)).
struct GemvA {
  int64_t m;
  std::vector<int8_t> even, odd;  // [m][blocks * 16]
  std::vector<int32_t> corr;      // [m][blocks * 4]
  std::vector<int64_t> exponent;  // [m][blocks * 4]
  bool nan[kMaxRows];
};

void split_a(const GemmProblem& p, int64_t blocks, GemvA& a) {
  a.m = p.m;
  a.even.assign(static_cast<size_t>(p.m * blocks * 16), 0);
  a.odd.assign(a.even.size(), 0);
  a.corr.assign(static_cast<size_t>(p.m * blocks * 4), 0);
  a.exponent.assign(a.corr.size(), 0);
  for (int64_t m = 0; m < p.m; ++m) {
    const uint8_t* row = p.a.data + m * p.a.stride_bytes;
    const uint8_t* sa = p.a.scale + m * p.a.scale_stride;
    a.nan[m] = false;
    for (int64_t b = 0; b < blocks; ++b) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        const uint8_t byte = row[b * 16 + i];
        a.even[(m * blocks + b) * 16 + i] = numerics::kE2M1Doubled[byte & 15];
        a.odd[(m * blocks + b) * 16 + i] = numerics::kE2M1Doubled[byte >> 4];
        sum += kDoubledPairSum[byte];
      }
      a.corr[(m * blocks + b) * 4] = -kBBias * sum;
      for (int r = 0; r < 4; ++r) a.exponent[(m * blocks + b) * 4 + r] = sa[b] + 1023 - 256;
      a.nan[m] = a.nan[m] || sa[b] == numerics::kScaleNaN;
    }
  }
}

struct GemvArgs {
  const GemmProblem* p;
  const GemvA* a;
  int64_t blocks, splits;
  double* out;  // [m][n] block-partial sums (NaN where the contract says so)
};

#define A4W4_TARGET_GEMV \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")))

// Sums the int32 lanes of x[r] within each 128-bit lane j: result lane 4j + r.
A4W4_TARGET_GEMV inline __m512i block_sums(const __m512i x[4]) {
  const __m512i s01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(x[0], x[1]), _mm512_unpackhi_epi32(x[0], x[1]));
  const __m512i s23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(x[2], x[3]), _mm512_unpackhi_epi32(x[2], x[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// Up to 4 blocks starting at block b of the four rows, added to partial[m] (m < kM) in K order.
// kFull: all 4 blocks exist (plain loads); otherwise missing blocks load as zeros and add exact
// +0.0, which never changes a sum.
template <int kM, bool kFull>
A4W4_TARGET_GEMV inline void four_blocks(const GemvArgs& g, const uint8_t* const brow[4],
                                         const uint8_t* const srow[4], int64_t b, int nb,
                                         __m256d partial[kM], __m128i& scale_max) {
  const GemvA& a = *g.a;
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1Biased.data())));
  const __m128i to_block_major =
      _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __mmask64 byte_mask = kFull ? ~__mmask64{0} : (__mmask64{1} << (16 * nb)) - 1;
  const auto dword_mask = static_cast<__mmask16>(kFull ? 0xFFFF : (1u << (4 * nb)) - 1);
  const auto exp_lo_mask = static_cast<__mmask8>(kFull || nb >= 2 ? 0xFF : 0x0F);
  const auto exp_hi_mask = static_cast<__mmask8>(kFull ? 0xFF : nb == 3 ? 0x0F : 0x00);
  const auto scale_mask = static_cast<__mmask16>((1u << nb) - 1);

  __m512i lo[4], hi[4];
  __m128i s[4];
  for (int r = 0; r < 4; ++r) {
    const __m512i x = kFull ? _mm512_loadu_si512(brow[r] + b * 16)
                            : _mm512_maskz_loadu_epi8(byte_mask, brow[r] + b * 16);
    lo[r] = _mm512_permutexvar_epi8(x, table);
    hi[r] = _mm512_permutexvar_epi8(_mm512_srli_epi16(x, 4), table);
    int32_t word = 0;
    if (kFull) __builtin_memcpy(&word, srow[r] + b, 4);
    s[r] = kFull ? _mm_cvtsi32_si128(word) : _mm_maskz_loadu_epi8(scale_mask, srow[r] + b);
  }
  // Scale bytes [row][block] -> [block][row], widened to int64 lanes matching the sums.
  const __m128i row_major =
      _mm_unpacklo_epi64(_mm_unpacklo_epi32(s[0], s[1]), _mm_unpacklo_epi32(s[2], s[3]));
  scale_max = _mm_max_epu8(scale_max, row_major);
  const __m128i block_major = _mm_shuffle_epi8(row_major, to_block_major);
  const __m512i sb_lo = _mm512_cvtepu8_epi64(block_major);
  const __m512i sb_hi = _mm512_cvtepu8_epi64(_mm_srli_si128(block_major, 8));

  for (int m = 0; m < kM; ++m) {
    const int64_t base = m * g.blocks + b;
    const int8_t* even_ptr = a.even.data() + base * 16;
    const int8_t* odd_ptr = a.odd.data() + base * 16;
    const int32_t* corr_ptr = a.corr.data() + base * 4;
    const int64_t* exp_ptr = a.exponent.data() + base * 4;
    const __m512i even =
        kFull ? _mm512_loadu_si512(even_ptr) : _mm512_maskz_loadu_epi8(byte_mask, even_ptr);
    const __m512i odd =
        kFull ? _mm512_loadu_si512(odd_ptr) : _mm512_maskz_loadu_epi8(byte_mask, odd_ptr);
    const __m512i corr =
        kFull ? _mm512_loadu_si512(corr_ptr) : _mm512_maskz_loadu_epi32(dword_mask, corr_ptr);
    __m512i x[4];
    for (int r = 0; r < 4; ++r)
      x[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, lo[r], even), hi[r], odd);
    const __m512i isum = block_sums(x);
    const __m512i a_lo =
        kFull ? _mm512_loadu_si512(exp_ptr) : _mm512_maskz_loadu_epi64(exp_lo_mask, exp_ptr);
    const __m512i a_hi = kFull ? _mm512_loadu_si512(exp_ptr + 8)
                               : _mm512_maskz_loadu_epi64(exp_hi_mask, exp_ptr + 8);
    const __m512d p_lo =
        _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(isum)),
                      _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(sb_lo, a_lo), 52)));
    const __m512d p_hi =
        _mm512_mul_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(isum, 1)),
                      _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(sb_hi, a_hi), 52)));
    // One block after the other (K order), as the reference adds them.
    __m256d acc = _mm256_add_pd(partial[m], _mm512_castpd512_pd256(p_lo));
    acc = _mm256_add_pd(acc, _mm512_extractf64x4_pd(p_lo, 1));
    acc = _mm256_add_pd(acc, _mm512_castpd512_pd256(p_hi));
    partial[m] = _mm256_add_pd(acc, _mm512_extractf64x4_pd(p_hi, 1));
  }
}

// Rows n0 .. n0 + 4 * kQuads - 1: kQuads independent row quads per step, so their dependency
// chains (load, decode, dot, reduce, convert, add) overlap.
template <int kM, int kQuads>
A4W4_TARGET_GEMV void gemv_rows(const GemvArgs& g, int64_t n0) {
  const GemmProblem& p = *g.p;
  const uint8_t* brow[kQuads][4];
  const uint8_t* srow[kQuads][4];
  for (int qd = 0; qd < kQuads; ++qd)
    for (int r = 0; r < 4; ++r) {
      // Past the end: repeat the last row, computed and discarded.
      const int64_t n = std::min<int64_t>(n0 + 4 * qd + r, p.n - 1);
      brow[qd][r] = p.b.data + n * p.b.stride_bytes;
      srow[qd][r] = p.b.scale + n * p.b.scale_stride;
    }
  __m256d total[kQuads][kM];
  __m128i scale_max[kQuads];
  for (int qd = 0; qd < kQuads; ++qd) {
    for (auto& t : total[qd]) t = _mm256_setzero_pd();
    scale_max[qd] = _mm_setzero_si128();
  }
  for (int64_t part = 0; part < g.splits; ++part) {
    const int64_t b_begin = part * g.blocks / g.splits, b_end = (part + 1) * g.blocks / g.splits;
    __m256d partial[kQuads][kM];
    for (auto& pq : partial)
      for (auto& t : pq) t = _mm256_setzero_pd();
    int64_t b = b_begin;
    for (; b + 4 <= b_end; b += 4)
      for (int qd = 0; qd < kQuads; ++qd)
        four_blocks<kM, true>(g, brow[qd], srow[qd], b, 4, partial[qd], scale_max[qd]);
    if (b < b_end)
      for (int qd = 0; qd < kQuads; ++qd)
        four_blocks<kM, false>(g, brow[qd], srow[qd], b, static_cast<int>(b_end - b), partial[qd],
                               scale_max[qd]);
    for (int qd = 0; qd < kQuads; ++qd)
      for (int m = 0; m < kM; ++m) total[qd][m] = _mm256_add_pd(total[qd][m], partial[qd][m]);
  }

  for (int qd = 0; qd < kQuads; ++qd) {
    alignas(16) uint8_t max_bytes[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(max_bytes), scale_max[qd]);
    alignas(32) double sums[kM][4];
    for (int m = 0; m < kM; ++m) _mm256_store_pd(sums[m], total[qd][m]);
    for (int r = 0; r < 4 && n0 + 4 * qd + r < p.n; ++r) {
      const bool b_nan = std::find(max_bytes + 4 * r, max_bytes + 4 * r + 4, numerics::kScaleNaN) !=
                         max_bytes + 4 * r + 4;
      for (int m = 0; m < kM; ++m)
        g.out[m * p.n + n0 + 4 * qd + r] =
            (b_nan || g.a->nan[m]) ? std::numeric_limits<double>::quiet_NaN() : sums[m][r];
    }
  }
}

constexpr int kStepQuads = 2;  // row quads per step
using RowKernel = void (*)(const GemvArgs&, int64_t);
constexpr RowKernel kRowKernels[kMaxRows] = {gemv_rows<1, kStepQuads>, gemv_rows<2, kStepQuads>,
                                             gemv_rows<3, kStepQuads>, gemv_rows<4, kStepQuads>};

}  // namespace

std::string gemv_avx512_vnni_why_not(const GemmProblem& p) {
  if (!isa_supported(Isa::kAvx512Vnni)) return "the CPU lacks AVX-512 VNNI/VBMI";
  if (p.m > kMaxRows) return "M > 4 (the GEMV path takes M <= 4)";
  if (p.b.layout != A4W4_LAYOUT_PLAIN)
    return "B is in a prepared layout (the GEMV path streams plain B)";
  return {};
}

void gemv_avx512_vnni(const GemmProblem& p, const ExecConfig& exec) {
  const int64_t blocks = p.k / numerics::kBlockSize;
  GemvA a;
  split_a(p, blocks, a);
  std::vector<double> out(static_cast<size_t>(p.m * p.n));
  const GemvArgs args{&p, &a, blocks, std::max<int64_t>(p.split_k, 1), out.data()};
  constexpr int64_t kStepRows = 4 * kStepQuads;
  const int64_t steps = (p.n + kStepRows - 1) / kStepRows;
#pragma omp parallel num_threads(std::max(1, exec.num_threads))
  {
    // Chunks of 16 steps (512 KiB of B at K = 8192), handed out dynamically so that a thread
    // slowed down by other work does not hold the others up.
#pragma omp for schedule(dynamic, 16)
    for (int64_t step = 0; step < steps; ++step) kRowKernels[p.m - 1](args, step * kStepRows);
      // The epilogue runs here, in code compiled without FMA contraction, as in the reference.
#pragma omp for schedule(static)
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t m = 0; m < p.m; ++m)
        store_output(p, m, n, out[static_cast<size_t>(m * p.n + n)]);
  }
}

}  // namespace a4w4::cpu
