// The int8 part of a weight prepared as A4W4_LAYOUT_PREPARED_V2_INT8, made on the host: the bytes
// the CUDA staging pass writes (gemm_int8.cu: stage_kernel's fold_tile and value conversion, then
// summarize_kernel), so that a weight prepared here can be copied to a GPU as it is. Layout:
// dispatch/workspace.h (PreparedInt8Layout); rules: numerics/int8_fold_rules.h.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "backends/cpu/reference.h"
#include "dispatch/workspace.h"
#include "numerics/int8_fold_rules.h"

namespace a4w4::cpu {
namespace {

constexpr int64_t kChunkTiles = StagedOperandLayout::kChunkTiles, kTileRows = 128;
constexpr uint32_t kFactorShift = 2;  // B's factor 2^(base - 129): the 1/4 of both doublings

// 2 * |E2M1| of codes 0..7.
constexpr std::array<int, 8> kDoubledMagnitudes = {0, 1, 2, 3, 4, 6, 8, 12};

// The 4 scale bytes of K tile `tile` of a plain row, blocks past K as fold_rules::padded_block.
std::array<uint32_t, 4> tile_scales(const uint8_t* row_scales, int64_t tile, int64_t blocks) {
  std::array<uint32_t, 4> s{};
  for (int j = 0; j < 4; ++j) s[j] = row_scales[fold_rules::padded_block(tile, j, blocks)];
  return s;
}

// One row's chunk folded (fold_tile's rule for an operand without high blocks): each present
// tile's scales (tile_scales), base and whether it folds, and the row's summary word over the
// chunk.
struct ChunkFold {
  std::array<std::array<uint32_t, 4>, kChunkTiles> scales{};
  std::array<uint32_t, kChunkTiles> base{};
  std::array<bool, kChunkTiles> ok{};
  uint32_t summary = 0;
};
ChunkFold fold_chunk(const uint8_t* row_scales, int64_t chunk, int64_t k_tiles, int64_t blocks) {
  ChunkFold f;
  std::array<uint32_t, kChunkTiles> tile_lo, tile_hi;
  uint32_t chunk_lo = 0xFFu, chunk_hi = 0u;
  for (int64_t t = 0; t < kChunkTiles; ++t) {
    tile_lo[t] = 0xFFu, tile_hi[t] = 0u;
    if (chunk * kChunkTiles + t >= k_tiles) continue;
    f.scales[t] = tile_scales(row_scales, chunk * kChunkTiles + t, blocks);
    for (uint32_t s : f.scales[t])
      tile_lo[t] = std::min(tile_lo[t], s), tile_hi[t] = std::max(tile_hi[t], s);
    chunk_lo = std::min(chunk_lo, tile_lo[t]), chunk_hi = std::max(chunk_hi, tile_hi[t]);
  }
  const bool uniform = fold_rules::range_folds(chunk_lo, chunk_hi);
  uint32_t bad = 0, lo = 0xFFu, hi = 0u;
  for (int64_t t = 0; t < kChunkTiles && chunk * kChunkTiles + t < k_tiles; ++t) {
    f.base[t] = uniform ? chunk_lo : tile_lo[t];
    f.ok[t] = uniform || fold_rules::range_folds(tile_lo[t], tile_hi[t]);
    bad |= f.ok[t] ? 0u : 1u;
    lo = std::min(lo, f.base[t]), hi = std::max(hi, f.base[t]);
  }
  f.summary = fold_rules::summary_word(0, uniform ? 0u : 1u, bad, hi, lo);
  return f;
}

}  // namespace

void prepare_int8_part(const PrepareWeightProblem& p, const ExecConfig& exec) {
  const PreparedInt8Layout layout(p.n, p.k);
  const StagedOperandLayout& l = layout.b;
  uint8_t* part = p.prepared + layout.offset;
  std::fill_n(part, l.bytes, uint8_t{0});  // the gaps between the parts too
  auto* values = reinterpret_cast<int8_t*>(part + l.values);
  auto* summaries = reinterpret_cast<uint32_t*>(part + l.summaries);
  const auto put_factor = [&](int64_t tile, int64_t row, float factor) {
    std::memcpy(part + l.factors + 4 * (tile * l.padded_rows + fold_rules::factor_slot(row)),
                &factor, 4);
  };
  const int64_t blocks = p.k / 32;
#pragma omp parallel for num_threads(exec.num_threads) schedule(static)
  for (int64_t n = 0; n < l.padded_rows; ++n) {
    if (n >= l.rows) {  // padding rows: factor 1 (TMA zero-fills their values)
      for (int64_t tile = 0; tile < l.k_tiles; ++tile) put_factor(tile, n, 1.0f);
      continue;
    }
    const uint8_t* row_scales = p.b.scale + n * p.b.scale_stride;
    const uint8_t* row_codes = p.b.data + n * p.b.stride_bytes;
    for (int64_t chunk = 0; chunk < l.chunks; ++chunk) {
      const ChunkFold f = fold_chunk(row_scales, chunk, l.k_tiles, blocks);
      summaries[chunk * l.rows + n] = f.summary;
      for (int64_t t = 0; t < kChunkTiles && chunk * kChunkTiles + t < l.k_tiles; ++t) {
        const int64_t tile = chunk * kChunkTiles + t;
        const uint32_t base = f.base[t];
        put_factor(tile, n, base >= kFactorShift ? std::bit_cast<float>((base - kFactorShift) << 23)
                                                 : 0.0f);
        // A tile that does not fold keeps its values unshifted (its tiles of D take the exact
        // path, which never reads them).
        for (int64_t k = 128 * tile; k < 128 * tile + 128; ++k) {
          const uint32_t shift = f.ok[t] ? f.scales[t][(k / 32) % 4] - base : 0u;
          const int code = k < p.k ? (row_codes[k / 2] >> (4 * (k % 2))) & 0xF : 0;
          const int magnitude = kDoubledMagnitudes[code & 7] << shift;
          values[n * l.padded_k + k] = static_cast<int8_t>(code & 8 ? -magnitude : magnitude);
        }
      }
    }
  }
  // Per 128 rows: every row's summaries combined, and per chunk whether every row folded it to
  // one base (summarize_kernel).
  auto* block_summaries = reinterpret_cast<uint32_t*>(part + l.block_summaries);
  auto* chunk_uniform = reinterpret_cast<uint32_t*>(part + l.chunk_uniform);
  for (int64_t block = 0; block < l.padded_rows / kTileRows; ++block) {
    fold_rules::FoldSummary all;
    const int64_t end = std::min(l.rows, (block + 1) * kTileRows);
    for (int64_t chunk = 0; chunk < l.chunks; ++chunk) {
      fold_rules::FoldSummary rows;
      for (int64_t n = block * kTileRows; n < end; ++n) rows.add(summaries[chunk * l.rows + n]);
      chunk_uniform[block * l.chunks + chunk] = rows.mixed ? 0u : 1u;
      all.add(rows.word());
    }
    all.mixed = 0;  // per chunk above (summarize_block)
    block_summaries[block] = all.word();
  }
}

}  // namespace a4w4::cpu
