// GEMV path for M <= 4 (decode-time matrix-vector products): memory-bound, so B is streamed once,
// two neighbouring rows at a time (nearly a linear read, which the prefetchers follow; the rows
// share A's loads), in its packed FP4 form and decoded in registers, with no packing pass.
// AVX-512 VNNI + VBMI.
//
// Per step, 64 bytes (4 blocks) of a row of B: vpermb decodes both nibbles to biased int8
// through a 16-entry table repeated 4 times (so the high bits of the index need no masking), and
// vpdpbusd multiplies them by the matching even and odd elements of A (pre-split per block): each
// 128-bit lane j of the result holds 4 int32 partial sums whose total is block j's exact dot
// product isum.
//
// Accumulation, exactly (as in gemm_vnni.cpp): blocks go in chunks of up to 64. When, over a
// chunk, (max - min of the A row's scale bytes) + (max - min of the B row's) <= 12 and no scale
// byte is 0xFF, every partial-sum lane is shifted left by (sa - min sa) + (sb - min sb) and
// accumulated in int32 without being reduced; once per chunk the 16 lanes are added up. The
// true chunk sum is below 64 * 4608 * 2^12 < 2^31, and int32 arithmetic is exact modulo 2^32, so
// the sum is exact; it reaches the row's double accumulator as one exact product
// sum * 2^(min sa - 128) * 2^(min sb - 128), with one rounding. Other chunks go block by block,
// each exact partial isum * 2^(sa - 128) * 2^(sb - 128) added in K order, as the reference does.
// So the result is within the reference's error bound, and bit-identical to it whenever the
// reference's double sum is exact. NaN scales are handled once per row.
#include "backends/cpu/x86_intrinsics.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/decode_tables.h"
#include "backends/cpu/epilogue.h"
#include "backends/cpu/fast.h"
#include "backends/cpu/pack.h"
#include "numerics/mx.h"
#include "numerics/weight_layout.h"

namespace a4w4::cpu {
namespace {

constexpr int64_t kMaxRows = 4;   // M <= 4
constexpr int kChunkBlocks = 64;  // blocks per integer chunk
constexpr int kMaxShift = 12;     // 64 * 4608 * 2^12 < 2^31
// Steps of 4 blocks that a row's codes are prefetched ahead: a prepared (version 2) row's runs are
// 1 KB apart, which the hardware prefetchers do not follow (1 x 8192 x 8192: 10-20% faster).
constexpr int kPrefetchSteps = 8;

// One chunk of blocks [begin, begin + count) and what the kernel needs of A for it.
struct Chunk {
  int64_t begin;
  int count;
  bool last_of_partition;
  bool integer_ok;  // A's scale spread leaves room and A has no NaN scale here
  int a_spread;
  uint8_t a_min[kMaxRows];
  alignas(64) uint8_t a_shift[kMaxRows][kChunkBlocks];  // sa - min sa, per block of the chunk
};

// A split into what the kernel loads: per row and block, the 16 even and the 16 odd elements
// (signed 2*E2M1) and the correction -12 * sum(2a) in lane 0 of 4; the scale bytes; the chunks
// (split-K partitions cut into pieces of up to kChunkBlocks blocks).
struct GemvA {
  int64_t m;
  std::vector<int8_t> even, odd;  // [m][blocks * 16]
  std::vector<int32_t> corr;      // [m][blocks * 4]
  std::vector<uint8_t> scale;     // [m][blocks]
  std::vector<Chunk> chunks;
  bool chunks_tile_aligned;  // every chunk starts on a K tile (4 blocks): split-K permitting
  bool nan[kMaxRows];
};

void split_a(const GemmProblem& p, int64_t blocks, int64_t splits, GemvA& a) {
  a.m = p.m;
  a.even.assign(static_cast<size_t>(p.m * blocks * 16), 0);
  a.odd.assign(a.even.size(), 0);
  a.corr.assign(static_cast<size_t>(p.m * blocks * 4), 0);
  a.scale.assign(static_cast<size_t>(p.m * blocks), 0);
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
      a.scale[m * blocks + b] = sa[b];
      a.nan[m] = a.nan[m] || sa[b] == numerics::kScaleNaN;
    }
  }
  a.chunks.clear();
  a.chunks_tile_aligned = true;
  for (int64_t part = 0; part < splits; ++part) {
    // Split-K partition `part` covers blocks [part*B/splits, (part+1)*B/splits).
    const int64_t b_begin = part * blocks / splits, b_end = (part + 1) * blocks / splits;
    for (int64_t c0 = b_begin; c0 < b_end; c0 += kChunkBlocks) {
      Chunk c{};
      c.begin = c0;
      a.chunks_tile_aligned = a.chunks_tile_aligned && c0 % layout::kTileBlocks == 0;
      c.count = static_cast<int>(std::min<int64_t>(kChunkBlocks, b_end - c0));
      c.last_of_partition = c0 + kChunkBlocks >= b_end;
      c.integer_ok = true;
      for (int64_t m = 0; m < p.m; ++m) {
        const uint8_t* sa = a.scale.data() + m * blocks + c0;
        const auto [lo, hi] = std::minmax_element(sa, sa + c.count);
        c.a_min[m] = *lo;
        c.a_spread = std::max(c.a_spread, *hi - *lo);
        c.integer_ok = c.integer_ok && *hi != numerics::kScaleNaN;
        for (int i = 0; i < c.count; ++i) c.a_shift[m][i] = static_cast<uint8_t>(sa[i] - *lo);
      }
      c.integer_ok = c.integer_ok && c.a_spread <= kMaxShift;
      a.chunks.push_back(c);
    }
  }
}

struct GemvArgs {
  const GemmProblem* p;
  const GemvA* a;
  int64_t blocks;
  double* out;  // [m][n] block-partial sums (NaN where the contract says so)
};

// kShiftIndex[s] picks, for the int32 lane (block j, part l) of step s of a chunk, byte 4s + j of
// the chunk's per-block shift bytes (used with a zeroing mask that keeps byte 0 of each dword, so
// the pick is zero-extended to the lane).
alignas(64) constexpr auto kShiftIndex = [] {
  std::array<std::array<uint8_t, 64>, kChunkBlocks / 4> t{};
  for (int s = 0; s < kChunkBlocks / 4; ++s)
    for (int byte = 0; byte < 64; ++byte) t[s][byte] = static_cast<uint8_t>(4 * s + byte / 16);
  return t;
}();
constexpr __mmask64 kDwordLowBytes = 0x1111111111111111ull;

#define A4W4_TARGET_GEMV \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")))

// Where one row of B's codes lies: block b at base + (b / 4) * tile_stride + (b % 4) * 16. A plain
// row is contiguous (tile_stride 64); a prepared (version 2) row is read in place from its tiles'
// 64-byte runs, 1 KB apart (numerics/weight_layout.h). Steps of 4 blocks start on a multiple of 4.
struct RowCodes {
  const uint8_t* base;
  int64_t tile_stride;
  const uint8_t* step(int64_t b) const { return base + (b / 4) * tile_stride + (b % 4) * 16; }
};

// Blocks b .. b + nb - 1 (nb <= 4) of one row of B decoded to biased int8 (even elements in lo,
// odd ones in hi; missing blocks decode as zeros), and the masks of the loads.
struct Decoded {
  __m512i lo, hi;
  __mmask64 byte_mask;
  __mmask16 dword_mask;
};

A4W4_TARGET_GEMV inline Decoded decode(const RowCodes& brow, int64_t b, int nb) {
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1Biased.data())));
  Decoded d;
  d.byte_mask = nb == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * nb)) - 1;
  d.dword_mask = static_cast<__mmask16>(nb == 4 ? 0xFFFF : (1u << (4 * nb)) - 1);
  const __m512i x = _mm512_maskz_loadu_epi8(d.byte_mask, brow.step(b));
  d.lo = _mm512_permutexvar_epi8(x, table);
  d.hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(x, 4), table);
  return d;
}

// The 4 int32 partial sums per block (lane 4j + l) against A row m, correction included.
A4W4_TARGET_GEMV inline __m512i dot(const GemvArgs& g, const Decoded& d, int64_t m, int64_t b) {
  const GemvA& a = *g.a;
  const int64_t base = m * g.blocks + b;
  const __m512i even = _mm512_maskz_loadu_epi8(d.byte_mask, a.even.data() + base * 16);
  const __m512i odd = _mm512_maskz_loadu_epi8(d.byte_mask, a.odd.data() + base * 16);
  const __m512i corr = _mm512_maskz_loadu_epi32(d.dword_mask, a.corr.data() + base * 4);
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, d.lo, even), d.hi, odd);
}

// Mask of the first `count` (<= 64) bytes.
inline __mmask64 first_bytes(int count) {
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

// Min and max of the first `count` bytes at p (count <= 64).
A4W4_TARGET_GEMV inline void min_max(const uint8_t* p, int count, int& lo, int& hi) {
  const __mmask64 mask = first_bytes(count);
  // Both in one min: max(v) = 255 - min(255 - v); missing bytes read as 0xFF in both halves.
  const __m512i v = _mm512_mask_loadu_epi8(_mm512_set1_epi8(-1), mask, p);
  const __m512i inverted = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, p), _mm512_set1_epi8(-1));
  const __m512i both =
      _mm512_min_epu8(_mm512_unpacklo_epi64(v, inverted), _mm512_unpackhi_epi64(v, inverted));
  __m256i t = _mm256_min_epu8(_mm512_castsi512_si256(both), _mm512_extracti64x4_epi64(both, 1));
  t = _mm256_min_epu8(t, _mm256_permute2x128_si256(t, t, 1));
  // Now qword 0 holds 8 candidates for the min, qword 1 for 255 - max.
  t = _mm256_min_epu8(t, _mm256_srli_epi64(t, 32));
  t = _mm256_min_epu8(t, _mm256_srli_epi64(t, 16));
  t = _mm256_min_epu8(t, _mm256_srli_epi64(t, 8));
  const __m128i r = _mm256_castsi256_si128(t);
  lo = _mm_extract_epi8(r, 0);
  hi = 255 - _mm_extract_epi8(r, 8);
}

// The steps of a whole integer chunk for kR rows of B at once (A's loads shared), unrolled: no
// masks, constant offsets.
template <int kM, int kR>
A4W4_TARGET_GEMV inline void full_integer_chunk(const GemvArgs& g, const RowCodes (&brow)[kR],
                                                int64_t c0, const __m512i shifts[kR][kM],
                                                __m512i acc[kR][kM]) {
  const GemvA& a = *g.a;
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1Biased.data())));
  const int8_t* even[kM];
  const int8_t* odd[kM];
  const int32_t* corr[kM];
  const uint8_t* codes[kR];
  for (int r = 0; r < kR; ++r) codes[r] = brow[r].step(c0);
  for (int m = 0; m < kM; ++m) {
    even[m] = a.even.data() + (m * g.blocks + c0) * 16;
    odd[m] = a.odd.data() + (m * g.blocks + c0) * 16;
    corr[m] = a.corr.data() + (m * g.blocks + c0) * 4;
  }
#pragma GCC unroll 2  // fully unrolled, the shift indices crowd out the accumulators
  for (int s = 0; s < kChunkBlocks / 4; ++s) {
    __m512i lo[kR], hi[kR];
    for (int r = 0; r < kR; ++r) {
      _mm_prefetch(
          reinterpret_cast<const char*>(codes[r] + brow[r].tile_stride * (s + kPrefetchSteps)),
          _MM_HINT_T0);
      const __m512i x = _mm512_loadu_si512(codes[r] + brow[r].tile_stride * s);
      lo[r] = _mm512_permutexvar_epi8(x, table);
      hi[r] = _mm512_permutexvar_epi8(_mm512_srli_epi16(x, 4), table);
    }
    const __m512i index = _mm512_load_si512(kShiftIndex[s].data());
    for (int m = 0; m < kM; ++m) {
      const __m512i e = _mm512_loadu_si512(even[m] + 64 * s);
      const __m512i o = _mm512_loadu_si512(odd[m] + 64 * s);
      const __m512i k = _mm512_loadu_si512(corr[m] + 16 * s);
      for (int r = 0; r < kR; ++r) {
        const __m512i dot4 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(k, lo[r], e), hi[r], o);
        const __m512i shift = _mm512_maskz_permutexvar_epi8(kDwordLowBytes, index, shifts[r][m]);
        acc[r][m] = _mm512_add_epi32(acc[r][m], _mm512_sllv_epi32(dot4, shift));
      }
    }
  }
}

// Shift bytes (sb - min sb) + (sa - min sa) per block of chunk c for one row of B.
template <int kM>
A4W4_TARGET_GEMV inline void chunk_shifts(const Chunk& c, const uint8_t* srow, int b_min,
                                          __m512i shifts[kM]) {
  const __m512i db = _mm512_sub_epi8(_mm512_maskz_loadu_epi8(first_bytes(c.count), srow + c.begin),
                                     _mm512_set1_epi8(static_cast<char>(b_min)));
  for (int m = 0; m < kM; ++m) shifts[m] = _mm512_add_epi8(db, _mm512_load_si512(c.a_shift[m]));
}

// partial[m] += the exact chunk sum in acc[m] times 2^(min sa + min sb - 256), one rounding.
template <int kM>
A4W4_TARGET_GEMV inline void flush(const Chunk& c, int b_min, const __m512i acc[kM],
                                   double partial[kM]) {
  const double rb = kHalfScale[b_min];
  for (int m = 0; m < kM; ++m) {
    const double chunk_sum = _mm512_reduce_add_epi32(acc[m]);
    partial[m] += chunk_sum * (kHalfScale[c.a_min[m]] * rb);  // exact product, one rounding
  }
}

// Chunk c of one row of B on its own: integer steps with masks where `integer`, else block by
// block in K order, as the reference.
template <int kM>
A4W4_TARGET_GEMV void row_chunk(const GemvArgs& g, const RowCodes& brow, const uint8_t* srow,
                                const Chunk& c, int b_min, bool integer, double partial[kM]) {
  const GemvA& a = *g.a;
  if (integer) {
    __m512i shifts[kM], acc[kM];
    chunk_shifts<kM>(c, srow, b_min, shifts);
    for (auto& v : acc) v = _mm512_setzero_si512();
    for (int s = 0; 4 * s < c.count; ++s) {
      const int64_t b = c.begin + 4 * s;
      const Decoded d = decode(brow, b, std::min(4, c.count - 4 * s));
      const __m512i index = _mm512_load_si512(kShiftIndex[s].data());
      for (int m = 0; m < kM; ++m) {
        const __m512i shift = _mm512_maskz_permutexvar_epi8(kDwordLowBytes, index, shifts[m]);
        acc[m] = _mm512_add_epi32(acc[m], _mm512_sllv_epi32(dot(g, d, m, b), shift));
      }
    }
    flush<kM>(c, b_min, acc, partial);
    return;
  }
  for (int s = 0; 4 * s < c.count; ++s) {
    const int64_t b = c.begin + 4 * s;
    const int nb = std::min(4, c.count - 4 * s);
    const Decoded d = decode(brow, b, nb);
    for (int m = 0; m < kM; ++m) {
      __m512i x = dot(g, d, m, b);
      x = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));
      x = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_PERM_CDAB));  // lane 4j: isum_j
      alignas(64) int32_t isum[16];
      _mm512_store_si512(isum, x);
      for (int j = 0; j < nb; ++j)
        partial[m] += static_cast<double>(isum[4 * j]) *
                      (kHalfScale[a.scale[m * g.blocks + b + j]] * kHalfScale[srow[b + j]]);
    }
  }
}

// Rows n .. n + kR - 1 of B (two neighbouring rows share A's loads) against the kM rows of A:
// out[m][n + r]. Rows past N repeat the last row and are discarded.
template <int kM, int kR>
A4W4_TARGET_GEMV void gemv_rows(const GemvArgs& g, int64_t n) {
  const GemmProblem& p = *g.p;
  const GemvA& a = *g.a;
  RowCodes brow[kR];
  const uint8_t* srow[kR];
  // A prepared (version 2) B: the codes are read in place from the tiles (or, where a split-K
  // partition starts inside a K tile, gathered into plain rows) and the rows' scale words gathered,
  // into this thread's buffer, so that the loops below read plain scale rows.
  thread_local std::vector<uint8_t> gathered;
  const int64_t k_tiles = layout::k_tiles(p.k);
  const bool tiled = p.b.layout == A4W4_LAYOUT_PREPARED_V2;
  const bool in_place = a.chunks_tile_aligned;
  const int64_t code_bytes = in_place ? 0 : k_tiles * layout::kRowRunBytes;
  const int64_t gathered_row = code_bytes + k_tiles * layout::kTileBlocks;
  if (tiled) gathered.resize(static_cast<size_t>(kR * gathered_row));
  for (int r = 0; r < kR; ++r) {
    const int64_t row = std::min<int64_t>(n + r, p.n - 1);
    if (tiled) {
      uint8_t* codes = gathered.data() + r * gathered_row;
      uint8_t* scales = codes + code_bytes;
      gather_tiled_row(p.b, row, k_tiles, in_place ? nullptr : codes, scales);
      brow[r] = in_place ? RowCodes{p.b.data + layout::row_run_offset(row, 0, k_tiles),
                                    layout::kTileBytes}
                         : RowCodes{codes, layout::kRowRunBytes};
      srow[r] = scales;
    } else {
      brow[r] = {p.b.data + row * p.b.stride_bytes, layout::kRowRunBytes};
      srow[r] = p.b.scale + row * p.b.scale_stride;
    }
  }
  double total[kR][kM] = {}, partial[kR][kM] = {};
  bool nan_row[kR] = {};
  for (const Chunk& c : a.chunks) {
    int b_min[kR], b_max[kR];
    bool integer[kR];
    bool all_integer = c.count == kChunkBlocks;
    for (int r = 0; r < kR; ++r) {
      min_max(srow[r] + c.begin, c.count, b_min[r], b_max[r]);
      nan_row[r] = nan_row[r] || b_max[r] == numerics::kScaleNaN;
      integer[r] = c.integer_ok && b_max[r] != numerics::kScaleNaN &&
                   c.a_spread + (b_max[r] - b_min[r]) <= kMaxShift;
      all_integer = all_integer && integer[r];
    }
    if (all_integer) {
      __m512i shifts[kR][kM], acc[kR][kM];
      for (int r = 0; r < kR; ++r) {
        chunk_shifts<kM>(c, srow[r], b_min[r], shifts[r]);
        for (auto& v : acc[r]) v = _mm512_setzero_si512();
      }
      full_integer_chunk<kM, kR>(g, brow, c.begin, shifts, acc);
      for (int r = 0; r < kR; ++r) flush<kM>(c, b_min[r], acc[r], partial[r]);
    } else {
      for (int r = 0; r < kR; ++r)
        row_chunk<kM>(g, brow[r], srow[r], c, b_min[r], integer[r], partial[r]);
    }
    if (c.last_of_partition) {
      for (int r = 0; r < kR; ++r)
        for (int m = 0; m < kM; ++m) {
          total[r][m] += partial[r][m];
          partial[r][m] = 0.0;
        }
    }
  }
  for (int r = 0; r < kR && n + r < p.n; ++r)
    for (int m = 0; m < kM; ++m)
      g.out[m * p.n + n + r] =
          nan_row[r] || a.nan[m] ? std::numeric_limits<double>::quiet_NaN() : total[r][m];
}

constexpr int kRowsPerStep = 2;
using RowKernel = void (*)(const GemvArgs&, int64_t);
constexpr RowKernel kRowKernels[kMaxRows] = {gemv_rows<1, kRowsPerStep>, gemv_rows<2, kRowsPerStep>,
                                             gemv_rows<3, kRowsPerStep>,
                                             gemv_rows<4, kRowsPerStep>};

}  // namespace

std::string gemv_avx512_vnni_why_not(const GemmProblem& p) {
  if (!isa_supported(Isa::kAvx512Vnni)) return "the CPU lacks AVX-512 VNNI/VBMI";
  if (p.m > kMaxRows) return "M > 4 (the GEMV path takes M <= 4)";
  if (p.b.layout != A4W4_LAYOUT_PLAIN && p.b.layout != A4W4_LAYOUT_PREPARED_V2)
    return "B is in prepared layout version 1 (the GEMV path reads plain or version-2 rows)";
  return {};
}

void gemv_avx512_vnni(const GemmProblem& p, const ExecConfig& exec) {
  const int64_t blocks = p.k / numerics::kBlockSize;
  GemvA a;
  split_a(p, blocks, std::max<int64_t>(p.split_k, 1), a);
  std::vector<double> out(static_cast<size_t>(p.m * p.n));
  const GemvArgs args{&p, &a, blocks, out.data()};
#pragma omp parallel num_threads(std::max(1, exec.num_threads))
  {
    // Chunks of 128 rows (512 KiB of B at K = 8192), handed out dynamically so that a thread
    // slowed down by other work does not hold the others up.
#pragma omp for schedule(dynamic, 64)
    for (int64_t step = 0; step < (p.n + kRowsPerStep - 1) / kRowsPerStep; ++step)
      kRowKernels[p.m - 1](args, step * kRowsPerStep);
      // The epilogue runs here, in code compiled without FMA contraction, as in the reference.
#pragma omp for schedule(static)
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t m = 0; m < p.m; ++m)
        store_output(p, m, n, out[static_cast<size_t>(m * p.n + n)]);
  }
}

}  // namespace a4w4::cpu
