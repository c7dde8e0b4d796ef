// The device workspace of the staging GEMM kernels (cuda.int8_128x128): where each part lives and
// how large the whole is. Plain arithmetic, so that a4w4_gemm_workspace_size answers in every
// build.
#pragma once

#include <cstddef>
#include <cstdint>

#include "numerics/weight_layout.h"

namespace a4w4 {

// One operand of R rows staged for the int8 family (src/backends/cuda/gemm_int8.cu): its rows as
// folded int8 (K rounded up to whole 128-K tiles, padding zero), one fp32 factor per (K tile, row)
// for rows rounded up to `row_multiple` (a multiple of 128: B's to 384, so that the 192-row tiles
// of cuda.int8_128x192 read their factors and 128-row summaries inside it), one summary word per
// (chunk of 8 K tiles, row) — the smallest and largest base exponent, whether every tile folds,
// whether the chunk folds to one base — the same per 128 rows, and per (128 rows, chunk) whether
// every row of the block folds the chunk to one base with no high blocks (the GEMM then promotes
// its int32 sums once per chunk instead of once per K tile). With high blocks (A, whose outlier
// channels put a few blocks of a K tile far above the others): per (128 rows, K tile) a mask of the
// blocks kept apart, each on its own scale, and per (K tile, row) their 4 scale bytes. Without high
// blocks (B): per (K tile, row) the 4 blocks' shifts, for the kernel that converts B's codes itself
// (cuda.int8_bconv_128x128), unless `shifts` is false (a prepared weight's int8 form).
struct StagedOperandLayout {
  static constexpr int64_t kTileK = 128, kTileRows = 128, kChunkTiles = 8;
  static constexpr int64_t kAlign = 256;

  int64_t rows = 0, padded_rows = 0, padded_k = 0, k_tiles = 0, chunks = 0;
  // Byte offsets from the operand's start (high_scales and high_masks: 0 without high blocks,
  // shifts: 0 with them), and its size.
  int64_t values = 0, factors = 0, summaries = 0, block_summaries = 0, chunk_uniform = 0,
          high_scales = 0, high_masks = 0, shifts = 0, bytes = 0;

  static constexpr int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

  constexpr StagedOperandLayout(int64_t r, int64_t k, bool high_blocks, int64_t row_multiple,
                                bool with_shifts = true)
      : rows(r),
        padded_rows(round_up(r, row_multiple)),
        padded_k(round_up(k, kTileK)),
        k_tiles(round_up(k, kTileK) / kTileK),
        chunks((round_up(k, kTileK) / kTileK + kChunkTiles - 1) / kChunkTiles) {
    factors = round_up(rows * padded_k, kAlign);
    summaries = factors + round_up(k_tiles * padded_rows * 4, kAlign);
    block_summaries = summaries + round_up(chunks * rows * 4, kAlign);
    chunk_uniform = block_summaries + round_up(padded_rows / kTileRows * 4, kAlign);
    bytes = chunk_uniform + round_up(padded_rows / kTileRows * chunks * 4, kAlign);
    if (high_blocks) {
      high_scales = bytes;
      high_masks = high_scales + round_up(k_tiles * padded_rows * 4, kAlign);
      bytes = high_masks + round_up(padded_rows / kTileRows * k_tiles, kAlign);
    } else if (with_shifts) {
      shifts = bytes;
      bytes = shifts + round_up(k_tiles * padded_rows * 4, kAlign);
    }
  }
};

// A (with high blocks) and B staged one after the other.
struct StagingWorkspace {
  static constexpr int64_t kRowsA = StagedOperandLayout::kTileRows, kRowsB = 384;
  StagedOperandLayout a, b;
  int64_t b_offset, bytes;
  constexpr StagingWorkspace(int64_t m, int64_t n, int64_t k)
      : a(m, k, true, kRowsA),
        b(n, k, false, kRowsB),
        b_offset(a.bytes),
        bytes(a.bytes + b.bytes) {}
};

// A weight prepared as A4W4_LAYOUT_PREPARED_V2_INT8: version 2's tiles, then (256-byte aligned)
// B staged as above, once (values, factors, summaries; no shifts), so that the int8 family reads
// it instead of staging B in every call.
struct PreparedInt8Layout {
  StagedOperandLayout b;
  int64_t offset, bytes;  // where b starts in the weight buffer, and the buffer's size
  PreparedInt8Layout(int64_t n, int64_t k)
      : b(n, k, false, StagingWorkspace::kRowsB, false),
        offset(StagedOperandLayout::round_up(layout::prepared_weight_bytes(n, k),
                                             StagedOperandLayout::kAlign)),
        bytes(offset + b.bytes) {}
};

}  // namespace a4w4
