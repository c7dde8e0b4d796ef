// The int8 family's fold rules that both the CUDA staging pass (src/backends/cuda/gemm_int8.cu,
// int8_fold.cuh) and the CPU's making of a weight's int8 form (A4W4_LAYOUT_PREPARED_V2_INT8,
// src/backends/cpu/prepare_int8.cpp) apply, so that both write the same bytes.
#pragma once

#include <cstdint>

#include "numerics/host_device.h"

namespace a4w4::fold_rules {

// Largest per-block shift d = scale - base folded into an int8 operand: |2 * E2M1 * 2^3| <= 96.
inline constexpr uint32_t kMaxShift = 3;

// Whether a row's blocks whose scales lie in [lo, hi] fold to the base lo: every shift at most
// kMaxShift, the base at most 0xFF - 1 - kMaxShift (so no block is NaN); an empty range (lo > hi)
// folds.
A4W4_HOST_DEVICE bool range_folds(uint32_t lo, uint32_t hi) {
  return lo > hi || (hi - lo <= kMaxShift && lo <= 0xFFu - 1 - kMaxShift);
}

// The scale block that block j of K tile `tile` reads: blocks past K (the last tile of a K that is
// not a multiple of 128) repeat the tile's first block, so they neither widen the spread nor lower
// the base.
A4W4_HOST_DEVICE int64_t padded_block(int64_t tile, int j, int64_t blocks) {
  return 4 * tile + j < blocks ? 4 * tile + j : 4 * tile;
}

// A K tile's scale word (block j in byte j) of which only the first `present` (>= 1) bytes are
// blocks of K, the others set by padded_block's rule (present >= 4: the word as it is).
A4W4_HOST_DEVICE uint32_t padded_scale_word(uint32_t word, int64_t present) {
  if (present >= 4) return word;
  const uint32_t keep = 0xFFFFFFFFu >> (8 * (4 - present));
  return (word & keep) | ((word & 0xFFu) * 0x01010101u & ~keep);
}

// A fold summary as one word: bit 18 high blocks, bit 17 mixed (a chunk not folded to one base),
// bit 16 bad (a tile that does not fold), bits 15..8 the largest base, 7..0 the smallest.
A4W4_HOST_DEVICE uint32_t summary_word(uint32_t high, uint32_t mixed, uint32_t bad, uint32_t hi,
                                       uint32_t lo) {
  return high << 18 | mixed << 17 | bad << 16 | hi << 8 | lo;
}

// What a set of (row, 128-K tile)s folded to: whether any does not fold, whether any chunk of
// them did not fold to one base (mixed; the int8 family's chunks of 8 tiles), whether any tile
// has high blocks (kept apart on their own scales), the smallest and the largest base; stored as
// summary_word per (chunk, row) and per 128 rows in the int8 family's workspace (gemm_int8.cu)
// and in a weight's int8 form. add() combines such words.
struct FoldSummary {
  uint32_t bad = 0, mixed = 0, high = 0, lo = 0xFFu, hi = 0u;
  A4W4_HOST_DEVICE void add(uint32_t word) {
    bad |= (word >> 16) & 1u, mixed |= (word >> 17) & 1u, high |= has_high(word) ? 1u : 0u;
    const uint32_t word_lo = word & 0xFFu, word_hi = (word >> 8) & 0xFFu;
    lo = word_lo < lo ? word_lo : lo, hi = word_hi > hi ? word_hi : hi;
  }
  A4W4_HOST_DEVICE uint32_t word() const { return summary_word(high, mixed, bad, hi, lo); }
  static A4W4_HOST_DEVICE bool has_high(uint32_t word) { return (word >> 18) & 1u; }
};

// Where B's factor of row n lands: a consumer thread with q = lane % 4 needs the columns
// 8 j + 2 q + {0, 1} of its accumulators; this order puts those of j = 2 jj, 2 jj + 1 in one float4
// at 16 jj + 4 q, so the 4 addresses of one LDS.128 (q = 0..3) are 64 contiguous bytes (no bank
// conflicts; kTileN / 16 LDS.128 per step instead of kTileN / 8 LDS.64). It permutes within 16
// rows, so one staged order serves every tile width.
A4W4_HOST_DEVICE int64_t factor_slot(int64_t n) {
  return (n & ~int64_t{15}) | ((n >> 1) & 3) << 2 | ((n >> 3) & 1) << 1 | (n & 1);
}

}  // namespace a4w4::fold_rules
