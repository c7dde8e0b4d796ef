// Folding MX block scales into int8 tensor-core operands, shared by the decode family
// (gemm_decode.cu, mma.sync), the skinny family (gemm_skinny.cu) and the int8 wgmma family
// (gemm_int8.cu).
//
// 2 * E2M1 is an integer in [-12, 12]. Inside one K tile of 128 (4 blocks of 32) a row's blocks are
// shifted by d = scale - base, base = the row's smallest scale in the tile; when every d <= 3,
// |2 * E2M1 * 2^d| <= 96 fits int8, so one chain of int8 MMAs sums the whole tile exactly in int32
// (|sum| <= 128 * 96 * 96 < 2^21). The tile sum is then scaled once by 2^(base_a + base_b - 256)
// (the 1/4 undoes the doubling of both operands) and accumulated in fp32: exact products when the
// factors and the products stay in fp32's normal range (fp32_accumulation_safe). Tiles with a
// wider spread, a NaN scale (0xFF) or outside that range take an exact slower path.
#pragma once

#include <cstdint>

#include "backends/cuda/device_common.cuh"
#include "dispatch/problem.h"
#include "numerics/int8_fold_rules.h"

namespace a4w4::cuda::fold {

// Largest per-block shift folded into the int8 operands (the magnitude tables, kMagnitudesLo/Hi in
// device_common.cuh, shifted left by d).
inline constexpr uint32_t kMaxShift = fold_rules::kMaxShift;

// A row's K tile (its 4 scale bytes, block j in byte j) folded relative to its smallest scale: the
// per-block shifts (one per byte) and whether they all fit kMaxShift with no NaN (0xFF) block.
struct FoldedRow {
  uint32_t base, shifts;
  bool ok;
};
[[maybe_unused]] __device__ __forceinline__ FoldedRow fold_row(uint32_t scales) {
  // The middle bytes by one PRMT each (ptxas makes a shift and a mask of `>> 8 & 0xFF`).
  const uint32_t s0 = scales & 0xFFu, s1 = __byte_perm(scales, 0u, 0x4441u),
                 s2 = __byte_perm(scales, 0u, 0x4442u), s3 = scales >> 24;
  FoldedRow row;
  row.base = min(min(s0, s1), min(s2, s3));
  row.shifts = scales - row.base * 0x01010101u;  // no borrows: every byte >= base
  row.ok = (row.shifts & 0xFCFCFCFCu) == 0 && row.base <= 0xFFu - 1 - kMaxShift;
  return row;
}

// Fast accumulation (A4W4_MATH_FAST_ACCUM, cuda.skinny's 128-row token tiles): the operands
// become FP8 e4m3 2 * E2M1 * 2^d, d = scale - base in [kFastMinShift, kFastMaxShift], base = the
// largest scale of the row's set - kFastMaxShift. The doubled magnitudes {1, ..., 12} * 2^d then
// lie between e4m3's smallest normal (2^-6) and 384 (below its largest, 448): every value is exact.
inline constexpr int kFastMaxShift = 5, kFastMinShift = -6;
// The e4m3 bytes of the doubled magnitudes {0, 1, 2, 3, 4, 6, 8, 12} (d = 0).
inline constexpr uint32_t kE4m3DoubledLo = 0x44403800u, kE4m3DoubledHi = 0x54504C48u;
struct E4m3Table {
  uint32_t lo, hi;
};
// That table times 2^d, d in [kFastMinShift, kFastMaxShift]: d added to the exponent field (bits
// 3..6) of every nonzero byte, with no borrow or carry between bytes (0x38 - 6 * 8 = 0x08, 2^-6;
// 0x54 + 5 * 8 = 0x7C, 384).
[[maybe_unused]] __device__ __forceinline__ E4m3Table e4m3_table(int d) {
  const uint32_t step = static_cast<uint32_t>(d);
  return {kE4m3DoubledLo + step * 0x08080800u, kE4m3DoubledHi + step * 0x08080808u};
}
// A row's base for the fast path from the smallest and largest of its block scales (and whether one
// is NaN): every shift fits when hi - lo <= kFastMaxShift - kFastMinShift.
struct FastRow {
  uint32_t base;
  bool ok;
};
[[maybe_unused]] __device__ __forceinline__ FastRow fast_row(uint32_t lo, uint32_t hi, bool nan) {
  const int base = static_cast<int>(hi) - kFastMaxShift;
  return {static_cast<uint32_t>(base > 0 ? base : 0),
          !nan && static_cast<int>(lo) >= base + kFastMinShift && base >= 1};
}
// The smallest and largest of a row's block scales over several K tiles' scale words (block j
// of a tile in byte j), as fast_row's base.
struct FastRange {
  uint32_t lo4 = 0xFFFFFFFFu, hi4 = 0;  // per byte lane
  __device__ __forceinline__ void add(uint32_t scales) {
    lo4 = __vminu4(lo4, scales), hi4 = __vmaxu4(hi4, scales);
  }
  // With another thread's range (the lanes `mask` apart).
  __device__ __forceinline__ void add_lane(int mask) {
    lo4 = __vminu4(lo4, __shfl_xor_sync(0xFFFFFFFFu, lo4, mask));
    hi4 = __vmaxu4(hi4, __shfl_xor_sync(0xFFFFFFFFu, hi4, mask));
  }
  __device__ __forceinline__ FastRow row() const {
    const uint32_t lo =
        min(min(lo4 & 0xFFu, (lo4 >> 8) & 0xFFu), min((lo4 >> 16) & 0xFFu, lo4 >> 24));
    const uint32_t hi =
        max(max(hi4 & 0xFFu, (hi4 >> 8) & 0xFFu), max((hi4 >> 16) & 0xFFu, hi4 >> 24));
    return fast_row(lo, hi, hi == 0xFFu);
  }
};

// fold_row's rule for a row whose scales lie in [lo, hi] (numerics/int8_fold_rules.h).
using fold_rules::range_folds;

// An int32 sum (|x| < 2^22) as fp32 without the quarter-rate I2F: added to 1.5 * 2^23 it lands
// exactly on an integer of that binade (cuda.gemv's block sums, whose factors vary per block).
[[maybe_unused]] __device__ __forceinline__ float small_int_to_float(int32_t a) {
  return __int_as_float(0x4B400000 + a) - 12582912.0f;
}

// A tile sum (|sum| < 2^22; a tile's is at most 128 * 96 * 96 < 2^21) times a weight row's factor
// 2^(base - 129) as fp32, exactly, in two instructions and without the quarter-rate I2F: the sum
// added to the bits of 1.5 * 2^(base - 106) lands on that binade's grid of spacing 2^(base - 129),
// and the constant is subtracted again. The constant is a finite normal fp32 for
// base <= kMaxScaledTileSumBase (callers send larger bases to their exact paths), and the result
// is normal for base >= 3 (fp32_accumulation_safe).
inline constexpr uint32_t kMaxScaledTileSumBase = 233;
struct TileSumScale {
  uint32_t magic;  // the bits of 1.5 * 2^(base - 106)
  float offset;    // its value
  __device__ __forceinline__ explicit TileSumScale(uint32_t base) {
    // (base + 21) << 23 | 0x400000 as one shift-and-add (LEA; the or became a second add).
    magic = (base << 23) + (21u << 23 | 0x400000u);
    offset = __uint_as_float(magic);
  }
  __device__ __forceinline__ float operator()(int32_t a, int32_t b = 0) const {
    return __uint_as_float(magic + a - b) - offset;
  }
  // The same for the sum of one accumulator set (|a| < 2^22): magic + a is (a's low 23 bits) xor
  // magic — magic's low 22 bits are 0 and its bit 22 is 1, and a's two's complement in 23 bits
  // toggles bit 22 exactly as adding 2^22 would — one LOP3 on the integer pipe instead of an add
  // that ptxas issues as IMAD on the FMA pipe, which the FADD and FFMA of the promotion need.
  __device__ __forceinline__ float single(int32_t a) const {
    uint32_t bits;
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(bits) : "r"(a), "r"(0x7FFFFFu), "r"(magic));
    return __uint_as_float(bits) - offset;
  }
};

// Whether tile sums can be scaled and accumulated in fp32 without leaving its normal range, given
// the smallest and largest base exponents of A (lo, hi) and B: 2^(ea - 127) and 2^(eb - 129)
// normal, the smallest nonzero term 2^(ea + eb - 256) at least 2^-126, and 2^24 tiles of the
// largest (|sum| < 2^20.2) below 2^127.
[[maybe_unused]] __device__ __forceinline__ bool fp32_accumulation_safe(uint32_t a_lo,
                                                                        uint32_t a_hi,
                                                                        uint32_t b_lo,
                                                                        uint32_t b_hi) {
  return a_lo >= 1 && b_lo >= 3 && a_lo + b_lo >= 130 && a_hi + b_hi <= 330;
}

// fp32_accumulation_safe for a kernel that promotes with TileSumScale: also every weight base
// within the range of its constant (cuda.decode; cuda.skinny states the same rule as bounds on the
// weight base in its activation records).
[[maybe_unused]] __device__ __forceinline__ bool tile_sum_scale_safe(uint32_t a_lo, uint32_t a_hi,
                                                                     uint32_t b_lo, uint32_t b_hi) {
  return fp32_accumulation_safe(a_lo, a_hi, b_lo, b_hi) && b_hi <= kMaxScaledTileSumBase;
}

// What a set of (row, 128-K tile)s folded to (numerics/int8_fold_rules.h).
using fold_rules::FoldSummary;

// A 128 x 128 tile of D takes the int8 family's folded path when neither its A rows nor its B rows
// have a tile that does not fold and fp32's range holds for their bases (the summaries of their
// 128-row blocks); the bf16 family runs the other tiles of the same call (gemm_bf16.cu), so both
// read this one rule.
struct StagedVerdicts {
  const uint32_t* a_blocks;  // nullptr: no staged operands (every tile is the caller's)
  const uint32_t* b_blocks;
  __device__ __forceinline__ bool folds(int64_t m0, int64_t n0) const {
    FoldSummary a, b;
    a.add(a_blocks[m0 / 128]), b.add(b_blocks[n0 / 128]);
    return (a.bad | b.bad) == 0 && fp32_accumulation_safe(a.lo, a.hi, b.lo, b.hi);
  }
  // Whether some 128 x 128 tile of an m x n D may not fold (one warp calls it; every lane gets
  // the answer): the blocks' summaries combined — no block with a tile that does not fold and
  // fp32's range holding for the extreme bases of A and of B mean every tile folds.
  __device__ __forceinline__ bool any_unfolded(int64_t m, int64_t n) const {
    const unsigned lane = threadIdx.x % 32;
    FoldSummary a, b;
    for (int64_t i = lane; i < (m + 127) / 128; i += 32) a.add(a_blocks[i]);
    for (int64_t i = lane; i < (n + 127) / 128; i += 32) b.add(b_blocks[i]);
    const uint32_t bad = __reduce_or_sync(0xFFFFFFFFu, a.bad | b.bad);
    return bad != 0 || !fp32_accumulation_safe(__reduce_min_sync(0xFFFFFFFFu, a.lo),
                                               __reduce_max_sync(0xFFFFFFFFu, a.hi),
                                               __reduce_min_sync(0xFFFFFFFFu, b.lo),
                                               __reduce_max_sync(0xFFFFFFFFu, b.hi));
  }
};

// The PRMT tables of one block folded with shift d (0..3): 2 * |E2M1| * 2^d for codes 0..7 (pos)
// and their negations as int8 (neg; code 0 stays 0, so -0 gives 0). Every shifted magnitude is at
// most 96, so no byte carries into the next, and the negations' bytes are 256 - x with x >= 1.
struct BlockTables {
  uint32_t pos_lo, pos_hi, neg_lo, neg_hi;
};
[[maybe_unused]] __device__ __forceinline__ BlockTables block_tables(uint32_t shift) {
  BlockTables t;
  t.pos_lo = kMagnitudesLo << shift;
  t.pos_hi = kMagnitudesHi << shift;
  t.neg_lo = (~t.pos_lo & 0xFFFFFF00u) + 0x01010100u;
  t.neg_hi = ~t.pos_hi + 0x01010101u;
  return t;
}

// Eight E2M1 codes (element i in nibble i) -> eight int8 (two words, elements 0..3 and 4..7): a
// PRMT looks up four magnitudes in pos and four in neg, and a third picks neg where the code's
// sign bit (bit 3 of its nibble) is set.
[[maybe_unused]] __device__ __forceinline__ uint2 to_s8x8(uint32_t codes, const BlockTables& t) {
  const uint32_t index = codes & 0x77777777u;
  // select = ((codes >> 1) & 0x44444444) | 0x32103210 in one LOP3 (nvcc emits two).
  uint32_t select;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;"
      : "=r"(select)
      : "r"(codes >> 1), "r"(0x44444444u), "r"(0x32103210u));
  const uint32_t p0 = permute(t.pos_lo, t.pos_hi, index), n0 = permute(t.neg_lo, t.neg_hi, index);
  const uint32_t p1 = permute(t.pos_lo, t.pos_hi, index >> 16),
                 n1 = permute(t.neg_lo, t.neg_hi, index >> 16);
  return make_uint2(permute(p0, n0, select), permute(p1, n1, select >> 16));
}

// Unsigned int8 MMA operands of 8 codes of each of two rows g and g + 8 (one word each, element i
// in nibble i): w+ and w- (PRMT's sign mode zeroes the other sign) in the m16n8k32 A fragment's
// order — positive[0], [2]: row g's elements 0..3, 4..7; [1], [3]: row g + 8's — from the
// magnitude table shifted by each row's d (cuda.decode's mma.sync, cuda.skinny's wgmma).
struct WeightBlock {
  uint32_t positive[4], negative[4];
};
[[maybe_unused]] __device__ __forceinline__ void split_row(uint32_t codes, uint32_t table_lo,
                                                           uint32_t table_hi, uint32_t& pos_first,
                                                           uint32_t& pos_second,
                                                           uint32_t& neg_first,
                                                           uint32_t& neg_second) {
  const uint32_t flipped = codes ^ 0x88888888u;
  pos_first = permute(table_lo, table_hi, codes);
  pos_second = permute(table_lo, table_hi, codes >> 16);
  neg_first = permute(table_lo, table_hi, flipped);
  neg_second = permute(table_lo, table_hi, flipped >> 16);
}
// The magnitude table shifted left by `shift` mod 32: a row's shifts word moved right by 8 j
// serves as block j's shift without masking the higher bytes off (a folded row's d <= 3 leaves
// bits 2..7 of each byte zero; a row that does not fold never reaches the fast path).
[[maybe_unused]] __device__ __forceinline__ uint32_t shifted_table(uint32_t table, uint32_t shift) {
  return __funnelshift_l(0u, table, shift);
}
// split_row with its selectors on the FMA pipe, which the integer pipe's lookups leave idle (the
// integer pipe takes two cycles per warp instruction on sm_90): x >> 16 is IMAD.HI, ~x and
// ~(x >> 16) are IMAD(x, all_ones, all_ones) — all_ones a kernel argument, so that ptxas cannot
// turn them back into LOP3s — and the negative part is looked up in the reversed table with ~x,
// whose flipped sign bit zeroes the positive codes (the permute's sign mode) and whose magnitude
// bits read 7 - m. The shifted tables are IMADs by 2^d too. Only the PRMTs stay on the integer
// pipe: 4 instructions per 8 codes there instead of 7.
constexpr uint32_t byte_reversed(uint32_t x) {
  return x >> 24 | (x >> 8 & 0xFF00u) | (x << 8 & 0xFF0000u) | x << 24;
}
inline constexpr uint32_t kReversedMagnitudesLo = byte_reversed(kMagnitudesHi),
                          kReversedMagnitudesHi = byte_reversed(kMagnitudesLo);
[[maybe_unused]] __device__ __forceinline__ uint32_t multiply_add(uint32_t a, uint32_t b,
                                                                  uint32_t c) {
  uint32_t r;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
[[maybe_unused]] __device__ __forceinline__ uint32_t high_half(uint32_t a) {
  uint32_t r;  // a >> 16 as IMAD.HI (nvcc would make a shift of __umulhi)
  asm("mul.hi.u32 %0, %1, 65536;" : "=r"(r) : "r"(a));
  return r;
}
[[maybe_unused]] __device__ __forceinline__ void split_row_fma(
    uint32_t codes, uint32_t shift, uint32_t all_ones, uint32_t& pos_first, uint32_t& pos_second,
    uint32_t& neg_first, uint32_t& neg_second) {
  const uint32_t scale = __funnelshift_l(0u, 1u, shift);  // 2^d (shift mod 32, as shifted_table)
  const uint32_t lo = kMagnitudesLo * scale, hi = kMagnitudesHi * scale,
                 rev_lo = kReversedMagnitudesLo * scale, rev_hi = kReversedMagnitudesHi * scale;
  const uint32_t second = high_half(codes);
  pos_first = permute(lo, hi, codes);
  pos_second = permute(lo, hi, second);
  neg_first = permute(rev_lo, rev_hi, multiply_add(codes, all_ones, all_ones));
  neg_second = permute(rev_lo, rev_hi, multiply_add(second, all_ones, all_ones));
}

// Rows g and g + 8 split into the fragment's order. kFmaSelectors: split_row_fma (all_ones: ~0u
// from a kernel argument), else split_row.
template <bool kFmaSelectors = false>
[[maybe_unused]] __device__ __forceinline__ WeightBlock weight_block(uint32_t row_g, uint32_t row_h,
                                                                     uint32_t shift_g,
                                                                     uint32_t shift_h,
                                                                     uint32_t all_ones = 0) {
  const auto split = [&](uint32_t codes, uint32_t shift, uint32_t& pos_first, uint32_t& pos_second,
                         uint32_t& neg_first, uint32_t& neg_second) {
    if constexpr (kFmaSelectors)
      split_row_fma(codes, shift, all_ones, pos_first, pos_second, neg_first, neg_second);
    else
      split_row(codes, shifted_table(kMagnitudesLo, shift), shifted_table(kMagnitudesHi, shift),
                pos_first, pos_second, neg_first, neg_second);
  };
  WeightBlock w;
  split(row_g, shift_g, w.positive[0], w.positive[2], w.negative[0], w.negative[2]);
  split(row_h, shift_h, w.positive[1], w.positive[3], w.negative[1], w.negative[3]);
  return w;
}

// The 4 scale bytes of K tile `tile` of a plain row (block 4 tile + j in byte j), blocks past
// `blocks` as fold_rules::padded_block. `words`: the scale rows allow 4-byte loads.
[[maybe_unused]] __device__ __forceinline__ uint32_t scale_word(const uint8_t* row_scales, int tile,
                                                                int blocks, bool words) {
  const uint8_t* s = row_scales + 4 * tile;
  if (words && 4 * tile + 4 <= blocks) return __ldg(reinterpret_cast<const uint32_t*>(s));
  uint32_t w = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (4 * tile + j < blocks) w |= static_cast<uint32_t>(__ldg(s + j)) << (8 * j);
  return fold_rules::padded_scale_word(w, blocks - 4 * tile);
}

// Whether op's scale rows allow the 4-byte loads of scale_word.
[[maybe_unused]] __device__ __forceinline__ bool scale_words(const PackedOperand& op) {
  return reinterpret_cast<uintptr_t>(op.scale) % 4 == 0 && op.scale_stride % 4 == 0;
}

}  // namespace a4w4::cuda::fold

namespace a4w4::cuda {
// The bf16 family's launch over the tiles `skip` says did not fold (gemm_bf16.cu), on the caller's
// device and stream, as a programmatic dependent of the kernel before it (it reads only the
// verdicts before it waits for that kernel).
void gemm_bf16_unfolded_tiles(const GemmProblem& p, const fold::StagedVerdicts& skip);
}  // namespace a4w4::cuda
