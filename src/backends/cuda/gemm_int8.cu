// The int8 tensor-core family for large M, exact mode (cuda.int8_128x128, cuda.int8_128x192,
// cuda.int8_bconv_128x128): a staging pass, then a persistent, warp-specialised sm_90a GEMM on int8
// operands.
// docs/cuda-backend.md has the exactness argument and the measured rate.
//
// int8 wgmma sums exactly in int32 (docs/cuda-backend.md, "What Hopper's wgmma accumulation
// keeps"), so a whole K tile of 128 (4 blocks of 32) is one chain of MMAs once the block scales are
// folded into the operands (int8_fold.cuh): each row's blocks are shifted by d = scale - base,
// d in [0, 3], so every operand is an integer |2 * E2M1 * 2^d| <= 96. The consumers promote the
// int32 sums to fp32: acc += sum * 2^(baseA - 127) * 2^(baseB - 129) (per accumulator row and
// column), exact powers-of-two scalings in fp32's normal range, so the fp32 add is the only
// rounding. The base is per (row, chunk of 8 K tiles) where the row's blocks of the whole chunk
// lie within 4 binades (typical data), and the int32 chain then runs over the chunk and is promoted
// once per 1024 K (|sum| <= 1024 * 96 * 96 < 2^24, still exact): the promotion, the largest cost
// after the MMAs, runs 8 times less often. Elsewhere the base is per (row, K tile), promoted per
// step. A's high blocks (outlier channels: a block more than 3 binades above its tile's smallest in
// some row) stay unshifted on their own scales, each one more MMA and promotion per step.
//
// Why a staging pass: converting E2M1 inside the GEMM costs ~1.4 integer instructions per value,
// and a 128 x 128 tile converts every A row N / 128 times and every B row M / 128 times, which kept
// the in-kernel design integer-bound at ~320 TOP/s. Staging converts each value once, into the
// caller's workspace (a4w4_context_set_workspace; layout in dispatch/workspace.h):
// - stage_kernel: a CTA takes 32 rows x one chunk of A or B (for A it first finds the high blocks
//   of the rows' 128-row block and chunk; a thread per (row, K tile) folds the scales, then a
//   warp per row converts the codes, a lane per half block), writes each block folded as 32
//   int8, per (K tile, row) its factor 2^(base - 127) (A) or 2^(base - 129) (B) and A's high
//   scales in [tile][row] order (one bulk copy per step later), and a summary per (chunk, row):
//   any tile not folding, one base or not, smallest and largest base.
// - summarize_kernel: the summaries per 128 rows (and whether A's rows have high blocks), and per
//   (128 rows, chunk) whether every row folded the chunk to one base with no high blocks.
// - gemm_int8_kernel, two variants (the second only for tiles whose A rows have high blocks): one
//   CTA per SM loops over 128 x 128 (or 128 x 192) tiles of D whose verdict holds (every (row, K
//   tile) folds, fp32's range holds; a 192-wide tile: for the 128-column blocks of B it overlaps
//   that fold, folded_parts); the producer thread fills a ring of stages by TMA (A's 128 and B's
//   128 or 192 rows x 128 int8, 128-byte swizzled) and bulk copies (the step's factors); two
//   consumer warpgroups (64 rows each) issue 4 wgmma m64n128k32 (m64n192k32) s8.s8 -> s32 per step,
//   promote and release the stage; while one promotes, the other's MMAs keep the tensor cores
//   busy.
// cuda.int8_bconv_128x128 (kConvert) stages A and only B's factors and shifts: a stage brings B's
// codes (128 rows x 64 bytes), and two converter warpgroups fold them into a ring of B rows, so no
// pass writes and reads B as int8 (the larger part of the staging at small M). Its converters bound
// the main loop (bench/RESULTS.md), so it wins only where B's staging dominates.
// A tile whose verdict fails (a row's normal blocks of a K tile spreading over more than 4
// binades, a NaN scale, exponents outside fp32's safe range) runs on a bf16-family launch over
// exactly those tiles (gemm_bf16_unfolded_tiles), or where that family cannot run the problem on
// the generic kernel's exact tile code (generic_tile.cuh) here: exact in-block sums, double
// accumulation, NaN propagated. Rows past M or N are never stored (TMA zero-fills them; their
// factors are 1).
#include <cuda.h>

#include <algorithm>
#include <string>

#include "api/error.h"
#include "backends/cuda/cluster_launch.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_utils.h"
#include "backends/cuda/device_common.cuh"
#include "backends/cuda/generic_tile.cuh"
#include "backends/cuda/int8_fold.cuh"
#include "backends/cuda/persistent_tiles.cuh"
#include "backends/cuda/pipeline.cuh"
#include "backends/cuda/sm90_family.cuh"
#include "backends/cuda/tensor_map.h"
#include "backends/cuda/wgmma.cuh"
#include "dispatch/workspace.h"
#include "numerics/weight_layout.h"

namespace a4w4::cuda {
namespace {

constexpr int kTileM = 128;  // tile widths (kTileN): 128, or 192 (cuda.int8_128x192)
constexpr int kStepK = 128;  // one fold tile: 4 blocks, 128 int8 = one 128-byte swizzled row
constexpr int kWarpgroup = 128;
// Warpgroups: the producer, two consumers, and (kConvert) two converters of B's codes.
template <bool kConvert>
inline constexpr int kThreads = (kConvert ? 5 : 3) * kWarpgroup;
// Registers per thread by role: the launch gives 168 (3 warpgroups) or 96 (5) per thread, and the
// producer (and the converters) hand part of theirs to the consumers: setmaxnreg moves registers
// inside the CTA's allocation only, so the roles' sum may not exceed it.
template <bool kConvert>
inline constexpr int kLaunchRegisters = kConvert ? 96 : 168;
template <bool kConvert>
inline constexpr int kProducerRegisters = kConvert ? 24 : 40;
template <bool kConvert>
inline constexpr int kConsumerRegisters = kConvert ? 184 : 232;
constexpr int kConverterRegisters = 40;
static_assert(2 * kConsumerRegisters<false> + kProducerRegisters<false> <=
              3 * kLaunchRegisters<false>);
static_assert(2 * kConsumerRegisters<true> + kProducerRegisters<true> + 2 * kConverterRegisters <=
              5 * kLaunchRegisters<true>);
static_assert(kLaunchRegisters<true> * kThreads<true> <= 65536 &&
              kLaunchRegisters<false> * kThreads<false> <= 65536);

constexpr int kGroupM = 8;  // tiles walk 8 tile rows per column, so B tiles are reused from L2
constexpr int kChunkTiles = StagedOperandLayout::kChunkTiles;  // K tiles per chunk
// Named barriers: 0 is __syncthreads; the generic fallback tiles of consumer warpgroups 0 and 1
// sync on 2 and 3 (persistent::exact_rows).

using fold_rules::factor_slot;

// One operand's staged form in the workspace (dispatch/workspace.h).
struct StagedOperand {
  int8_t* values;           // [rows][padded_k], folded int8
  float* factors;           // [k_tiles][padded_rows]: 2^(base - 127) (A) or 2^(base - 129) (B)
  uint32_t* summaries;      // [chunks][rows]: fold::FoldSummary words
  uint32_t* blocks;         // [padded_rows / 128]: the same over 128 rows (fold::StagedVerdicts)
  uint32_t* chunk_uniform;  // [padded_rows / 128][chunks]: 1 when every row folds the chunk to
                            // one base and no tile of it has high blocks
  // A only (nullptr for B): per (128 rows, K tile) the mask of high blocks (bit j: block j of the
  // tile), each kept apart on its own scale (values unshifted), and per (K tile, row) a word of
  // their scale bytes (byte j: block j's; 0 for blocks not high).
  uint8_t* high_masks;
  uint32_t* high_scales;
  // B only: per (K tile, row) its 4 blocks' shifts (byte j: block j's d), for the kernel that
  // converts B's codes itself. The staging pass writes values and shifts where these are set.
  uint32_t* shifts;
  int64_t rows, padded_rows, padded_k;
  int k_tiles, chunks;
};

// What the staging pass reads and writes for one operand.
struct StagingJob {
  PackedOperand source;
  StagedOperand staged;
  uint32_t factor_shift;  // 0 for A, 2 for B: the 1/4 that undoes the doubling of both operands
  bool permute_factors;   // B: in the order the consumers read them (factor_slot)
  int64_t tasks;          // (row, chunk) pairs: padded_rows * chunks, 32 per CTA turn
};

// The rings' barriers. Stages: producer (TMA) -> consumers -> producer; with kConvert, a stage
// also goes to the converters (its empty barrier then waits for them too), which fill a
// converted-B slot: converters -> consumers -> converters.
template <int kStages, int kConvStages>
struct Control {
  uint64_t full[kStages], empty[kStages], conv_full[kConvStages], conv_empty[kConvStages];
};

// The GEMM kernel's shared memory for tiles kTileN wide. kHigh: the variant for tiles whose A rows
// have high blocks, which also needs 64 zero A rows (the operand of the blocks a chain leaves out)
// and A's high scale words beside each stage's factors. kConvert: a stage holds B's codes instead
// of its rows (half the bytes), and the converters fold them into a shallower ring of B rows.
// 192-wide tiles (40 KB a stage) keep 5 stages and no room for the generic exact tile code: their
// tiles that do not fold always go to the bf16 family.
template <bool kHigh, bool kConvert, int kTileN>
struct Layout {
  static_assert(kTileN == 128 || (kTileN == 192 && !kConvert));
  static constexpr int kStages = kTileN == 128 ? 6 : 5, kConvStages = kConvert ? 3 : 1;
  static constexpr bool kGenericTiles = !kConvert && kTileN == 128;
  static constexpr int kABytes = kTileM * kStepK;        // A's 128 rows x 128 int8, swizzled
  static constexpr int kBBytes = kTileN * kStepK;        // B's rows, the same
  static constexpr int kRawBytes = kTileN * kStepK / 2;  // B's codes of a step
  // A's rows, then B's rows (or kConvert its codes).
  static constexpr int kStageBytes = kABytes + (kConvert ? kRawBytes : kBBytes);
  static constexpr int kConvOffset = kStages * kStageBytes;
  static constexpr int kZeroOffset = kConvOffset + (kConvert ? kConvStages * kBBytes : 0);
  static constexpr int kZeroBytes = kHigh ? 64 * kStepK : 0;
  static constexpr int kFactorOffset = kZeroOffset + kZeroBytes;
  // Per stage: A's 128 factors (normal blocks), B's 128, then (kHigh) A's 128 high scale words,
  // then (kConvert) B's 128 shift words.
  static constexpr int kShiftWords = kTileM + kTileN + (kHigh ? kTileM : 0);
  static constexpr int kFactorFloats = kShiftWords + (kConvert ? kTileN : 0);
  static constexpr int kGenericOffset = kFactorOffset + kStages * kFactorFloats * 4;
  static constexpr int kControlOffset =
      kGenericOffset +
      (kGenericTiles ? static_cast<int>((2 * sizeof(generic::TileSmem) + 15) / 16 * 16) : 0);
  static constexpr size_t kBytes = kControlOffset + sizeof(Control<kStages, kConvStages>);
  static constexpr uint32_t kStageTxBytes = kStageBytes + kFactorFloats * 4;
  static_assert(kStageBytes % wgmma::kSwizzleAtomBytes == 0);
  static_assert(kBytes <= 227 * 1024);
};
template <bool kHigh, bool kConvert, int kTileN>
using ControlOf =
    Control<Layout<kHigh, kConvert, kTileN>::kStages, Layout<kHigh, kConvert, kTileN>::kConvStages>;
template <int kTileN>
inline constexpr int kAccOf = kTileN / 2;  // accumulators per consumer thread and set
// B's 128-row blocks that a tile overlaps: one, or two for a 192-wide tile (at n0 = 192 t it spans
// blocks 3 t / 2 and 3 t / 2 + 1).
template <int kTileN>
inline constexpr int kBlocksOf = kTileN == 128 ? 1 : 2;

// ---- The staging pass ----------------------------------------------------------------------

// 16 elements of a block (8 packed bytes, element i in nibble i) folded by the block's tables:
// their 16 int8.
__device__ __forceinline__ uint4 fold_half_block(uint2 codes, const fold::BlockTables& t) {
  const uint2 x = fold::to_s8x8(codes.x, t), y = fold::to_s8x8(codes.y, t);
  return make_uint4(x.x, x.y, y.x, y.y);
}

// One 32-element block (16 packed bytes) folded with shift d: its 32 int8, elements 0..15 in lo.
__device__ __forceinline__ void fold_block(uint4 codes, uint32_t shift, uint4& lo, uint4& hi) {
  const fold::BlockTables t = fold::block_tables(shift);
  lo = fold_half_block(make_uint2(codes.x, codes.y), t);
  hi = fold_half_block(make_uint2(codes.z, codes.w), t);
}

// Half `half` (elements 16 half .. 16 half + 15) of block `block` of row `row` of op (plain, or a
// prepared B of version 2, whose tiles hold each row's blocks in plain order): its 8 bytes of
// codes.
__device__ __forceinline__ uint2 half_block_codes(const PackedOperand& op, int64_t row, int block,
                                                  int half, int blocks) {
  const int64_t offset =
      op.layout == A4W4_LAYOUT_PLAIN
          ? row * op.stride_bytes + 16 * block
          : layout::row_run_offset(row, block / layout::kTileBlocks, (blocks + 3) / 4) +
                16 * (block % layout::kTileBlocks);
  return __ldg(reinterpret_cast<const uint2*>(op.data + offset) + half);
}

// x combined by op over the 8 lanes of a lane's group (one row's K tiles of a chunk in
// stage_kernel), or over its group of 4 (one K tile's blocks: chunk_high_blocks). Full-mask
// shuffles: every lane of the warp calls them.
struct Min {
  __device__ uint32_t operator()(uint32_t x, uint32_t y) const { return min(x, y); }
};
struct Max {
  __device__ uint32_t operator()(uint32_t x, uint32_t y) const { return max(x, y); }
};
struct Or {
  __device__ uint32_t operator()(uint32_t x, uint32_t y) const { return x | y; }
};
template <int kLanes, typename Op>
__device__ __forceinline__ uint32_t across_lanes(uint32_t x, Op op) {
#pragma unroll
  for (int mask = 1; mask < kLanes; mask *= 2) x = op(x, __shfl_xor_sync(0xFFFFFFFFu, x, mask));
  return x;
}

// 2^(base - 127 - shift) as fp32 (0 below its range).
__device__ __forceinline__ float base_factor(uint32_t base, uint32_t shift) {
  return __uint_as_float(base >= shift ? (base - shift) << 23 : 0u);
}

// The smallest and largest byte of `bytes` among those whose bit is set in `mask` (bit j: byte
// j); 0xFF and 0 when none is.
__device__ __forceinline__ void byte_range(uint32_t bytes, uint32_t mask, uint32_t& lo,
                                           uint32_t& hi) {
  lo = 0xFFu, hi = 0u;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t b = (bytes >> (8 * j)) & 0xFFu;
    if ((mask >> j) & 1u) lo = min(lo, b), hi = max(hi, b);
  }
}

// The 4 scale bytes of K tile `tile` of `row` (block 4 tile + j in byte j), blocks past K as
// fold_rules::padded_block.
__device__ __forceinline__ uint32_t tile_scales(const PackedOperand& op, int64_t row, int tile,
                                                int blocks) {
  if (op.layout == A4W4_LAYOUT_PLAIN)
    return fold::scale_word(op.scale + row * op.scale_stride, tile, blocks, fold::scale_words(op));
  // A prepared B holds a row's 4 scales of a tile in one word (zero past K).
  const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(
      op.scale + layout::prepared_scale_offset(row, 4 * int64_t{tile}, (blocks + 3) / 4)));
  return fold_rules::padded_scale_word(w, blocks - 4 * tile);
}

// What a CTA's staging of 32 rows x one chunk leaves in shared memory: per (tile of the chunk,
// row) the factor, the high scale word and the shifts (the values' pass reads them), per row the
// summary; then they leave in coalesced stores.
struct ChunkOut {
  // Rows of 36 words: thread 8 r + t writes word 36 t + r, so a warp's 4 rows x 8 tiles land in
  // 32 different banks (rows of 32 put them in 4).
  static constexpr int kRow = 32 + 32 / kChunkTiles;
  static_assert(kChunkTiles * (kRow - 32) == 32);
  float factors[kChunkTiles][kRow];
  uint32_t high_scales[kChunkTiles][kRow];
  uint32_t shifts[32][kChunkTiles];
  uint32_t summaries[32];
};

// One (row, K tile) of a chunk, one thread each, the 8 tiles of a row in 8 adjacent lanes. The
// tile's blocks are split into the normal ones, folded to one base, and its high blocks (A's:
// chunk_high, bit 4 t + j for block j of tile t; none for B), each kept on its own scale. Where the
// row's normal blocks of the whole chunk spread over at most kMaxShift + 1 binades, they fold to
// the chunk's smallest scale (one factor over the chunk); otherwise each tile's to its own. Rows in
// [rows, padded_rows) only get factor 1. kHigh: the operand has high blocks (A); B's staging
// compiles without them.
template <bool kHigh>
__device__ __forceinline__ void fold_tile(const StagingJob& job, int64_t row, int chunk, int t,
                                          int r, int blocks, uint32_t chunk_high, ChunkOut& out) {
  const StagedOperand& s = job.staged;
  const int tile = chunk * kChunkTiles + t;
  const bool present = tile < s.k_tiles, real = row < s.rows;
  const uint32_t scales = present && real ? tile_scales(job.source, row, tile, blocks) : 0u;
  // Blocks past K take part as the tile's first block (tile_scales); tiles past K do not.
  const uint32_t high = kHigh && present && real ? (chunk_high >> (4 * t)) & 0xFu : 0u;
  const uint32_t normal = present && real ? 0xFu & ~high : 0u;
  uint32_t tile_lo, tile_hi;
  byte_range(scales, normal, tile_lo, tile_hi);
  const uint32_t chunk_lo = across_lanes<8>(tile_lo, Min{});
  const uint32_t chunk_hi = across_lanes<8>(tile_hi, Max{});
  const bool uniform = fold::range_folds(chunk_lo, chunk_hi);
  const uint32_t base = uniform ? chunk_lo : tile_lo;
  // A high block is a group of its own: shift 0, its scale its base (fold_row's rule: not NaN).
  uint32_t high_lo = 0xFFu, high_hi = 0u, high_bytes = 0u;
  if constexpr (kHigh) {
    byte_range(scales, high, high_lo, high_hi);
    high_bytes = (high & 1u) * 0xFFu | (high & 2u) * 0x7F80u | (high & 4u) * 0x3FC000u |
                 (high & 8u) * 0x1FE00000u;  // 0xFF in byte j where block j is high
  }
  const bool has_normal = tile_lo <= tile_hi, has_high = high_lo <= high_hi;
  const bool ok = (uniform || fold::range_folds(tile_lo, tile_hi)) &&
                  (!has_high || fold::range_folds(high_hi, high_hi));
  // The normal blocks' shifts (every normal byte is at least the base: no borrows; the high ones'
  // bytes are set to the base first, so theirs are 0). A tile that does not fold is never read.
  const uint32_t bases = base * 0x01010101u;
  const uint32_t shifts =
      ok && has_normal ? ((scales & ~high_bytes) | (bases & high_bytes)) - bases : 0u;
  out.shifts[r][t] = shifts;
  if (present) {
    out.factors[t][r] = !real ? 1.0f : has_normal ? base_factor(base, job.factor_shift) : 0.0f;
    out.high_scales[t][r] = real ? scales & high_bytes : 0x7F7F7F7Fu;
  }
  // The row's summary over the chunk (only tiles that are present count).
  fold::FoldSummary summary;
  summary.bad = across_lanes<8>(present && !ok ? 1u : 0u, Or{});
  summary.mixed = uniform ? 0u : 1u;
  const uint32_t lo = min(has_normal ? base : 0xFFu, has_high ? high_lo : 0xFFu);
  const uint32_t hi = max(has_normal ? base : 0u, has_high ? high_hi : 0u);
  summary.lo = across_lanes<8>(lo, Min{});
  summary.hi = across_lanes<8>(hi, Max{});
  if (t == 0) out.summaries[r] = summary.word();
}

// A CTA of 8 warps: the summary of one 128-row block of A or B, every row's chunks combined, and
// per chunk whether every row of the block folded it to one base with no high blocks (warp w takes
// chunks w, w + 8..).
__device__ void summarize_block(const StagedOperand& s, int block, int warp, int lane,
                                uint32_t (&words)[8]) {
  fold::FoldSummary summary;
  const int64_t first = int64_t{block} * kTileM, end = min(s.rows, first + kTileM);
  for (int chunk = warp; chunk < s.chunks; chunk += 8) {
    fold::FoldSummary rows;
#pragma unroll
    for (int i = 0; i < kTileM / 32; ++i) {
      const int64_t row = first + 32 * i + lane;
      if (row < end) rows.add(s.summaries[chunk * s.rows + row]);
    }
    // A chunk with high blocks in any tile is promoted tile by tile too.
    const int tile = chunk * kChunkTiles + lane;
    const bool high = s.high_masks != nullptr && lane < kChunkTiles && tile < s.k_tiles &&
                      s.high_masks[int64_t{block} * s.k_tiles + tile] != 0;
    const bool any_high = __any_sync(0xFFFFFFFFu, high);
    const uint32_t mixed = __reduce_or_sync(0xFFFFFFFFu, rows.mixed | (any_high ? 1u : 0u));
    if (lane == 0) s.chunk_uniform[int64_t{block} * s.chunks + chunk] = mixed ? 0u : 1u;
    summary.add(rows.word());
    summary.high |= any_high ? 1u : 0u;
  }
  summary.mixed = 0;  // per chunk above
  summary.bad = __reduce_or_sync(0xFFFFFFFFu, summary.bad);
  summary.high = __reduce_or_sync(0xFFFFFFFFu, summary.high);
  summary.lo = __reduce_min_sync(0xFFFFFFFFu, summary.lo);
  summary.hi = __reduce_max_sync(0xFFFFFFFFu, summary.hi);
  if (lane == 0) words[warp] = summary.word();
  __syncthreads();
  if (threadIdx.x == 0) {
    fold::FoldSummary all;
    for (uint32_t w : words) all.add(w);
    s.blocks[block] = all.word();
  }
}

__global__ void __launch_bounds__(256) summarize_kernel(const __grid_constant__ StagedOperand a,
                                                        const __grid_constant__ StagedOperand b) {
  __shared__ uint32_t words[8];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int block = static_cast<int>(blockIdx.x),
            blocks_a = static_cast<int>(a.padded_rows / kTileM);
  if (block < blocks_a) {
    summarize_block(a, block, warp, lane, words);
  } else {
    summarize_block(b, block - blocks_a, warp, lane, words);
  }
}

// A's high blocks in one (128-row block, chunk), found by the staging CTA of 8 warps that stages
// 32 of those rows (each of the block's 4 finds the same; the first also writes them to
// high_masks for the GEMM and summarize_kernel): a block is high in a K tile when, in some row,
// its scale lies more than kMaxShift above the tile's smallest — an outlier channel, which puts
// the same blocks high in many rows. Keeping them apart keeps such tiles on the int8 path
// (fold_tile). NaN scales count as not high (their tiles do not fold anyway). Lane l takes block
// l of the chunk, warp w 16 of the rows; every thread gets the chunk's mask (bit l: block l).
__device__ uint32_t chunk_high_blocks(const PackedOperand& a, const StagedOperand& s,
                                      int64_t row_block, int chunk, int blocks,
                                      uint32_t (&votes)[8]) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int block = chunk * 32 + lane;
  const int64_t first = row_block * kTileM + warp * (kTileM / 8);
  const uint8_t* scales = a.scale + block;
  bool high = false;
#pragma unroll
  for (int i = 0; i < kTileM / 8; ++i) {
    const int64_t row = first + i;
    const uint32_t scale =
        block < blocks && row < s.rows ? __ldg(scales + row * a.scale_stride) : 0xFFu;
    const uint32_t lo = across_lanes<4>(scale, Min{});
    high |= scale != 0xFFu && scale > lo + fold::kMaxShift;
  }
  votes[warp] = __ballot_sync(0xFFFFFFFFu, high);
  __syncthreads();
  uint32_t mask = 0;
#pragma unroll
  for (int w = 0; w < 8; ++w) mask |= votes[w];
  return mask;
}

// A CTA stages 32 rows x one chunk at a time. Its warps first load the codes (warp w the rows
// 4 w .. 4 w + 3, each as two runs of 16 blocks, lane l the half l % 2 of block l / 2 of a run:
// coalesced 8-byte loads, all in flight together), then fold the scales, thread 8 r + t taking
// row r's K tile t (fold_tile: a few dozen instructions per tile, where a warp per row spent as
// many per block), then convert the codes with the shifts left in shared memory: a half block
// becomes 16 int8, so each store of a warp writes 512 contiguous bytes (whole 32-byte sectors;
// a lane per block wrote half sectors, and the stores had bound the pass at L2). The factors,
// high scale words and summaries leave in coalesced stores (one 128-byte row of factors per K
// tile).
__global__ void __launch_bounds__(256, 4)
    stage_kernel(const __grid_constant__ StagingJob a, const __grid_constant__ StagingJob b,
                 int blocks) {
  constexpr int kRowsPerWarp = 4;
  static_assert(kRowsPerWarp * 8 == 32, "8 warps of 256 threads take the group's 32 rows");
  __shared__ ChunkOut out;
  __shared__ uint32_t votes[8];  // chunk_high_blocks'
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int half = lane % 2;
  const int64_t groups_a = a.tasks / 32, groups = groups_a + b.tasks / 32;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const bool is_a = group < groups_a;
    const StagingJob& job = is_a ? a : b;
    const StagedOperand& s = job.staged;
    const int64_t first = (is_a ? group : group - groups_a) * 32;  // its first task
    const int64_t row0 = first % s.padded_rows;
    const int chunk = static_cast<int>(first / s.padded_rows);
    uint2 codes[kRowsPerWarp][2];  // [row][run]
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t row = row0 + kRowsPerWarp * warp + i;
#pragma unroll
      for (int run = 0; run < 2; ++run) {
        const int block = chunk * 32 + 16 * run + lane / 2;
        codes[i][run] = s.values != nullptr && row < s.rows && block < blocks
                            ? half_block_codes(job.source, row, block, half, blocks)
                            : make_uint2(0, 0);
      }
    }
    const int r = static_cast<int>(threadIdx.x) / 8, t = static_cast<int>(threadIdx.x) % 8;
    if (is_a) {
      const int64_t row_block = row0 / kTileM;
      const uint32_t chunk_high = chunk_high_blocks(a.source, s, row_block, chunk, blocks, votes);
      const int tile = chunk * kChunkTiles + static_cast<int>(threadIdx.x);
      if (row0 % kTileM == 0 && threadIdx.x < kChunkTiles && tile < s.k_tiles)
        s.high_masks[row_block * s.k_tiles + tile] =
            static_cast<uint8_t>((chunk_high >> (4 * threadIdx.x)) & 0xFu);
      fold_tile<true>(a, row0 + r, chunk, t, r, blocks, chunk_high, out);
    } else {
      fold_tile<false>(b, row0 + r, chunk, t, r, blocks, 0u, out);
    }
    __syncthreads();
    if (s.values != nullptr) {
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int rr = kRowsPerWarp * warp + i;
        if (row0 + rr >= s.rows) continue;  // padding rows are never read (TMA zero-fills them)
#pragma unroll
        for (int run = 0; run < 2; ++run) {
          const int block_of_chunk = 16 * run + lane / 2, block = chunk * 32 + block_of_chunk;
          if (block / 4 >= s.k_tiles) continue;
          const uint32_t shift =
              (out.shifts[rr][block_of_chunk / 4] >> (8 * (block_of_chunk % 4))) & 0xFFu;
          const uint4 folded = fold_half_block(codes[i][run], fold::block_tables(shift));
          *reinterpret_cast<uint4*>(s.values + (row0 + rr) * s.padded_k + int64_t{block} * 32 +
                                    16 * half) = folded;
        }
      }
    }
    // Thread (t, r): K tile t of the chunk, row r of the 32.
    const int64_t row = row0 + lane;
    const int tile = chunk * kChunkTiles + warp;
    if (tile < s.k_tiles) {
      const int64_t slot = job.permute_factors ? factor_slot(row) : row;
      s.factors[tile * s.padded_rows + slot] = out.factors[warp][lane];
      if (is_a) s.high_scales[tile * s.padded_rows + slot] = out.high_scales[warp][lane];
      if (s.shifts != nullptr) s.shifts[tile * s.padded_rows + row] = out.shifts[lane][warp];
    }
    if (warp == 0 && row < s.rows) s.summaries[chunk * s.rows + row] = out.summaries[lane];
    __syncthreads();
  }
}

// ---- The GEMM ----------------------------------------------------------------------------

// Thread 0 of the producers: the stages of one foldable tile (ring use `use` onwards), each once
// the consumers have released its slot: A's 128 rows of the step and B's (staged rows, or kConvert
// its codes: 128 rows x 64 bytes) by TMA, the factors (and B's shift words) by bulk copies, all
// completing on the slot's full barrier.
template <bool kHigh, bool kConvert, int kTileN>
__device__ void produce_stages(const StagedOperand& a, const StagedOperand& b, int64_t m0,
                               int64_t n0, const CUtensorMap* map_a, const CUtensorMap* map_b,
                               uint8_t* smem, ControlOf<kHigh, kConvert, kTileN>& ctl,
                               uint32_t& use) {
  using L = Layout<kHigh, kConvert, kTileN>;
  for (int step = 0; step < a.k_tiles; ++step, ++use) {
    const uint32_t s = use % L::kStages;
    pipeline::wait(&ctl.empty[s], ((use / L::kStages) & 1) ^ 1);
    uint8_t* stage = smem + s * L::kStageBytes;
    float* factors = reinterpret_cast<float*>(smem + L::kFactorOffset) + s * L::kFactorFloats;
    pipeline::arrive_expect_tx(&ctl.full[s], L::kStageTxBytes);
    pipeline::tma_load_2d(stage, map_a, &ctl.full[s], kStepK * step, static_cast<int>(m0));
    if constexpr (kConvert) {
      pipeline::tma_load_2d(stage + L::kABytes, map_b, &ctl.full[s], kStepK / 2 * step,
                            static_cast<int>(n0));
      pipeline::bulk_load(factors + L::kShiftWords, b.shifts + step * b.padded_rows + n0,
                          kTileN * 4, &ctl.full[s]);
    } else {
      pipeline::tma_load_2d(stage + L::kABytes, map_b, &ctl.full[s], kStepK * step,
                            static_cast<int>(n0));
    }
    pipeline::bulk_load(factors, a.factors + step * a.padded_rows + m0, kTileM * 4, &ctl.full[s]);
    pipeline::bulk_load(factors + kTileM, b.factors + step * b.padded_rows + n0, kTileN * 4,
                        &ctl.full[s]);
    if constexpr (kHigh)
      pipeline::bulk_load(factors + kTileM + kTileN, a.high_scales + step * a.padded_rows + m0,
                          kTileM * 4, &ctl.full[s]);
  }
}

// Whether the kHigh variant of the kernel takes the tile at row m0 (its A rows have high blocks).
__device__ __forceinline__ bool has_high_blocks(const StagedOperand& a, int64_t m0) {
  return fold::FoldSummary::has_high(a.blocks[m0 / kTileM]);
}

// Which 128-column blocks of B that the tile at (m0, n0) overlaps fold with its A rows (bit i:
// block n0 / 128 + i; a 192-wide tile overlaps up to two). The int8 kernel runs a tile where any
// does and stores the columns of those that do; the bf16 launch after it takes the others (its
// 128-wide tiles are skipped where every 128-column part folded), so each column is stored once.
template <int kTileN>
__device__ __forceinline__ uint32_t folded_parts(const fold::StagedVerdicts& verdicts,
                                                 const GemmProblem& p, int64_t m0, int64_t n0) {
  uint32_t parts = 0;
  for (int64_t n = n0 / 128 * 128, i = 0; n < n0 + kTileN && n < p.n; n += 128, ++i)
    if (verdicts.folds(m0, n)) parts |= 1u << i;
  return parts;
}

// The producer (thread 0 of the first warpgroup; the others only hand their registers over): the
// stages of each foldable tile of this variant.
template <bool kHigh, bool kConvert, int kTileN>
__device__ void produce_tiles(const GemmProblem& p, const StagedOperand& a, const StagedOperand& b,
                              fold::StagedVerdicts verdicts, const CUtensorMap* map_a,
                              const CUtensorMap* map_b, uint8_t* smem,
                              ControlOf<kHigh, kConvert, kTileN>& ctl) {
  if (threadIdx.x != 0) return;
  uint32_t use = 0;  // stages of foldable tiles so far: slot and phase of the ring
  for (int tile = blockIdx.x; tile < persistent::tile_count<kTileM, kTileN>(p); tile += gridDim.x) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    if (folded_parts<kTileN>(verdicts, p, m0, n0) != 0 && has_high_blocks(a, m0) == kHigh)
      produce_stages<kHigh, kConvert, kTileN>(a, b, m0, n0, map_a, map_b, smem, ctl, use);
  }
}

// The converters (kConvert; thread c = 0..255 of two warpgroups): per stage, B's codes folded with
// the shift words beside them into a slot of the converted ring, as TMA lays out staged rows
// (128-byte swizzled: chunk j of row r at j ^ (r % 8)); then the slot is full and the stage's
// codes consumed. Thread c takes block c % 4 of rows c / 4 and c / 4 + 64: a warp's loads read 512
// contiguous bytes, and the 16-byte stores of a quarter-warp (2 rows x 4 blocks) hit 8 distinct
// bank groups. They run ahead of the MMAs by up to the converted ring's depth.
template <bool kHigh>
__device__ void convert_tiles(const GemmProblem& p, const StagedOperand& a,
                              fold::StagedVerdicts verdicts, uint8_t* smem,
                              ControlOf<kHigh, true, 128>& ctl, int c) {
  constexpr int kTileN = 128;
  using L = Layout<kHigh, true, kTileN>;
  const int block = c % 4;
  uint32_t use = 0;
  for (int tile = blockIdx.x; tile < persistent::tile_count<kTileM, kTileN>(p); tile += gridDim.x) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    if (folded_parts<kTileN>(verdicts, p, m0, n0) == 0 || has_high_blocks(a, m0) != kHigh) continue;
    for (int step = 0; step < a.k_tiles; ++step, ++use) {
      const uint32_t s = use % L::kStages, slot = use % L::kConvStages;
      pipeline::wait(&ctl.full[s], (use / L::kStages) & 1);
      pipeline::wait(&ctl.conv_empty[slot], ((use / L::kConvStages) & 1) ^ 1);
      const uint8_t* codes_of_step = smem + s * L::kStageBytes + L::kABytes;
      const uint32_t* shifts = reinterpret_cast<const uint32_t*>(smem + L::kFactorOffset) +
                               s * L::kFactorFloats + L::kShiftWords;
      uint8_t* rows = smem + L::kConvOffset + slot * L::kBBytes;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = c / 4 + 64 * i;
        const uint4 codes = *reinterpret_cast<const uint4*>(codes_of_step + r * 64 + 16 * block);
        uint4 lo, hi;
        fold_block(codes, (shifts[r] >> (8 * block)) & 0xFFu, lo, hi);
        uint8_t* row = rows + r * 128;
        *reinterpret_cast<uint4*>(row + (((2 * block) ^ (r % 8)) << 4)) = lo;
        *reinterpret_cast<uint4*>(row + (((2 * block + 1) ^ (r % 8)) << 4)) = hi;
      }
      wgmma::fence_shared_for_async();  // the MMAs read the rows through the async proxy
      pipeline::arrive(&ctl.conv_full[slot]);
      pipeline::arrive(&ctl.empty[s]);  // its codes and shifts are read
    }
  }
}

// acc += sum * 2^(ea - 127) * 2^(eb - 129) for this thread's accumulators of one step (the
// factors beside its stage): the factor product and the term are exact (the verdict keeps them in
// fp32's normal range), the add rounds once. The int32 -> fp32 conversion (exact: |sum| < 2^24)
// is __int2float_rn, one I2FP.F32.S32 on sm_90 (not the quarter-rate I2F that
// fold::TileSumScale and fold::small_int_to_float avoid): 3 instructions per accumulator.
template <int kTileN>
__device__ __forceinline__ void promote(float (&acc)[kAccOf<kTileN>],
                                        const int32_t (&sum)[kAccOf<kTileN>], float fa0, float fa1,
                                        const float* b_factors) {
  // B's factors of columns 8 j + 2 q + {0, 1}, j = 2 jj, 2 jj + 1: one float4 (factor_slot).
  const float4* fb4 = reinterpret_cast<const float4*>(b_factors + 4 * (threadIdx.x % 4));
#pragma unroll
  for (int jj = 0; jj < kTileN / 16; ++jj) {
    const float4 f = fb4[4 * jj];
    const float fb[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * jj + h;
      acc[4 * j + 0] = fmaf(__int2float_rn(sum[4 * j + 0]), fa0 * fb[2 * h], acc[4 * j + 0]);
      acc[4 * j + 1] = fmaf(__int2float_rn(sum[4 * j + 1]), fa0 * fb[2 * h + 1], acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(__int2float_rn(sum[4 * j + 2]), fa1 * fb[2 * h], acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(__int2float_rn(sum[4 * j + 3]), fa1 * fb[2 * h + 1], acc[4 * j + 3]);
    }
  }
}

// A consumer thread's accumulators (wgmma's layout, wgmma.cuh) as kDtype pairs into D from
// `index` (its first row and column pair): every pair inside D, D's pairs aligned.
template <a4w4_dtype kDtype, int kAcc>
__device__ __forceinline__ void store_tile_pairs(void* d, int64_t index, int64_t stride,
                                                 const float (&acc)[kAcc]) {
#pragma unroll
  for (int j = 0; j < kAcc / 4; ++j) {
    store_pair_as<kDtype>(d, index + 8 * j, acc[4 * j], acc[4 * j + 1]);
    store_pair_as<kDtype>(d, index + 8 * stride + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
  }
}

// The same into a 16-bit D from `index` (its first row, the tile's first column), D's rows
// 16-byte aligned (vectors_aligned): per four column blocks of 8 the quad's lanes exchange their
// pairs (a 4 x 4 transpose in two rounds of shuffles: lane i's word k ends as lane k's word i),
// so that each lane holds 8 adjacent columns of one block and stores them at once. A warp store
// then writes 64 contiguous bytes of each of 8 rows where a pair store wrote 16 (half sectors,
// four times as many stores: the family's epilogue stalled on the store queue).
template <a4w4_dtype kDtype, int kAcc>
__device__ __forceinline__ void store_tile_vectors(void* d, int64_t index, int64_t stride,
                                                   const float (&acc)[kAcc]) {
  const int q = threadIdx.x % 4;
  const bool odd = (q & 1) != 0, upper = (q & 2) != 0;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int group = 0; group < kAcc / 16; ++group) {
      uint32_t v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = 4 * group + i;
        v[i] = packed_pair<kDtype>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
      // Round 1 with lane q ^ 1: the words whose index differs from q in bit 0; round 2 with
      // lane q ^ 2 in bit 1.
      uint32_t r0 = __shfl_xor_sync(0xFFFFFFFFu, odd ? v[0] : v[1], 1);
      uint32_t r1 = __shfl_xor_sync(0xFFFFFFFFu, odd ? v[2] : v[3], 1);
      if (odd)
        v[0] = r0, v[2] = r1;
      else
        v[1] = r0, v[3] = r1;
      r0 = __shfl_xor_sync(0xFFFFFFFFu, upper ? v[0] : v[2], 2);
      r1 = __shfl_xor_sync(0xFFFFFFFFu, upper ? v[1] : v[3], 2);
      if (upper)
        v[0] = r0, v[1] = r1;
      else
        v[2] = r0, v[3] = r1;
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(d) + index + 8 * stride * h +
                                8 * (4 * group + q)) = make_uint4(v[0], v[1], v[2], v[3]);
    }
}

// One k32 MMA of the tile width over a consumer warpgroup's 64 rows (4 per 128-K step).
template <int kTileN>
__device__ __forceinline__ void mma(int32_t (&sums)[kAccOf<kTileN>], uint64_t a, uint64_t b,
                                    bool accumulate) {
  if constexpr (kTileN == 128) {
    wgmma::mma_s8_m64n128k32(sums, a, b, accumulate);
  } else {
    wgmma::mma_s8_m64n192k32(sums, a, b, accumulate);
  }
}

// A consumer warpgroup (wg = 0, 1: rows m0 + 64 wg of the tile). Tiles that do not fold are left
// to the bf16 family's launch that follows (exact_here false) or run the generic exact tile code
// (never with kConvert, which the bf16 family always follows).
template <bool kHigh, bool kConvert, int kTileN>
__device__ void consume_tiles(const GemmProblem& p, const StagedOperand& a, const StagedOperand& b,
                              fold::StagedVerdicts verdicts, bool exact_here, uint8_t* smem,
                              ControlOf<kHigh, kConvert, kTileN>& ctl, int wg) {
  using L = Layout<kHigh, kConvert, kTileN>;
  constexpr int kAcc = kAccOf<kTileN>;
  constexpr int kStages = L::kStages;
  const int thread = threadIdx.x % kWarpgroup;
  constexpr int kConvStages = L::kConvStages;
  // Ring use u's stage has landed and (kConvert) its B rows are converted.
  const auto wait_stage = [&](uint32_t u) {
    pipeline::wait(&ctl.full[u % kStages], (u / kStages) & 1);
    if constexpr (kConvert) pipeline::wait(&ctl.conv_full[u % kConvStages], (u / kConvStages) & 1);
  };
  // Ring use u's MMAs (and factors) are done with its stage (and converted B rows).
  const auto release = [&](uint32_t u) {
    pipeline::arrive(&ctl.empty[u % kStages]);
    if constexpr (kConvert) pipeline::arrive(&ctl.conv_empty[u % kConvStages]);
  };
  // The descriptors of ring use u's A rows (this warpgroup's 64) and B rows.
  const auto a_descriptor = [&](uint32_t u) {
    return wgmma::descriptor(wgmma::shared_address(smem + u % kStages * L::kStageBytes)) +
           wg * 64 * 128 / 16;
  };
  const auto b_descriptor = [&](uint32_t u) {
    return wgmma::descriptor(
        wgmma::shared_address(kConvert ? smem + L::kConvOffset + u % kConvStages * L::kBBytes
                                       : smem + u % kStages * L::kStageBytes + L::kABytes));
  };
  const float* all_factors = reinterpret_cast<const float*>(smem + L::kFactorOffset);
  const int warp = thread / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
  const int acc_row = 64 * wg + 16 * warp + g;  // this thread's first accumulator row in the tile
  uint32_t use = 0;
  float acc[kAcc];
  int32_t sums[kAcc];
  for (int tile = blockIdx.x; tile < persistent::tile_count<kTileM, kTileN>(p); tile += gridDim.x) {
    int64_t m0, n0;
    persistent::tile_origin<kTileM, kTileN, kGroupM>(p, tile, m0, n0);
    const int64_t rows0 = m0 + 64 * wg;
    const uint32_t parts = folded_parts<kTileN>(verdicts, p, m0, n0);
    if (parts == 0) {
      // The tiles that do not fold: here in the plain variant only.
      if constexpr (!kHigh && L::kGenericTiles) {
        if (exact_here)
          persistent::exact_rows<kTileN>(
              p, rows0, n0, thread, reinterpret_cast<generic::TileSmem*>(smem + L::kGenericOffset),
              wg);
      }
      continue;
    }
    if (has_high_blocks(a, m0) != kHigh) continue;

#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    // Chunks of 8 K tiles: where every A row and every B row of the tile folded the chunk to one
    // base (factors constant over it), the int32 sums run on over the chunk's steps and are
    // promoted once (|sum| <= 1024 * 96 * 96 < 2^24: still exact as fp32); elsewhere per step.
    // (Pointers and descriptors below are recomputed where used: registers are short.)
    // A 192-wide tile overlaps two 128-row blocks of B (B's padded rows, a multiple of 384, hold
    // the second's words at the last tile too).
    const auto chunk_uniform = [&](int chunk) {
      uint32_t uniform = __ldg(a.chunk_uniform + m0 / kTileM * a.chunks + chunk);
#pragma unroll
      for (int i = 0; i < kBlocksOf<kTileN>; ++i)
        uniform &= __ldg(b.chunk_uniform + (n0 / 128 + i) * b.chunks + chunk);
      return uniform;
    };
    uint32_t uniform_next = chunk_uniform(0);
    // A's high-block mask of this tile's rows at K tile `step`.
    const auto high_mask = [&](int step) {
      return static_cast<uint32_t>(__ldg(a.high_masks + m0 / kTileM * a.k_tiles + step));
    };
    // Issues the 4 MMAs of stage s, the blocks outside `mask` (bit j: the K tile's block j) on
    // zero A rows: the chain starts from zero unless `carry` (the chunk's sums so far run on).
    // (Every MMA is issued: ptxas serialises wgmma issued under a branch.)
    const auto issue = [&](uint32_t u, uint32_t mask, bool carry) {
      const uint64_t zero_desc =
          kHigh ? wgmma::descriptor(wgmma::shared_address(smem + L::kZeroOffset)) : 0;
      // One descriptor per operand: the K steps add byte offsets / 16 to its address field
      // (shared addresses stay below 2^18, so the 14-bit field never carries).
      const uint64_t a_desc = a_descriptor(u), b_desc = b_descriptor(u);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        mma<kTileN>(sums, (!kHigh || ((mask >> kk) & 1u) ? a_desc : zero_desc) + 32 * kk / 16,
                    b_desc + 32 * kk / 16, kk > 0 || carry);
      wgmma::commit();
    };
    // Issues the one MMA of ring use u's block j (a chain of its own, from zero).
    const auto issue_block = [&](uint32_t u, int j) {
      const uint64_t a_desc = a_descriptor(u), b_desc = b_descriptor(u);
      wgmma::fence();
      mma<kTileN>(sums, a_desc + 2 * j, b_desc + 2 * j, false);
      wgmma::commit();
    };
    const auto stage_factors = [&](uint32_t s) { return all_factors + s * L::kFactorFloats; };
    for (int chunk = 0, step = 0; chunk < a.chunks; ++chunk) {
      const bool uniform = uniform_next != 0;
      if (chunk + 1 < a.chunks) uniform_next = chunk_uniform(chunk + 1);
      const int chunk_end = min(step + kChunkTiles, a.k_tiles);
      if (uniform && chunk_end - step == kChunkTiles) {
        // A whole chunk on one base (and no high blocks): its 8 steps' MMAs chain in int32 with
        // one step in flight (the previous step's stage is released once the next step's MMAs
        // are issued), and the sums are promoted once at its end. Unrolled: no MMA stays in
        // flight across a loop's back edge (ptxas would serialise them).
#pragma unroll
        for (int i = 0; i < kChunkTiles; ++i) {
          wait_stage(use + i);
          issue(use + i, 0xFu, i > 0);
          if (i > 0) {
            wgmma::wait<1>();
            release(use + i - 1);
          }
        }
        wgmma::wait<0>();
        wgmma::fence_operands(sums);
        const uint32_t last = use + kChunkTiles - 1;
        const float* f = stage_factors(last % kStages);
        promote<kTileN>(acc, sums, f[acc_row], f[acc_row + 8], f + kTileM);
        release(last);
        step += kChunkTiles, use += kChunkTiles;
        continue;
      }
      // Otherwise step by step: the normal blocks' sums promoted after each step (or at the end
      // of a short uniform chunk), then each high block's (one MMA, its own scale).
      const int chunk_first = step;
      uint32_t high_next = kHigh ? high_mask(step) : 0u;
      for (; step < chunk_end; ++step, ++use) {
        const uint32_t s = use % kStages, high = high_next;
        if (kHigh && step + 1 < chunk_end) high_next = high_mask(step + 1);
        const float* f = stage_factors(s);
        wait_stage(use);
        issue(use, 0xFu & ~high, uniform && step > chunk_first);
        wgmma::wait<0>();
        wgmma::fence_operands(sums);
        if (!uniform || step + 1 == chunk_end)
          promote<kTileN>(acc, sums, f[acc_row], f[acc_row + 8], f + kTileM);
        if (kHigh && high != 0) {
          const uint32_t* scales = reinterpret_cast<const uint32_t*>(f + kTileM + kTileN);
          const uint32_t scales0 = scales[acc_row], scales1 = scales[acc_row + 8];
          for (int j = 0; j < 4; ++j) {
            if (((high >> j) & 1u) == 0) continue;
            issue_block(use, j);
            wgmma::wait<0>();
            wgmma::fence_operands(sums);
            // 2^(scale - 127): the scale byte into fp32's exponent field.
            promote<kTileN>(acc, sums, __uint_as_float(((scales0 >> (8 * j)) & 0xFFu) << 23),
                            __uint_as_float(((scales1 >> (8 * j)) & 0xFFu) << 23), f + kTileM);
          }
        }
        release(use);  // its MMAs and factors are done
      }
    }

    // D = acc, then alpha, beta C, bias and one rounding; without those, fp32 pairs rounded
    // straight to D's dtype. The common case (that, aligned pairs and every column of a tile
    // inside D stored here) is one short run of code per dtype: with the checks and every
    // dtype's conversion at each of the tile's store sites, the executed instructions of an
    // epilogue were spread over ~150 KB of SASS (instruction-cache misses on every tile).
    // (A 16-bit D whose rows are not 16-byte aligned takes the general loop.)
    const bool plain = plain_epilogue(p), aligned = pairs_aligned(p);
    constexpr uint32_t kAllParts = (1u << kBlocksOf<kTileN>)-1;
    if (plain && (p.d_dtype == A4W4_DTYPE_F32 ? aligned : vectors_aligned(p)) &&
        rows0 + 64 <= p.m && n0 + kTileN <= p.n && parts == kAllParts) {
      const int64_t index = (rows0 + 16 * warp + g) * p.d_stride + n0;
      if (p.d_dtype == A4W4_DTYPE_BF16) {
        store_tile_vectors<A4W4_DTYPE_BF16>(p.d, index, p.d_stride, acc);
      } else if (p.d_dtype == A4W4_DTYPE_F16) {
        store_tile_vectors<A4W4_DTYPE_F16>(p.d, index, p.d_stride, acc);
      } else {
        store_tile_pairs<A4W4_DTYPE_F32>(p.d, index + 2 * q, p.d_stride, acc);
      }
      continue;
    }
#pragma unroll
    for (int j = 0; j < kTileN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t m = rows0 + 16 * warp + g + 8 * h;
        const int64_t n = n0 + 8 * j + 2 * q;
        if (m >= p.m || n >= p.n) continue;
        // Columns of a 128-column block that does not fold are the bf16 launch's.
        if (kTileN != 128 && ((parts >> ((n0 % 128 + 8 * j) / 128)) & 1u) == 0) continue;
        const float x = acc[4 * j + 2 * h], y = acc[4 * j + 2 * h + 1];
        if (plain) {
          store_pair(p, m, n, x, y, aligned);
        } else {
          store_output(p, m, n, static_cast<double>(x));
          if (n + 1 < p.n) store_output(p, m, n + 1, static_cast<double>(y));
        }
      }
  }
}

// Two variants run one after the other: the plain one takes the foldable tiles whose A rows have
// no high blocks (and, with exact_here, the tiles that do not fold), the kHigh one the others
// (its CTAs return at once when A has none: the common case pays nothing for it). kConvert: B's
// codes are converted in the kernel (cuda.int8_bconv_128x128) by two more warpgroups. kTileN: 128
// or 192 (cuda.int8_128x192: 13% fewer shared-memory bytes per MAC, docs/cuda-backend.md).
template <bool kHigh, bool kConvert, int kTileN>
__global__ void __launch_bounds__(kThreads<kConvert>, 1)
    gemm_int8_kernel(const __grid_constant__ GemmProblem p, const __grid_constant__ StagedOperand a,
                     const __grid_constant__ StagedOperand b,
                     const __grid_constant__ CUtensorMap map_a,
                     const __grid_constant__ CUtensorMap map_b, int exact_here) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using L = Layout<kHigh, kConvert, kTileN>;
  // The launch after this one (the high-block variant after the plain one, the bf16 launch over
  // unfolded tiles after that) may start early; each waits for this grid before it exits or
  // touches D, so that its end still implies this one's.
  allow_next_grid();
  if constexpr (kHigh) {
    // Return at once unless some 128-row block of A has high blocks (warp 0 looks: the summaries
    // are the staging pass's, complete before the plain variant started).
    bool any = false;
    if (threadIdx.x < 32) {
      for (int64_t block = threadIdx.x; block < a.padded_rows / kTileM; block += 32)
        any = any || fold::FoldSummary::has_high(a.blocks[block]);
    }
    if (nothing_to_do_after_previous_grid(any)) return;  // launched early (run_family)
  }
  extern __shared__ __align__(1024) uint8_t smem[];  // no static shared memory: stages stay
                                                     // 1024-aligned
  auto& ctl = *reinterpret_cast<ControlOf<kHigh, kConvert, kTileN>*>(smem + L::kControlOffset);
  if (threadIdx.x == 0) {
    for (int i = 0; i < L::kStages; ++i) {
      pipeline::init(&ctl.full[i], 1);  // the producer's expect-tx arrival
      // Every consumer thread (and kConvert every converter thread).
      pipeline::init(&ctl.empty[i], (kConvert ? 4 : 2) * kWarpgroup);
    }
    for (int i = 0; i < L::kConvStages; ++i) {
      pipeline::init(&ctl.conv_full[i], 2 * kWarpgroup);   // every converter thread
      pipeline::init(&ctl.conv_empty[i], 2 * kWarpgroup);  // every consumer thread
    }
    pipeline::fence_init();
    pipeline::prefetch_map(&map_a);
    pipeline::prefetch_map(&map_b);
  }
  if constexpr (kHigh) {
    for (int i = static_cast<int>(threadIdx.x); i < L::kZeroBytes / 16; i += kThreads<kConvert>)
      reinterpret_cast<uint4*>(smem + L::kZeroOffset)[i] = make_uint4(0, 0, 0, 0);
    wgmma::fence_shared_for_async();  // the MMAs read the zeros through the async proxy
  }
  __syncthreads();
  const fold::StagedVerdicts verdicts{a.blocks, b.blocks};
  const int role = static_cast<int>(threadIdx.x) / kWarpgroup;
  if (role == 0) {
    pipeline::shrink_registers<kProducerRegisters<kConvert>>();
    produce_tiles<kHigh, kConvert, kTileN>(p, a, b, verdicts, &map_a, &map_b, smem, ctl);
  } else if (role <= 2) {
    pipeline::grow_registers<kConsumerRegisters<kConvert>>();
    consume_tiles<kHigh, kConvert, kTileN>(p, a, b, verdicts, exact_here != 0, smem, ctl, role - 1);
  } else if constexpr (kConvert) {
    pipeline::shrink_registers<kConverterRegisters>();
    convert_tiles<kHigh>(p, a, verdicts, smem, ctl, static_cast<int>(threadIdx.x) - 3 * kWarpgroup);
  }
#else
  (void)p, (void)a, (void)b, (void)map_a, (void)map_b, (void)exact_here;
  __trap();
#endif
}

// The staged view of `rows` rows at `base` of the workspace.
StagedOperand staged_operand(uint8_t* base, const StagedOperandLayout& l) {
  return StagedOperand{reinterpret_cast<int8_t*>(base + l.values),
                       reinterpret_cast<float*>(base + l.factors),
                       reinterpret_cast<uint32_t*>(base + l.summaries),
                       reinterpret_cast<uint32_t*>(base + l.block_summaries),
                       reinterpret_cast<uint32_t*>(base + l.chunk_uniform),
                       l.high_masks ? base + l.high_masks : nullptr,
                       l.high_scales ? reinterpret_cast<uint32_t*>(base + l.high_scales) : nullptr,
                       l.shifts ? reinterpret_cast<uint32_t*>(base + l.shifts) : nullptr,
                       l.rows,
                       l.padded_rows,
                       l.padded_k,
                       static_cast<int>(l.k_tiles),
                       static_cast<int>(l.chunks)};
}

// The folded int8 rows as a 2D tensor, loaded `box_rows` rows x 128 bytes at a time, 128-byte
// swizzled.
CUtensorMap staged_map(const StagedOperand& s, int box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(s.padded_k), static_cast<cuuint64_t>(s.rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(s.padded_k)};
  const cuuint32_t box[2] = {kStepK, static_cast<cuuint32_t>(box_rows)};
  return tma::tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, reinterpret_cast<uint8_t*>(s.values),
                         dims, strides, box, "cuda.int8 (staged)", CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

std::string gemm_int8_why_not(const GemmProblem& p) {
  if (p.k % 32 != 0) return "K must be a multiple of 32";
  // The staging pass reads a prepared B's tiles in 16-byte pieces and its scales as 4-byte words.
  if (std::string why = tma::sm90_operands_why_not(p, 4); !why.empty()) return why;
  // Only A is staged where B's int8 form comes with the weight.
  const StagingWorkspace w(p.m, p.n, p.k);
  const int64_t needed = p.b_int8 != nullptr ? w.a.bytes : w.bytes;
  if (p.workspace == nullptr || static_cast<int64_t>(p.workspace_bytes) < needed)
    return std::string(p.b_int8 != nullptr ? "it stages A" : "it stages A and B") +
           " in the context's workspace: needs " + std::to_string(needed) +
           " bytes on CUDA device " + std::to_string(p.device.ordinal) +
           " (a4w4_gemm_workspace_size, a4w4_context_set_workspace), has " +
           std::to_string(p.workspace == nullptr ? 0 : p.workspace_bytes);
  return {};
}

namespace {
// The kernels of the family without the generic exact tile code (no room beside their stages, or
// their converters) leave every tile that does not fold to the bf16 family, which must take p.
std::string bf16_takes_unfolded_why_not(const GemmProblem& p) {
  if (std::string why = gemm_bf16_why_not(p); !why.empty())
    return why + " (the bf16 family takes the tiles that do not fold)";
  return {};
}
}  // namespace

std::string gemm_int8_128x192_why_not(const GemmProblem& p) {
  if (std::string why = gemm_int8_why_not(p); !why.empty()) return why;
  return bf16_takes_unfolded_why_not(p);
}

std::string gemm_int8_bconv_why_not(const GemmProblem& p) {
  if (std::string why = gemm_int8_why_not(p); !why.empty()) return why;
  if (p.b.layout != A4W4_LAYOUT_PLAIN)
    return "B must be plain (cuda.int8_128x128 stages a prepared B)";
  return bf16_takes_unfolded_why_not(p);
}

namespace {

// The staging pass over A and/or B (a job of no tasks stages nothing), then the summaries of
// every 128-row block of the operands staged (A's blocks first).
void stage_operands(a4w4_device device, cudaStream_t stream, const StagingJob& job_a,
                    const StagingJob& job_b, int64_t k) {
  // Enough resident CTAs to keep the loads in flight; each loops over groups of 32 tasks.
  const int64_t ctas = std::min<int64_t>((job_a.tasks + job_b.tasks) / 32,
                                         int64_t{device_info(device.ordinal).sm_count} * 4);
  stage_kernel<<<static_cast<unsigned>(ctas), 256, 0, stream>>>(job_a, job_b,
                                                                static_cast<int>(k / 32));
  check_launch("stage_kernel");
  const int64_t row_blocks =
      (job_a.staged.padded_rows + (job_b.tasks > 0 ? job_b.staged.padded_rows : 0)) / kTileM;
  summarize_kernel<<<static_cast<unsigned>(row_blocks), 256, 0, stream>>>(job_a.staged,
                                                                          job_b.staged);
  check_launch("summarize_kernel");
}

// One call of the family: the staging pass (A's and B's chunks, A's high blocks folded apart; then
// the summaries), both GEMM variants, and the bf16 family over the tiles that do not fold where it
// applies (exact, ~300 TFLOP/s), else the generic exact tile code inside the plain variant
// (~30 TFLOP/s). kConvert: B is not staged (only its factors and shifts are); the GEMM converts
// its codes. kTileN: the GEMM's tile width (128, or 192 where the bf16 family applies). A weight
// prepared with its int8 form (p.b_int8) brings B staged: only A is.
template <bool kConvert, int kTileN>
void run_family(const GemmProblem& p) {
  DeviceGuard guard(p.device.ordinal);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const StagingWorkspace w(p.m, p.n, p.k);
  auto* base = static_cast<uint8_t*>(p.workspace);
  const StagedOperand a = staged_operand(base, w.a);
  const bool b_prepared = !kConvert && p.b_int8 != nullptr;
  // The GEMM only reads B's int8 part (const_cast: the staging job over it has no tasks).
  StagedOperand b =
      b_prepared ? staged_operand(const_cast<uint8_t*>(p.b_int8), PreparedInt8Layout(p.n, p.k).b)
                 : staged_operand(base + w.b_offset, w.b);
  if constexpr (kConvert) {
    b.values = nullptr;  // B: factors and shifts only
  } else {
    b.shifts = nullptr;  // B: staged as int8
  }
  const StagingJob job_a{p.a, a, 0, false, a.padded_rows * a.chunks};
  const StagingJob job_b{p.b, b, 2, true, b_prepared ? 0 : b.padded_rows * b.chunks};
  stage_operands(p.device, stream, job_a, job_b, p.k);

  const CUtensorMap map_a = staged_map(a, kTileM);
  // kConvert: B's codes, 128 rows x 64 bytes per K tile (rows and bytes past the end read as 0).
  const CUtensorMap map_b =
      kConvert ? tma::packed_map(p.b, p.n, p.k, kStepK / 2, kTileN, "cuda.int8_bconv")
               : staged_map(b, kTileN);
  const int64_t grid = std::min<int64_t>(persistent::tiles<kTileM, kTileN>(p.m, p.n),
                                         device_info(p.device.ordinal).sm_count);
  const bool bf16_takes_the_rest = gemm_bf16_why_not(p).empty();
  const auto launch = [&](auto kernel, size_t bytes, const char* what, LaunchOrder order) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               what);
    launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), kThreads<kConvert>, bytes, p.stream,
                  what, order, false, p, a, b, map_a, map_b, bf16_takes_the_rest ? 0 : 1);
  };
  launch(gemm_int8_kernel<false, kConvert, kTileN>, Layout<false, kConvert, kTileN>::kBytes,
         "gemm_int8_kernel", LaunchOrder::kAfterPrevious);
  // The two launches that usually return at once start early (programmatic dependent launch:
  // each decides from the staging pass's summaries, then waits for the launch before it), so
  // that their launch latency overlaps the GEMM. H100, 1024x8192^2: 172 -> 168 us.
  launch(gemm_int8_kernel<true, kConvert, kTileN>, Layout<true, kConvert, kTileN>::kBytes,
         "gemm_int8_kernel (high blocks)", LaunchOrder::kEarly);
  if (bf16_takes_the_rest) gemm_bf16_unfolded_tiles(p, fold::StagedVerdicts{a.blocks, b.blocks});
}

}  // namespace

void gemm_int8_128x128(const GemmProblem& p, const ExecConfig&) {
  run_family<false, 128>(p);
}

void gemm_int8_128x192(const GemmProblem& p, const ExecConfig&) {
  run_family<false, 192>(p);
}

void gemm_int8_bconv_128x128(const GemmProblem& p, const ExecConfig&) {
  run_family<true, 128>(p);
}

void prepare_int8_part(const PrepareWeightProblem& p) {
  DeviceGuard guard(p.device.ordinal);
  const PreparedInt8Layout l(p.n, p.k);
  const StagedOperand b = staged_operand(p.prepared + l.offset, l.b);
  // Zeros first, so that the gaps between the parts (alignment) are deterministic too.
  check_cuda(cudaMemsetAsync(p.prepared + l.offset, 0, static_cast<size_t>(l.b.bytes),
                             static_cast<cudaStream_t>(p.stream)),
             "prepare_weight (int8 part)");
  const StagingJob none{p.b, StagedOperand{}, 0, false, 0};
  stage_operands(p.device, static_cast<cudaStream_t>(p.stream), none,
                 StagingJob{p.b, b, 2, true, b.padded_rows * b.chunks}, p.k);
}

}  // namespace a4w4::cuda
